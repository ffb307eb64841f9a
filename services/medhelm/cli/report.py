"""`medhelm report` — the evaluation report a governance committee signs: one self-contained HTML or PDF file from a
release's aggregates (leaderboard, per-benchmark scores with intervals, performance by patient subgroup, change
against the accepted release, provenance), with a manifest of its inputs' digests and its own, signed with the
hospital's private key (``--sign``: PEM, DER or OpenSSH; anyone with the public key can check it) or an HMAC
secret (``--hmac-key``); `medhelm report verify FILE` checks it against a key the checker trusts;
`medhelm report trust add|list|remove` keeps the store's trust list.

    medhelm report --release 2026-11 --against 2026-10 --sign /secrets/report.pem --format pdf
    medhelm report verify report-2026-11.pdf --key report.pub --store benchmark_output/results.sqlite
    medhelm report verify report-2026-11.pdf --trusted committee-keys.pem
    medhelm report trust add report.pub --label "pharmacy AI lab 2026"; medhelm report verify FILE --store URL

Exit codes: 0 written / verified with a trusted key; 2 bad input (nothing written; a file that is not a key);
3 the report does not verify (one line saying what no longer matches); 4 the content matches its manifest but
no trusted key was given, so the signature was NOT checked (anyone can edit a report and recompute its digest).
Every report written, and every change of the store's trust list, is in the audit trail (action ``report``).
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
    signing = p.add_mutually_exclusive_group()
    signing.add_argument("--sign", type=Path, metavar="KEYFILE",
                         help="sign the report with this private key: PEM, DER or OpenSSH (Ed25519, ECDSA P-256/384, "
                              "RSA >= 2048 bits; the report-sign extra; docs/report.md)")
    signing.add_argument("--hmac-key", type=Path, metavar="SECRETFILE",
                         help="sign with an HMAC-SHA256 secret instead (a file of at least 32 random bytes)")
    p.add_argument("--about", type=Path, metavar="REPORT_YAML",
                   help="what the hospital states: intended use, limitations, risks, data, models' endpoints and "
                        "access windows, sign-off (template: examples/report.yaml); part of what is signed")
    p.add_argument("--bootstrap", type=int, default=2000, metavar="N",
                   help="bootstrap replicates of the change against --against (default: %(default)s)")
    add_store_arguments(p)
    sub = p.add_subparsers(dest="action", metavar="{verify,trust}")
    v = sub.add_parser("verify", help="check a report against a trusted key: its content, its signature and (with "
                                      "--store) its inputs")
    v.add_argument("file", type=Path)
    keys = v.add_mutually_exclusive_group()
    keys.add_argument("--key", type=Path, metavar="KEYFILE",
                      help="the signer's public key (PEM, DER, OpenSSH or JWK; a private key gives its public half)")
    keys.add_argument("--trusted", type=Path, metavar="FILE",
                      help="a trust list: several public keys in one file (PEM blocks, OpenSSH lines or a JWK Set)")
    keys.add_argument("--hmac-key", dest="verify_hmac", type=Path, metavar="SECRETFILE",
                      help="the HMAC-SHA256 secret, for a report signed with --hmac-key")
    v.add_argument("--store", dest="verify_store", metavar="URL",
                   help="also check that this results store still holds the aggregates the report was built from; "
                        "without --key/--trusted/--hmac-key, check the signature against the store's trust list")
    t = sub.add_parser("trust", help="the store's trust list: the public keys whose report signatures count")
    t.add_argument("trust_action", choices=("add", "list", "remove"))
    t.add_argument("what", nargs="?", help="add: the public key file; remove: the key id")
    t.add_argument("--label", default="", help="add: who or what the key belongs to (shown by list)")
    t.add_argument("--store", dest="trust_store", metavar="URL", help="the results store (default: as for `report`)")


def main(args: argparse.Namespace) -> int:
    action = getattr(args, "action", None)
    return _verify(args) if action == "verify" else _trust(args) if action == "trust" else _write(args)


def _write(args: argparse.Namespace) -> int:
    from medhelm.access import Principal, audit
    from medhelm.files import plain_name
    from medhelm.report import content as report_content
    from medhelm.report import page as report_page
    from medhelm.report import render as report_render
    from medhelm.report import keys
    from medhelm.report.seal import seal
    from medhelm.store import open_store
    from medhelm.store.read import resolve_release

    if not 0 <= args.bootstrap <= 100_000:
        raise ConfigError("--bootstrap must be from 0 to 100000")
    # every input checked before anything is written
    key = keys.load_private(args.sign) if args.sign else keys.load_hmac(args.hmac_key) if args.hmac_key else None
    from medhelm.report import about as report_about

    about = report_about.load(args.about) if args.about else None
    report_page.pyplot()
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
        data = report_content.read_content(store, release, args.against, replicates=args.bootstrap, about=about,
                                           about_path=args.about)
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        body = report_render.render(data, created)
        if args.format == "pdf":
            body = pdf.to_pdf(body)
        manifest = {"release": data.release, "against": data.against, "created_at": created,
                    "code_version": data.code_version, "code_commit": data.build.get("commit"),
                    "image_digest": data.build.get("image"), "inputs": data.inputs}
        if about is not None:
            manifest["about_sha256"] = about.sha256
        sealed = seal(body, manifest, key)
        # no audit row, no report (as for an export)
        detail = f"report {out.name}" + (f" signed {key.algorithm} key {key.key_id}" if key else "") + \
            (f" against {data.against}" if data.against else "")
        audit.record(store, Principal.local(source="cli"), "report", release=release, detail=detail)
    out.parent.mkdir(parents=True, exist_ok=True)  # the default <output-path>/reports/ is made on first use
    _atomic_write(out, sealed)
    signed = f"signed {key.algorithm}, key id {key.key_id}" if key else "NOT signed (give --sign KEYFILE)"
    check = "--hmac-key SECRETFILE" if key and key.secret else "--key PUBLIC_KEY"
    print(f"wrote {out} (release '{release}', {len(sealed)} bytes, {signed}); check it with: "
          f"medhelm report verify {out} {check}")
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
    from medhelm.files import read_bytes
    from medhelm.report import keys
    from medhelm.report.content import input_digests
    from medhelm.report.seal import REPORT_LIMIT, split, verify
    from medhelm.store import open_store

    trusted, trust = None, "this key"
    if args.key:
        trusted = [keys.load_public(args.key)]
    elif args.verify_hmac:
        trusted = [keys.load_hmac(args.verify_hmac)]
    elif args.trusted:
        trusted, trust = keys.load_trusted(args.trusted), str(args.trusted)
    inputs = None
    if args.verify_store:
        from medhelm.report import trust as store_trust

        manifest = split(read_bytes(args.file, limit=REPORT_LIMIT, what="report"), args.file).manifest
        with open_store(args.verify_store) as store:
            inputs = input_digests(store, str(manifest.get("release")), manifest.get("against"))
            if trusted is None:
                pinned = [k for k, _ in store_trust.trusted(store)]
                if pinned:
                    trusted, trust = pinned, "the store's"
    done = verify(args.file, trusted, inputs, trust=trust)
    manifest, used = done.manifest, done.key
    checks = ["content"] + (["signature"] if used else []) + (["inputs"] if inputs is not None else [])
    head = f"{args.file}: release '{manifest.get('release')}', sha256 {manifest.get('report_sha256')}"
    if used is not None:
        source = "" if trust == "this key" else f" in the trust list ({trust})"
        print(f"{args.file}: verified ({', '.join(checks)}); release '{manifest.get('release')}', "
              f"sha256 {manifest.get('report_sha256')} (signed {used.algorithm}, key id {used.key_id}{source})")
        return 0
    signer = manifest.get("signature") if isinstance(manifest.get("signature"), dict) else None
    claim = (f"it claims a {str(signer.get('algorithm'))[:20]} signature by key {str(signer.get('key_id'))[:16]}"
             if signer else "it is not signed")
    print(f"{head}: the content matches its manifest{' and the store' if inputs is not None else ''}, but the "
          f"signature was NOT checked ({claim}; anyone can edit a report and recompute its digest): give the "
          "signer's public key (--key), a trust list (--trusted, or the store's) or --hmac-key")
    return NOT_CHECKED


NOT_CHECKED = 4


def _trust(args: argparse.Namespace) -> int:
    from medhelm.access import Principal, audit
    from medhelm.report import keys
    from medhelm.report import trust as store_trust
    from medhelm.store import open_store

    if args.trust_action in ("add", "remove") and not args.what:
        raise ConfigError(f"report trust {args.trust_action}: name the " +
                          ("public key file" if args.trust_action == "add" else "key id"))
    key = keys.load_public(Path(args.what)) if args.trust_action == "add" else None
    with open_store(args.trust_store or store_location(args)) as store:
        if args.trust_action == "list":
            rows = store_trust.trusted(store)
            for k, row in rows:
                print(f"{k.key_id}  {k.algorithm:<15} added {row.get('added_at')}  {row.get('label') or ''}".rstrip())
            if not rows:
                print("the store's trust list is empty (medhelm report trust add KEY.pub)")
            return 0
        if key is not None:
            store_trust.add(store, key, args.label)
            detail = f"trust add {key.algorithm} key {key.key_id}"
        else:
            store_trust.remove(store, args.what)
            detail = f"trust remove key {args.what[:16]}"
        audit.record(store, Principal.local(source="cli"), "report", release=None, detail=detail)
    print(f"the store's trust list: {detail.removeprefix('trust ')}")
    return 0
