"""`medhelm report` — the evaluation report a governance committee signs: one self-contained HTML or PDF file from a
release's aggregates (leaderboard, per-benchmark scores with intervals, performance by patient subgroup, change
against the accepted release, provenance), with a manifest of its inputs' digests and its own, signed with the
hospital's key (an HMAC secret, or a PEM private key whose public key anyone can check it with);
`medhelm report verify FILE` checks it.

    medhelm report --release 2026-11 --against 2026-10 --sign /secrets/report.pem --format pdf
    medhelm report verify report-2026-11.pdf --key report.pub --store benchmark_output/results.sqlite

Exit codes: 0 written / verified; 2 bad input (nothing written); 3 the report does not verify (one line saying
what no longer matches). Every report written is in the audit trail (action ``report``), like an export.
The work is in ``medhelm.report``; this door parses, checks and prints.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from medhelm.cli.summarize import add_store_arguments, store_location
from medhelm.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--release", help="release to report (default: the latest summarised)")
    p.add_argument("--against", metavar="ACCEPTED", help="the accepted release: add the paired change against it")
    p.add_argument("--format", choices=("html", "pdf"), default="html",
                   help="output format (default: html; pdf needs the report-pdf extra)")
    p.add_argument("--out", type=Path, help="file to write (default: <output-path>/reports/<release>.<format>)")
    p.add_argument("--force", action="store_true", help="replace an existing file at --out")
    p.add_argument("--sign", type=Path, metavar="KEYFILE",
                   help="sign the report with this key: a PEM private key (Ed25519, ECDSA, RSA; the report-sign "
                        "extra) or an HMAC secret of at least 32 random bytes (docs/report.md)")
    p.add_argument("--bootstrap", type=int, default=2000, metavar="N",
                   help="bootstrap replicates of the change against --against (default: %(default)s)")
    add_store_arguments(p)
    sub = p.add_subparsers(dest="action", metavar="verify")
    v = sub.add_parser("verify", help="check a report: its content, its signature and (with --store) its inputs")
    v.add_argument("file", type=Path)
    v.add_argument("--key", type=Path, metavar="KEYFILE",
                   help="check the signature: the PEM public key (or the HMAC secret) it was signed with")
    v.add_argument("--store", dest="verify_store",
                   help="also check that this results store still holds the aggregates the report was built from")


def main(args: argparse.Namespace) -> int:
    return _verify(args) if getattr(args, "action", None) == "verify" else _write(args)


def _write(args: argparse.Namespace) -> int:
    from medhelm.access import Principal, audit
    from medhelm.files import plain_name
    from medhelm.report import content as report_content
    from medhelm.report import render as report_render
    from medhelm.report import keys
    from medhelm.report.seal import seal
    from medhelm.store import open_store
    from medhelm.store.read import resolve_release

    if not 0 <= args.bootstrap <= 100_000:
        raise ConfigError("--bootstrap must be from 0 to 100000")
    key = keys.load(args.sign, to_sign=True) if args.sign else None  # every input checked before anything is written
    report_render.pyplot()
    if args.format == "pdf":
        from medhelm.report import pdf

        pdf.check()
    with open_store(store_location(args)) as store:
        release = resolve_release(store, args.release)
        out = args.out or Path(args.output_path) / "reports" / f"{plain_name(release, what='--release')}.{args.format}"
        if out.exists() and not args.force:
            raise ConfigError("exists already (give another --out, or --force to replace it)", path=out)
        if args.out is not None and not out.parent.is_dir():
            raise ConfigError("the folder to write the report into does not exist", path=out.parent)
        data = report_content.read_content(store, release, args.against, replicates=args.bootstrap)
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        body = report_render.render(data, created)
        if args.format == "pdf":
            body = pdf.to_pdf(body)
        manifest = {"release": data.release, "against": data.against, "created_at": created,
                    "code_version": data.code_version, "inputs": data.inputs}
        sealed = seal(body, manifest, key)
        # no audit row, no report (as for an export)
        detail = f"report {out.name}" + (" signed" if key else "") + \
            (f" against {data.against}" if data.against else "")
        audit.record(store, Principal.local(source="cli"), "report", release=release, detail=detail)
    out.parent.mkdir(parents=True, exist_ok=True)  # the default <output-path>/reports/ is made on first use
    _atomic_write(out, sealed)
    signed = f"signed {key.algorithm}, key id {key.key_id}" if key else "not signed (give --sign KEYFILE)"
    print(f"wrote {out} (release '{release}', {len(sealed)} bytes, {signed}); check it with: "
          f"medhelm report verify {out}")
    return 0


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _verify(args: argparse.Namespace) -> int:
    from medhelm.report.content import input_digests
    from medhelm.report import keys
    from medhelm.report.seal import split, verify
    from medhelm.store import open_store

    key = keys.load(args.key, to_sign=False) if args.key else None
    inputs = None
    if args.verify_store:
        from medhelm.files import read_bytes
        from medhelm.report.seal import REPORT_LIMIT

        manifest = split(read_bytes(args.file, limit=REPORT_LIMIT, what="report"), args.file).manifest
        with open_store(args.verify_store) as store:
            inputs = input_digests(store, str(manifest.get("release")), manifest.get("against"))
    manifest = verify(args.file, key, inputs)
    checks = ["content"] + (["signature"] if key else []) + (["inputs"] if inputs is not None else [])
    signer = manifest.get("signature") if isinstance(manifest.get("signature"), dict) else None
    if key:
        unsigned = f" (signed {key.algorithm}, key id {key.key_id})"
    elif signer:
        unsigned = (f" (signed {str(signer.get('algorithm'))[:20]}, key id {str(signer.get('key_id'))[:16]}: give "
                    "--key to check the signature)")
    else:
        unsigned = " (the report is not signed)"
    print(f"{args.file}: verified ({', '.join(checks)}); release '{manifest.get('release')}', "
          f"sha256 {manifest.get('report_sha256')}{unsigned}")
    return 0
