from medhelm.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AggregateRunRequest(_message.Message):
    __slots__ = ("run_spec_json", "instance_result_json")
    RUN_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    run_spec_json: str
    instance_result_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_spec_json: _Optional[str] = ..., instance_result_json: _Optional[_Iterable[str]] = ...) -> None: ...

class RunStats(_message.Message):
    __slots__ = ("run", "stats_json", "instances", "status")
    RUN_FIELD_NUMBER: _ClassVar[int]
    STATS_JSON_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    run: str
    stats_json: str
    instances: int
    status: str
    def __init__(self, run: _Optional[str] = ..., stats_json: _Optional[str] = ..., instances: _Optional[int] = ..., status: _Optional[str] = ...) -> None: ...

class AggregateSuiteRequest(_message.Message):
    __slots__ = ("suite",)
    SUITE_FIELD_NUMBER: _ClassVar[int]
    suite: str
    def __init__(self, suite: _Optional[str] = ...) -> None: ...

class SuiteStats(_message.Message):
    __slots__ = ("suite", "runs")
    SUITE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    suite: str
    runs: _containers.RepeatedCompositeFieldContainer[RunStats]
    def __init__(self, suite: _Optional[str] = ..., runs: _Optional[_Iterable[_Union[RunStats, _Mapping]]] = ...) -> None: ...
