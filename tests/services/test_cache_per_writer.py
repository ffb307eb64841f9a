"""One request-cache file per writer on the cluster's shared volume, with a rollback journal (SQLite's WAL
needs shared memory, which a ReadWriteMany network filesystem cannot give): the env the chart sets."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess

import pytest
import yaml

from medhelm.errors import ConfigError
from medhelm.inference.cache import RequestCache, cache_file
from medhelm.specs import Completion


def test_default_is_one_wal_file_under_local_path(tmp_path, monkeypatch):
    monkeypatch.delenv("MEDHELM_CACHE_FILE", raising=False)
    monkeypatch.delenv("MEDHELM_CACHE_JOURNAL", raising=False)
    assert cache_file(tmp_path) == tmp_path / "cache" / "requests.sqlite"
    cache = RequestCache(cache_file(tmp_path))
    assert cache._reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_chart_env_gives_each_writer_its_own_rollback_journal_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDHELM_CACHE_FILE", str(tmp_path / "requests-{writer}.sqlite"))
    monkeypatch.setenv("MEDHELM_CACHE_JOURNAL", "delete")
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    assert cache_file("ignored") == tmp_path / f"requests-{socket.gethostname()}.sqlite"
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    path = cache_file("ignored")
    assert path == tmp_path / "requests-shard-3.sqlite"
    cache = RequestCache(path)
    assert cache._reader.execute("PRAGMA journal_mode").fetchone()[0] == "delete"

    async def roundtrip():
        cache.put_nowait("k", Completion(text="Yes"))
        await cache.aflush()

    asyncio.run(roundtrip())
    assert cache.get("k").text == "Yes"
    assert not path.with_name(path.name + "-wal").exists()
    with sqlite3.connect(path) as other:  # committed to the file itself
        assert other.execute("SELECT COUNT(*) FROM completions").fetchone()[0] == 1
    monkeypatch.setenv("MEDHELM_CACHE_JOURNAL", "wall")
    with pytest.raises(ConfigError, match="MEDHELM_CACHE_JOURNAL"):
        RequestCache(tmp_path / "x.sqlite")


def test_chart_sets_it_for_every_writer(repo_root, helm_bin):
    done = subprocess.run([str(helm_bin), "template", "rel", ".", "-f", "ci/full-values.yaml"],
                          cwd=repo_root / "helm-charts" / "medhelm", capture_output=True, text=True, check=True)
    writers = 0
    for d in yaml.safe_load_all(done.stdout):
        hook = "helm.sh/hook" in ((d or {}).get("metadata", {}).get("annotations") or {})  # store-migrate: no cache
        if d and not hook and d["kind"] in ("Deployment", "Job") \
                and d["metadata"]["name"].split("-")[-1] != "dashboard":
            env = {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
            assert env["MEDHELM_CACHE_FILE"] == "/data/prod_env/cache/requests-{writer}.sqlite", d["metadata"]["name"]
            assert env["MEDHELM_CACHE_JOURNAL"] == "delete"
            writers += 1
    assert writers == 4  # scenarios, jury, metrics, the Job
