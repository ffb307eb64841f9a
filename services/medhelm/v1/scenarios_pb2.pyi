from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListBenchmarksRequest(_message.Message):
    __slots__ = ("category",)
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    category: str
    def __init__(self, category: _Optional[str] = ...) -> None: ...

class BenchmarkInfo(_message.Message):
    __slots__ = ("name", "category", "subcategory", "access", "main_metric", "spec_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    SUBCATEGORY_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    MAIN_METRIC_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    category: str
    subcategory: str
    access: str
    main_metric: str
    spec_json: str
    def __init__(self, name: _Optional[str] = ..., category: _Optional[str] = ..., subcategory: _Optional[str] = ..., access: _Optional[str] = ..., main_metric: _Optional[str] = ..., spec_json: _Optional[str] = ...) -> None: ...

class ListBenchmarksResponse(_message.Message):
    __slots__ = ("benchmarks",)
    BENCHMARKS_FIELD_NUMBER: _ClassVar[int]
    benchmarks: _containers.RepeatedCompositeFieldContainer[BenchmarkInfo]
    def __init__(self, benchmarks: _Optional[_Iterable[_Union[BenchmarkInfo, _Mapping]]] = ...) -> None: ...

class DescribeBenchmarkRequest(_message.Message):
    __slots__ = ("name", "args")
    class ArgsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    args: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., args: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StreamInstancesRequest(_message.Message):
    __slots__ = ("run_spec_json", "shard_index", "shard_count", "max_prompt_tokens")
    RUN_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    SHARD_INDEX_FIELD_NUMBER: _ClassVar[int]
    SHARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    run_spec_json: str
    shard_index: int
    shard_count: int
    max_prompt_tokens: int
    def __init__(self, run_spec_json: _Optional[str] = ..., shard_index: _Optional[int] = ..., shard_count: _Optional[int] = ..., max_prompt_tokens: _Optional[int] = ...) -> None: ...

class InstanceItem(_message.Message):
    __slots__ = ("position", "instance_json", "prompt_json")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_JSON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_JSON_FIELD_NUMBER: _ClassVar[int]
    position: int
    instance_json: str
    prompt_json: str
    def __init__(self, position: _Optional[int] = ..., instance_json: _Optional[str] = ..., prompt_json: _Optional[str] = ...) -> None: ...
