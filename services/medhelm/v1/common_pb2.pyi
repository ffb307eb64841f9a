from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoringItem(_message.Message):
    __slots__ = ("position", "instance_json", "prompt_json", "completion_json")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_JSON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_JSON_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_JSON_FIELD_NUMBER: _ClassVar[int]
    position: int
    instance_json: str
    prompt_json: str
    completion_json: str
    def __init__(self, position: _Optional[int] = ..., instance_json: _Optional[str] = ..., prompt_json: _Optional[str] = ..., completion_json: _Optional[str] = ...) -> None: ...

class ScoringSetup(_message.Message):
    __slots__ = ("run_spec_json", "metric_spec_json")
    RUN_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    METRIC_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    run_spec_json: str
    metric_spec_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_spec_json: _Optional[str] = ..., metric_spec_json: _Optional[_Iterable[str]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("setup", "item")
    SETUP_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    setup: ScoringSetup
    item: ScoringItem
    def __init__(self, setup: _Optional[_Union[ScoringSetup, _Mapping]] = ..., item: _Optional[_Union[ScoringItem, _Mapping]] = ...) -> None: ...

class ScoreStreamRequest(_message.Message):
    __slots__ = ("setup", "item")
    SETUP_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    setup: ScoringSetup
    item: ScoringItem
    def __init__(self, setup: _Optional[_Union[ScoringSetup, _Mapping]] = ..., item: _Optional[_Union[ScoringItem, _Mapping]] = ...) -> None: ...

class StatValue(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: float
    def __init__(self, name: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...

class MetricResult(_message.Message):
    __slots__ = ("position", "stats", "judgements_json", "judge_usage_json")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    JUDGEMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    JUDGE_USAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    position: int
    stats: _containers.RepeatedCompositeFieldContainer[StatValue]
    judgements_json: str
    judge_usage_json: str
    def __init__(self, position: _Optional[int] = ..., stats: _Optional[_Iterable[_Union[StatValue, _Mapping]]] = ..., judgements_json: _Optional[str] = ..., judge_usage_json: _Optional[str] = ...) -> None: ...
