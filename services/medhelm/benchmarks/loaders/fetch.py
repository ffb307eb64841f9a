"""Where a public benchmark's files come from: the air-gapped mirror first, then the download cache,
then the pinned upstream URL (downloaded once). Gated/private files come from the user's ``data_path=``.

Mirror layout: ``<data_dir>/<benchmark>/<upstream file name>`` (or ``<data_dir>/<upstream file name>``),
so a hospital copies the upstream files in once and never reaches out.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from medhelm.benchmarks.base import LoadContext
from medhelm.errors import ConfigError, DataUnavailable


@dataclass(frozen=True)
class RemoteFile:
    """One upstream file, pinned. ``name`` is the file name a mirror must use."""

    url: str
    name: str
    # other names a mirror may use for the same content (e.g. the CSV twin of a parquet file)
    alt_names: tuple[str, ...] = ()
    member: str = ""  # when set, ``url`` is a zip archive and this is the path of the file inside it

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.alt_names)


def mirror_candidates(ctx: LoadContext, folder: str, name: str) -> list[Path]:
    if ctx.data_dir is None:
        return []
    root = Path(ctx.data_dir)
    return [root / folder / name, root / name]


def find_local(ctx: LoadContext, folder: str, remote: RemoteFile) -> Path | None:
    """The file from the mirror (any accepted name) or the download cache, if present."""
    for name in remote.names:
        for cand in mirror_candidates(ctx, folder, name):
            if cand.is_file():
                return cand
    cached = Path(ctx.cache_dir) / folder / remote.name
    return cached if cached.is_file() else None


def fetch_all(ctx: LoadContext, folder: str, files: Sequence[RemoteFile]) -> list[Path]:
    """Every file, local or downloaded; offline with files missing -> one DataUnavailable listing them all."""
    found = [find_local(ctx, folder, f) for f in files]
    missing = [f for f, p in zip(files, found) if p is None]
    if missing and ctx.offline:
        raise DataUnavailable(_offline_message(ctx, folder, missing))
    return [p if p is not None else download(ctx, folder, f) for f, p in zip(files, found)]


def _offline_message(ctx: LoadContext, folder: str, missing: Sequence[RemoteFile]) -> str:
    names = ", ".join(f"{f.name} ({f.url})" for f in missing)
    where = (f"the mirror {Path(ctx.data_dir) / folder}" if ctx.data_dir is not None
             else "a mirror folder given by --data-dir / MEDHELM_DATA_DIR (none is set)")
    return f"{folder}: data not available offline; copy {names} into {where}"


def _mirror_hint(ctx: LoadContext, folder: str) -> str:
    if ctx.data_dir is not None:
        return f"the mirror folder {Path(ctx.data_dir) / folder}"
    return f"<mirror>/{folder}/ and pass --data-dir <mirror> (or MEDHELM_DATA_DIR)"


def download(ctx: LoadContext, folder: str, remote: RemoteFile, client=None) -> Path:
    """Download once into ``<cache_dir>/<folder>/<name>`` (atomic rename: no half-written files). Pass one
    ``httpx.Client`` for many files: a new client per file builds a TLS context each."""
    import httpx

    target = Path(ctx.cache_dir) / folder / remote.name
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{Path(remote.name).name}.")
    get = client.stream if client is not None else httpx.stream
    try:
        with os.fdopen(fd, "wb") as out, get("GET", remote.url, follow_redirects=True,
                                             timeout=httpx.Timeout(60.0, connect=15.0)) as resp:
            if resp.status_code != 200:
                raise DataUnavailable(f"{folder}: download of {remote.url} failed (HTTP {resp.status_code}); "
                                      f"copy {remote.name} into {_mirror_hint(ctx, folder)} instead")
            for chunk in resp.iter_bytes():
                out.write(chunk)
        if remote.member:
            _extract(Path(tmp), remote, target)
        else:
            os.replace(tmp, target)
    except httpx.HTTPError as err:
        raise DataUnavailable(f"{folder}: cannot download {remote.url} ({type(err).__name__}); "
                              f"copy {remote.name} into {_mirror_hint(ctx, folder)} instead") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _extract(archive: Path, remote: RemoteFile, target: Path) -> None:
    import zipfile

    try:
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if n.endswith(remote.member)]
            if not names:
                raise DataUnavailable(f"{remote.url} does not contain {remote.member}")
            partial = target.with_name(f".{target.name}.part")
            partial.write_bytes(zf.read(names[0]))
            os.replace(partial, target)
    except zipfile.BadZipFile:
        raise DataUnavailable(f"{remote.url} is not a zip archive (the host may require a manual download); "
                              f"copy {remote.name} into a --data-dir mirror instead") from None


def user_path(ctx: LoadContext, benchmark: str, expected: str, access: str) -> Path:
    """The ``data_path=`` argument resolved against the run entry's folder; required for gated/private data."""
    raw = ctx.args.get("data_path")
    if not raw:
        raise ConfigError(f"benchmark '{benchmark}' needs data_path=<path to {expected}>; {access}",
                          field="data_path")
    if "<" in str(raw) or ">" in str(raw):
        raise ConfigError(f"benchmark '{benchmark}': data_path still holds a template placeholder; set it to "
                          f"{expected}", field="data_path")
    path = Path(str(raw)).expanduser()
    if not path.is_absolute():
        path = Path(ctx.base_dir) / path
    return path


def require_files(benchmark: str, root: Path, names: Sequence[str], access: str) -> list[Path]:
    """Every expected file under ``root``; otherwise one DataUnavailable naming all missing ones."""
    paths = [root / n for n in names]
    missing = [n for n, p in zip(names, paths) if not p.is_file()]
    if missing:
        raise DataUnavailable(f"{benchmark}: missing {', '.join(missing)} under {root} "
                              f"(expected: {', '.join(names)}); {access}")
    return paths
