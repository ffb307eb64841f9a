"""HELM's ``per_instance_stats.json`` read fast (pieces of whole entries decoded by msgspec) and read checked
(ijson, every problem named): the fast reading is only a shortcut. On every file, the import gives what the
checked reading alone gives: the same values in the same order, or the same one-line error (issue 30 F)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medhelm.errors import ConfigError
from medhelm.files import json_array_pieces
from medhelm.store.helm_stats import per_instance, per_instance_checked, per_instance_fast

DATA = Path(__file__).parents[1] / "data" / "helm"
REAL_FILES = sorted(DATA.rglob("per_instance_stats.json"))


def _outcome(read, path: Path):
    try:
        return "read", read(path)
    except ConfigError as err:
        return "refused", str(err)


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.parent.name[:40])
@pytest.mark.parametrize("chunk", [1, 37, 4096, 4 << 20])
def test_real_helm_files_are_read_fast_with_the_checked_readings_values(path: Path, chunk: int) -> None:
    fast = per_instance_fast(path, chunk=chunk)
    checked = per_instance_checked(path)
    assert fast is not None  # crfm-helm's own files take the fast reading
    assert list(fast.items()) == list(checked.items())  # instance order
    assert all(list(fast[i].items()) == list(checked[i].items()) for i in fast)  # stat order, every float equal


@pytest.mark.parametrize("text,items", [
    ("[]", []), (" \n[ ]\t", []), ('[1]', [1]), ('[{"a": [1, 2]}, 3]', [{"a": [1, 2]}, 3]),
    ('["x,y", "[,]", "\\"", "\\\\", {"k,": "]},{"}]', ["x,y", "[,]", '"', "\\", {"k,": "]},{"}]),
    ('[[1,[2,3]],{"a":{"b":[4,5]}},"\\\\\\",",6]', [[1, [2, 3]], {"a": {"b": [4, 5]}}, '\\",', 6]),
])
def test_array_pieces_are_whole_items_whatever_the_chunk(tmp_path: Path, text: str, items: list) -> None:
    path = tmp_path / "a.json"
    path.write_text(text)
    for chunk in (1, 2, 3, 5, 8, 4096):
        pieces = list(json_array_pieces(path, chunk=chunk))
        assert [x for piece in pieces for x in json.loads(b"[" + piece + b"]")] == items
        assert all(json.loads(b"[" + piece + b"]") for piece in pieces[:-1]) or len(pieces) == 1


@pytest.mark.parametrize("text", ['{"a": [1, 2]}', '[1] x', '1', '', '[1, 2', 'x[1]'])
def test_array_pieces_of_what_is_not_one_array(tmp_path: Path, text: str) -> None:
    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(ValueError):
        for piece in json_array_pieces(path, chunk=3):
            json.loads(b"[" + piece + b"]")


# ------------------------------------------------------------------ any file: the result of the checked reading

# HELM's shape (most files), then one entry of another shape put anywhere (or none): every odd value a checked
# reading refuses or reads its own way (null, text, lists, empty stats, perturbations, numbers no double holds)
FINITE = st.one_of(st.integers(-3, 5), st.floats(allow_nan=False, allow_infinity=False, width=64),
                   st.sampled_from([2.0, -0.0, 1e-7, 0.1, 10**30]))
ODD = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.just([1]), st.just({}), st.just({"x": 1}),
                st.sampled_from(["1e400", "-1e400"]))
VALUE = st.one_of(FINITE, ODD)
STAT_NAMES = st.sampled_from(["exact_match", "num_prompt_tokens", "x,]\"y", "[{"])
HELM_STAT = st.fixed_dictionaries(
    {"name": st.fixed_dictionaries({"name": STAT_NAMES}, optional={
        "split": st.just("test"), "perturbation": st.sampled_from([None, {}, {"name": "typos"}]),
        "sub_split": st.sampled_from(["", "a"])})},
    optional={"mean": FINITE, "count": st.sampled_from([0, 1, 2, 1.0, 3.0]), "sum": FINITE, "min": FINITE,
              "sum_squared": FINITE})
HELM_ENTRY = st.fixed_dictionaries(
    {"instance_id": st.sampled_from(["id0", "id1", "i,d\\\"]"]), "stats": st.lists(HELM_STAT, min_size=1, max_size=4)},
    optional={"train_trial_index": st.sampled_from([0, 1, 0.0]),
              "perturbation": st.sampled_from([None, {}, {"name": "typos"}])})
ODD_STAT = st.one_of(
    st.fixed_dictionaries({"name": st.one_of(ODD, st.fixed_dictionaries(
        {"name": st.one_of(STAT_NAMES, ODD)}, optional={"perturbation": ODD, "sub_split": ODD}))},
        optional={"mean": VALUE, "count": VALUE, "sum": VALUE}), ODD)
ODD_ENTRY = st.one_of(
    st.fixed_dictionaries({"instance_id": st.one_of(st.sampled_from(["id0", "id9"]), VALUE)},
                          optional={"train_trial_index": VALUE, "perturbation": ODD,
                                    "stats": st.one_of(st.lists(st.one_of(HELM_STAT, ODD_STAT), max_size=3), ODD)}),
    ODD)


def _spell(value) -> str:
    """JSON text; the strings '1e400' etc. become bare numbers a double cannot hold (as HELM files could)."""
    text = json.dumps(value)
    for big in ("1e400", "-1e400"):
        text = text.replace(f'"{big}"', big)
    return text


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None,
          derandomize=True)
@given(helm=st.lists(HELM_ENTRY, max_size=6), odd=st.one_of(st.none(), ODD_ENTRY), at=st.integers(0, 6),
       space=st.sampled_from(["", " ", "\n  "]),
       tail=st.sampled_from(["", " ", ",", "]", "x", " \n"]), chunk=st.sampled_from([1, 7, 64, 4096]))
def test_any_file_reads_as_the_checked_reading_reads_it(tmp_path_factory, helm, odd, at, space, tail,
                                                         chunk) -> None:
    entries = helm if odd is None else [*helm[:at], odd, *helm[at:]]
    path = tmp_path_factory.mktemp("pi") / "per_instance_stats.json"
    body = ("," + space).join(_spell(e) for e in entries)
    path.write_text(space + "[" + space + body + space + "]" + tail)
    if tail == ",":  # a comma after the last entry
        path.write_text("[" + body + ("," if entries else "") + "]")
    expected = _outcome(per_instance_checked, path)
    assert _outcome(per_instance, path) == expected
    fast = per_instance_fast(path, chunk=chunk)
    assert fast is None or ("read", fast) == expected  # whenever it answers, it answers the same
