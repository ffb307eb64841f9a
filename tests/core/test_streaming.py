"""Streamed runs give exactly what the in-memory pipeline gave: the same sample for --max-eval-instances, the
same selection.json bytes, and finishing (external sort + running aggregates) writes the same records,
superseded lines, stats.json and run.json as reading every record back did."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from medhelm.benchmarks import configurable
from medhelm.benchmarks.base import LoadContext
from medhelm.errors import ConfigError
from medhelm.pipeline import aggregate, bounded, finish
from medhelm.rundir import RunDir, dump_json as _dump, selection_text as _selection_text
from medhelm.pipeline.sampling import select_instances, stream_run
from medhelm.records import InstanceResult, JudgeScore
from medhelm.specs import Completion, FrozenMap, Instance, Prompt, Reference, RunSpec, Usage

from .conftest import write_benchmark


def todays_selection(instances, max_instances, seed):
    """The selection before streaming (verbatim): a seeded shuffle of a list of positions, the first k kept."""
    if max_instances is None or max_instances >= len(instances):
        return list(instances)
    order = list(range(len(instances)))
    random.Random(seed).shuffle(order)
    return [instances[i] for i in sorted(order[:max_instances])]


def load(cfg: Path):
    return configurable.load_configurable(LoadContext(args=FrozenMap(config_path=str(cfg)), base_dir=cfg.parent))


def spec_for(bench, k, seed) -> RunSpec:
    return RunSpec(entry="e", benchmark=bench.spec, benchmark_args=FrozenMap(), model="m", deployment="d",
                   max_eval_instances=k, max_tokens=2, temperature=0.0, seed=seed)


def test_stream_run_picks_todays_selection(tmp_path):
    bench = load(write_benchmark(tmp_path / "b", 257))
    everything = list(bench.instances())
    assert len(everything) == 257 == len(bench.instances())
    for k in (None, 1, 2, 10, 100, 256, 257, 1000):
        for seed in (0, 1, 7, 2**32 - 1):
            expected = todays_selection(everything, k, seed)
            sample = stream_run(bench, spec_for(bench, k, seed))
            assert list(sample) == expected, (k, seed)
            assert list(sample.ids()) == [i.id for i in expected]
            assert sample.count == len(expected)
            assert select_instances(everything, k, seed) == expected  # the in-memory door too


def test_nested_samples_keep_what_was_evaluated(tmp_path):
    bench = load(write_benchmark(tmp_path / "b", 500))
    small = set(stream_run(bench, spec_for(bench, 40, 3)).ids())
    big = set(stream_run(bench, spec_for(bench, 90, 3)).ids())
    assert small < big and len(big) == 90


def test_the_dataset_is_not_held_in_memory(tmp_path):
    bench = load(write_benchmark(tmp_path / "b", 20))
    assert not isinstance(bench.instances(), (list, tuple))  # read from the file at each pass
    data = tmp_path / "b" / "dataset.csv"
    data.write_text(data.read_text() + '9999,"x","y",Yes,"[]"\n')
    with pytest.raises(ConfigError, match="changed after the run was planned") as err:
        list(bench.instances())
    assert str(data) in str(err.value)


def test_a_repeated_id_is_refused_with_both_lines(tmp_path):
    folder = tmp_path / "b"
    cfg = write_benchmark(folder, 3)
    (folder / "dataset.csv").write_text("id,note,question,correct_answer\n"
                                        "a,n,q,Yes\nb,n,q,No\n\nA,n,q,No\n a ,n,q,Yes\n")
    with pytest.raises(ConfigError) as err:
        load(cfg)
    assert "duplicate id (first used on line 2)" in str(err.value) and ":6" in str(err.value)


def test_selection_json_bytes_unchanged():
    for ids in (["1"], ["a", "b\u00e9", 'q"uote', "new\nline", "x" * 300], [str(i) for i in range(5000)]):
        assert "".join(_selection_text(ids)) == _dump({"instance_ids": ids})


def test_selection_is_read_back_streamed_or_whole(tmp_path):
    rd = RunDir(tmp_path)
    ids = ["z", "\u00e9", 'a"b', "7"] * 3000
    (tmp_path / "selection.json").write_text(_dump({"instance_ids": ids}))
    assert list(rd.iter_selection()) == ids
    (tmp_path / "selection.json").write_text(json.dumps({"instance_ids": ids}))  # another spelling
    assert rd.selection() == ids


# ------------------------------------------------------------------------------------------------
# finishing a run


def _iid(i: int) -> str:
    return f"id-{i}" if i % 7 else f'id "{i}" \\ \u00e9'  # escapes in the JSON text too


def _record(i: int, rng: random.Random, *, error: bool = False, position: int | None = None) -> InstanceResult:
    inst = Instance(id=_iid(i), input=f"note {i}", references=(Reference("Yes"),), split=rng.choice(["test", "valid"]))
    if error:
        return InstanceResult(run="r", instance=inst, prompt=Prompt.user("p"), completion=None, stats={},
                              error="HTTP 400: too long", position=i if position is None else position)
    cached = rng.random() < 0.3
    usage = Usage(prompt_tokens=rng.randint(5, 50), completion_tokens=rng.choice([1, 2, None]),
                  latency_s=0.0 if cached else rng.random(), cached=cached, attempts=0 if cached else rng.randint(1, 3))
    judged = rng.random() < 0.3
    judgements = (JudgeScore("j", "accuracy", rng.choice([1.0, 3.0, None]), 1.0, 5.0),) if judged else ()
    return InstanceResult(run="r", instance=inst, prompt=Prompt.user("p", truncated=rng.random() < 0.2),
                          completion=Completion("Yes", "stop", usage),
                          stats={"exact_match": rng.choice([0.0, 1.0, None]), "f1": rng.random()},
                          judgements=judgements,
                          judge_usage=Usage(prompt_tokens=7, completion_tokens=3) if judged else Usage(),
                          position=i if position is None else position)


def _line(r: InstanceResult) -> str:
    return json.dumps(r.to_json(), ensure_ascii=False) + "\n"


def _todays_finalize(lines: list[str], selection: list[str], spec: RunSpec):
    """What finishing a run wrote before streaming (verbatim logic): records, superseded lines, stats, status."""
    latest: dict[str, InstanceResult] = {}
    for line in lines:
        rec = InstanceResult.from_json(json.loads(line))
        prev = latest.get(rec.instance.id)
        if prev is None or rec.error is None or prev.error is not None:
            latest[rec.instance.id] = rec
    wanted = set(selection)
    superseded = [line for line in lines if json.loads(line)["instance"]["id"] not in wanted] \
        if set(latest) - wanted else []
    ordered = sorted((v for k, v in latest.items() if k in wanted), key=lambda r: r.position)
    errors = sum(1 for r in ordered if r.error is not None)
    completions = [r.completion for r in ordered if r.completion is not None]
    status = {"instances_total": len(selection), "instances_done": len(ordered), "errors": errors,
              "requests": sum(1 for c in completions if not c.usage.cached),
              "cache_hits": sum(1 for c in completions if c.usage.cached),
              "retries": sum(max(c.usage.attempts - 1, 0) for c in completions)}
    return [_line(r) for r in ordered], superseded, [s.to_json() for s in aggregate.aggregate(ordered)], status


@pytest.mark.parametrize("chunk", [None, 7])  # all in memory; every sort spilled in runs of 7 and merged
def test_finalize_streams_the_same_result(tmp_path, monkeypatch, chunk):
    from medhelm import spill

    if chunk:
        monkeypatch.setattr(spill, "CHUNK", chunk)
    rng = random.Random(5)
    n = 400
    spec = spec_for(load(write_benchmark(tmp_path / "b", 3)), n, 0)
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    selection = [_iid(i) for i in range(n) if i % 17]  # some earlier records fall outside the sample
    main = [_record(i, rng, error=i % 11 == 0) for i in range(n)]
    rng.shuffle(main)  # workers finish out of order
    again = [_record(i, rng) for i in range(0, n, 11)]  # resumed: the errors answered this time
    worse = [_record(i, rng, error=True) for i in range(1, n, 13)]  # a later error never replaces a success
    shard = [_record(i, rng, position=i) for i in range(2, n, 29)]
    (rd.path / "instances.jsonl").write_text("".join(map(_line, main + again + worse)))
    (rd.path / "shards").mkdir()
    (rd.path / "shards" / "shard-00000-of-00002.jsonl").write_text("".join(map(_line, shard)) + '{"torn')
    (rd.path / "run_spec.json").write_text(_dump(spec.to_json()))
    (rd.path / "selection.json").write_text(_dump({"instance_ids": selection}))
    lines = [_line(r) for r in main + again + worse + shard]

    want_records, want_superseded, want_stats, want_status = _todays_finalize(lines, selection, spec)
    status = finish.finalize(rd)

    assert (rd.path / "instances.jsonl").read_text() == "".join(want_records)
    assert (rd.path / "superseded.jsonl").read_text() == "".join(want_superseded)
    assert json.loads((rd.path / "stats.json").read_text()) == want_stats
    assert {k: status[k] for k in want_status} == want_status and status["status"] == "complete"
    assert not (rd.path / "shards").exists()
    assert not list(rd.path.glob(".*"))  # no temporary file left behind
    again_status = finish.finalize(rd)  # idempotent
    assert again_status == status and (rd.path / "instances.jsonl").read_text() == "".join(want_records)


@pytest.mark.parametrize("spelling", ["ours", "other"])
def test_a_position_beyond_64_bits_is_a_corrupt_record_line(tmp_path, spelling):
    """Finishing sorts positions as 64-bit integers: a larger one is refused naming its line, not a traceback."""
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    spec = spec_for(load(write_benchmark(tmp_path / "b", 3)), 3, 0)
    (rd.path / "run_spec.json").write_text(_dump(spec.to_json()))
    (rd.path / "selection.json").write_text(_dump({"instance_ids": [_iid(i) for i in range(3)]}))
    good = _line(_record(0, random.Random(1)))
    huge = _line(_record(1, random.Random(1))).replace('"position": 1,', f'"position": {2**64},')
    if spelling == "other":
        huge = json.dumps(json.loads(huge), indent=None, separators=(",", ":")) + "\n"
    (rd.path / "instances.jsonl").write_text(good + huge)
    with pytest.raises(ConfigError) as err:
        finish.finalize(rd)
    assert ":2" in str(err.value) and "corrupt record line" in str(err.value)


def test_finalize_reads_many_shards_with_few_descriptors(tmp_path, monkeypatch):
    """Shards are read round-robin in position order; with at most 2 files open at once the result is the
    same as before streaming, and a line appended while finishing runs is left for the next finish."""
    monkeypatch.setattr(finish._LineReader, "OPEN", 2)
    rng = random.Random(8)
    n, count = 120, 5
    spec = spec_for(load(write_benchmark(tmp_path / "b", 3)), n, 0)
    rd = RunDir(tmp_path / "run")
    (rd.path / "shards").mkdir(parents=True)
    selection = [_iid(i) for i in range(n)]
    lines = []
    for k in range(count):
        shard = [_record(i, rng, error=i % 7 == 0) for i in range(k, n, count)]
        shard += [_record(i, rng) for i in range(k, n, count * 7)]  # retried: the success wins
        (rd.path / "shards" / f"shard-{k:05d}-of-{count:05d}.jsonl").write_text("".join(map(_line, shard)))
        lines += [_line(r) for r in shard]
    (rd.path / "instances.jsonl").write_text("")
    (rd.path / "run_spec.json").write_text(_dump(spec.to_json()))
    (rd.path / "selection.json").write_text(_dump({"instance_ids": selection}))
    want_records, _, want_stats, want_status = _todays_finalize(lines, selection, spec)

    original = RunDir.record_heads

    def appended_meanwhile(self, files=None):  # another line lands in a shard after the first pass began
        yield from original(self, files)
        with open(rd.path / "shards" / f"shard-00000-of-{count:05d}.jsonl", "a", encoding="utf-8") as f:
            f.write(_line(_record(0, rng, error=True)))

    monkeypatch.setattr(RunDir, "record_heads", appended_meanwhile)
    status = finish.finalize(rd)
    assert (rd.path / "instances.jsonl").read_text() == "".join(want_records)
    assert json.loads((rd.path / "stats.json").read_text()) == want_stats
    assert {k: status[k] for k in want_status} == want_status and status["status"] == "complete"


@pytest.mark.parametrize("chunk", [None, 7])  # all in memory; sorted runs spilled and merged
def test_sorter_and_the_positions_join(tmp_path, monkeypatch, chunk):
    from medhelm import spill

    if chunk:
        monkeypatch.setattr(spill, "CHUNK", chunk)
    rng = random.Random(1)
    rows = [(rng.randrange(50), rng.randrange(-5, 5), i) for i in range(500)]
    with spill.Sorter("qqq", tmp_path) as sorter:
        for row in rows[:123]:
            sorter.add(*row)
        sorter.extend(iter(rows[123:]))
        assert list(sorter) == sorted(rows) and sorter.count == 500 and len(sorter._runs) == (500 // 7 if chunk else 0)
    ids = [f"x{i}" for i in range(300)]
    with spill.Sorter("qq", tmp_path) as selection, spill.Sorter("q", tmp_path) as done:
        for position, iid in enumerate(ids):
            selection.add(bounded.id_hash(iid), position)
        done.extend(bounded.id_hash(iid) for iid in ["x5", "x17", "x17", "nope", "x299", "x0"])
        found = bounded.positions_in(selection, done)
    assert sorted(found) == [0, 5, 17, 299] and len(found) == 4 and 17 in found and 18 not in found
    assert not list(tmp_path.iterdir())  # the spill file is unlinked when made


def test_selection_reads_back_every_id_as_written(tmp_path):
    """Plain ids are read back without a parse, escaped ones parsed: the ids are the ones written."""
    ids = ["a", "b c", 'q"x', "\u00e9", "t\\n", "\u2028", "", "  x ", "\x7f", "\U0001f600", "z"]
    (tmp_path / "selection.json").write_text("".join(_selection_text(ids)), encoding="utf-8")
    assert list(RunDir(tmp_path).iter_selection()) == ids
    assert json.loads((tmp_path / "selection.json").read_text(encoding="utf-8"))["instance_ids"] == ids


def test_position_set_is_a_bit_a_member():
    members = [0, 7, 8, 9, 1_000_000, 63, 8]
    positions = bounded.PositionSet(members)
    assert len(positions) == 6 and list(positions) == sorted(set(members))
    assert 1_000_000 in positions and 999_999 not in positions and 5_000_000 not in positions
    assert len(positions._bits) < 1_000_000 // 8 * 1.3  # a bit each up to the largest (growth amortized)


def test_cache_key_unchanged():
    """Keys computed with the deployment's identity and the messages encoded once equal the keys of existing
    caches, and the request body built from those pieces is the payload."""
    from medhelm.inference.openai import OpenAIClient
    from medhelm.json_text import canonical_json, digest
    from medhelm.specs import Deployment, DeploymentKind, GenerationRequest, Message

    dep = Deployment(name="vllm/q\u00e9", model_name="q/q", kind=DeploymentKind.OPENAI, base_url="http://h:1/v1")
    for req in (GenerationRequest(messages=(Message("user", "Note \u00e9 \"x\"\n"),), max_tokens=4),
                GenerationRequest(messages=(Message("system", "s"), Message("user", "u")), max_tokens=9,
                                  temperature=0.7,
                                  stop=("\n",), seed=None, json_schema='{"type":"object"}', top_logprobs=3)):
        before = digest({"deployment": dep.identity(), "request": req.to_json()}, length=64)
        assert req.cache_key(dep) == before == req.cache_key(canonical_json(dep.identity()))
        client = OpenAIClient(dep)  # the body sent reuses the messages' JSON: the same document as payload()
        assert json.loads(client.body(req)) == client.payload(req)


def test_the_fast_json_paths_write_and_read_what_the_json_module_does():
    """orjson is used only where its bytes are the json module's (strings: every code point checked) or where
    only our own reader sees them (the cache's values); what it refuses falls back to the json module."""
    import math

    from medhelm.json_text import canonical_json, compact_json, loads_json, strings_canonical_json
    from medhelm.specs import Completion, Usage

    step = 7  # every 7th code point, and every code point below 0x800 (all escapes and two-byte forms)
    points = [*range(0x800), *range(0x800, 0x110000, step)]
    texts = ["".join(chr(c) for c in points[i:i + 512] if not 0xD800 <= c <= 0xDFFF)
             for i in range(0, len(points), 512)]
    for text in texts:
        messages = [{"role": "user", "content": text}, {"content": text[::-1], "role": "system"}]
        assert strings_canonical_json(messages) == canonical_json(messages)
    lone = [{"role": "user", "content": "a\ud800b"}]  # orjson refuses a lone surrogate: the json module's text
    assert strings_canonical_json(lone) == canonical_json(lone)

    completion = Completion("Yes \u00e9\n", "stop", Usage(prompt_tokens=3, completion_tokens=1, latency_s=0.1 + 0.2))
    assert Completion.from_json(loads_json(compact_json(completion.to_json()))) == completion
    assert json.loads(compact_json({"big": 2**70, "s": "\udfff"})) == {"big": 2**70, "s": "\udfff"}  # json's path

    assert loads_json(b'{"a": [1, 2.5e-07, "\\u00e9"], "b": null}') == {"a": [1, 2.5e-07, "\u00e9"], "b": None}
    assert math.isnan(loads_json(b'{"a": NaN}')["a"]) and loads_json('\ufeff{"a": 1}'.encode()) == {"a": 1}
    with pytest.raises(json.JSONDecodeError):
        loads_json(b'{"a": ')


def test_request_cache_opened_empty_finds_its_own_entries_after_commit(tmp_path):
    from medhelm.inference.cache import RequestCache

    cache = RequestCache(tmp_path / "c.sqlite")
    keys = [f"{i:064x}" for i in range(300)]
    for k in keys:
        cache.put_nowait(k, Completion("Yes", "stop", Usage(prompt_tokens=3)))  # no loop: committed at once
    assert not cache._pending and cache._ours is not None
    assert all(cache.get(k).text == "Yes" for k in keys)  # committed by us: still found
    assert cache.get("f" * 64) is None
    other = RequestCache(tmp_path / "c.sqlite")  # opened non-empty: every lookup asks SQLite
    assert other._ours is None and other.get(keys[7]).usage.cached
    cache.close()
    other.close()


def test_a_repeated_id_in_a_large_dataset_is_refused(tmp_path):
    folder = tmp_path / "b"
    cfg = write_benchmark(folder, 3)
    rows = "".join(f"r{i},n,q,Yes\n" for i in range(70_000))  # digests sorted in chunks, spilled and merged
    (folder / "dataset.csv").write_text("id,note,question,correct_answer\n" + rows + "r12,n,q,No\n")
    with pytest.raises(ConfigError) as err:
        load(cfg)
    assert "duplicate id (first used on line 14)" in str(err.value) and ":70002" in str(err.value)


@pytest.mark.parametrize("temp_ok", [True, False])
def test_id_digests_are_spilled_in_sorted_chunks_and_a_repeat_across_chunks_is_found(tmp_path, monkeypatch, temp_ok):
    """The id check holds one chunk of digests (7 here): the others are sorted into a temporary file and
    merged. A repeat 50 rows apart (different chunks) is still refused, naming both lines; where no temporary
    file can be made, the chunks stay in memory and the check is the same."""
    import tempfile

    from medhelm.benchmarks import user_dataset

    from medhelm import spill

    monkeypatch.setattr(spill, "CHUNK", 7)
    if not temp_ok:
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    folder = tmp_path / "b"
    cfg = write_benchmark(folder, 3)
    rows = [f"r{i},n,q,Yes\n" for i in range(60)]
    (folder / "dataset.csv").write_text("id,note,question,correct_answer\n" + "".join(rows))
    assert len(load(cfg).instances()) == 60
    made = []

    class Seen(user_dataset._IdDigests):
        def close(self) -> None:
            made.append((self.count, len(self._runs), len(self._kept)))
            super().close()
            assert self._runs._file is None and not self._kept

    monkeypatch.setattr(user_dataset, "_IdDigests", Seen)
    (folder / "dataset.csv").write_text("id,note,question,correct_answer\n" + "".join(rows) + "r9,n,q,No\n")
    with pytest.raises(ConfigError) as err:
        load(cfg)
    assert "duplicate id (first used on line 11)" in str(err.value) and ":62" in str(err.value)
    assert made[0] == ((61, 8, 0) if temp_ok else (61, 0, 8))  # 8 chunks of 7 spilled (or kept), 5 in memory


def test_a_large_dataset_is_checked_without_numpy(tmp_path):
    """numpy would stay in memory (~15 MB) for the whole run: the id check of a large file does without it."""
    import subprocess

    folder = tmp_path / "b"
    cfg = write_benchmark(folder, 3)
    rows = "".join(f"r{i},n,q,Yes\n" for i in range(70_000))
    (folder / "dataset.csv").write_text("id,note,question,correct_answer\n" + rows)
    code = ("import sys, pathlib; from medhelm.benchmarks import configurable; "
            "from medhelm.benchmarks.base import LoadContext; from medhelm.specs import FrozenMap; "
            f"cfg = pathlib.Path({str(cfg)!r}); "
            "b = configurable.load_configurable(LoadContext(args=FrozenMap(config_path=str(cfg)), base_dir=cfg.parent)); "
            "print(len(b.instances()), 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["70000", "False"], out.stderr[-2000:]


def test_changed_settings_move_every_record_aside(tmp_path):
    rng = random.Random(2)
    bench = load(write_benchmark(tmp_path / "b", 3))
    rd = RunDir(tmp_path / "run")
    rd.prepare(spec_for(bench, 5, 0), iter(["id-1", "id-2"]))
    lines = [_line(_record(i, rng)) for i in (1, 2)]
    (rd.path / "instances.jsonl").write_text(lines[0])
    (rd.path / "shards").mkdir()
    (rd.path / "shards" / "shard-00001-of-00002.jsonl").write_text(lines[1])
    (rd.path / "retries.jsonl").write_text('{"retries": 3, "judge_retries": 0}\n')
    rd.prepare(spec_for(bench, 5, 9), iter(["id-1", "id-2"]))  # another seed: the old records do not count
    assert (rd.path / "superseded.jsonl").read_text() == "".join(lines)
    assert (rd.path / "instances.jsonl").read_text() == "" and not list((rd.path / "shards").iterdir())
    assert not (rd.path / "retries.jsonl").exists() and rd.selection() == ["id-1", "id-2"]


def test_request_cache_queue_is_bounded(tmp_path, monkeypatch):
    """When answers come faster than SQLite commits, put() waits instead of the queue growing with the run."""
    import asyncio

    from medhelm.inference import cache as cache_module

    monkeypatch.setattr(cache_module, "MAX_PENDING", 5)
    monkeypatch.setattr(cache_module, "BATCH", 3)
    cache = cache_module.RequestCache(tmp_path / "c.sqlite", commit_interval_s=0.01)

    async def go() -> int:
        most = 0
        for i in range(60):
            await cache.put(f"{i:064x}", Completion("Yes", "stop", Usage(prompt_tokens=3)))
            most = max(most, len(cache._pending))
        await cache.aflush()
        return most

    assert asyncio.run(go()) <= 5
    assert len(cache) == 60 and cache.commits >= 60 // 3  # a transaction holds at most BATCH entries
    cache.close()


def test_cache_key_text_kept_per_run_settings_tells_equal_numbers_of_other_types_apart():
    """The text around the messages is kept per settings: 1, 1.0 and True are equal keys of a dict, but spell
    differently, so each request's key must still be the digest of its own canonical JSON."""
    from medhelm.json_text import digest
    from medhelm.specs import Deployment, DeploymentKind, GenerationRequest, Message

    dep = Deployment(name="d", model_name="m", kind=DeploymentKind.OPENAI, base_url="http://h:1/v1")
    msgs = (Message("user", "u"),)
    variants = [GenerationRequest(messages=msgs, max_tokens=m, temperature=t, seed=s)
                for m in (1, True) for t in (1, 1.0, True, 0.0) for s in (0, False, None, 0.0)]
    keys = set()
    for _ in range(2):  # the second time from the kept text
        for req in variants:
            key = req.cache_key(dep)
            assert key == digest({"deployment": dep.identity(), "request": req.to_json()}, length=64)
            keys.add(key)
    assert len(keys) == len(variants)


def test_the_records_json_is_the_json_modules_byte_for_byte():
    """plain_json (the records' spelling, by a C encoder built once) equals json.dumps(value, ensure_ascii=False)
    on every kind of value a record can hold, and refuses what json.dumps refuses."""
    from medhelm.json_text import plain_json

    rng = random.Random(11)
    text = "".join(chr(c) for c in (*range(0, 0x250), 0x2028, 0x2029, 0xFEFF, 0x1F600, 0xD800, 0xDFFF))
    values = [None, True, False, 0, -1, 2**70, 0.0, -0.0, 1e-7, 1e16, 0.1, float("nan"), float("inf"),
              float("-inf"), "", text, [], {}, {"a": [1, {"b": text}], "c": None}, ("t", 1)]
    for _ in range(300):
        values.append({f"k{i}": rng.choice([rng.random() * 10 ** rng.randint(-12, 20), rng.randint(-9, 9),
                                            text[rng.randrange(len(text)):][:40], None, [rng.random()]])
                       for i in range(rng.randint(0, 6))})
    for value in values:
        assert plain_json(value) == json.dumps(value, ensure_ascii=False)
    with pytest.raises(TypeError):
        plain_json({"x": object()})
