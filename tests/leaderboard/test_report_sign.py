"""`medhelm report --sign KEY.pem` / `report verify FILE --key KEY.pub`: public-key signatures (Ed25519, ECDSA,
RSA-PSS) made with keys that openssl generated, checked by medhelm and by openssl (the documented offline block
and forgeries: test_report_forgery.py); a changed byte, a changed manifest, a changed signature and a wrong key each
fail with one line; the key's bytes are in no output; reports of the first format (HMAC) still verify."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm.cli import main as cli
from tests.leaderboard.subgroup_helpers import make_two_releases

pytest.importorskip("cryptography", reason="the report-sign extra (cryptography) is not installed")
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")


def _openssl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=300)


def _keypair(tmp: Path, name: str, *genpkey: str) -> tuple[Path, Path]:
    private, public = tmp / f"{name}.pem", tmp / f"{name}.pub"
    assert _openssl("genpkey", *genpkey, "-out", str(private)).returncode == 0
    assert _openssl("pkey", "-in", str(private), "-pubout", "-out", str(public)).returncode == 0
    return private, public


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (the keys are made as docs/report.md says)")
    tmp = tmp_path_factory.mktemp("report_sign")
    s = make_two_releases(tmp)
    s["tmp"] = tmp
    s["ed"] = _keypair(tmp, "ed", "-algorithm", "ed25519")
    s["html"] = tmp / "report.html"
    assert cli(["report", "--release", "candidate", "--against", "accepted", "--sign", str(s["ed"][0]), "--out",
                str(s["html"]), "--store", str(s["store"])]) == 0
    return s


def _key_id(public: Path) -> str:
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", str(public), "-outform", "DER"], capture_output=True,
                         check=True).stdout
    return hashlib.sha256(der).hexdigest()[:16]


def test_ed25519_signature_verifies_with_the_public_key(made: dict, capsys) -> None:
    private, public = made["ed"]
    out = capsys.readouterr().out
    manifest = json.loads(made["html"].read_bytes().rsplit(b"<!-- medhelm-manifest ", 1)[1].split(b" -->")[0])
    assert manifest["signature"] == {"algorithm": "Ed25519", "key_id": _key_id(public)}
    assert cli(["report", "verify", str(made["html"]), "--key", str(public), "--store", str(made["store"])]) == 0
    out = capsys.readouterr().out
    assert "verified (content, signature, inputs)" in out and f"Ed25519, key id {_key_id(public)}" in out
    # the private key verifies too (its public half); without a key, the content only, and it says who signed
    assert cli(["report", "verify", str(made["html"]), "--key", str(private)]) == 0
    assert cli(["report", "verify", str(made["html"])]) == 4
    assert "signature was NOT checked (it claims a Ed25519 signature" in capsys.readouterr().out


def test_tampering_and_wrong_keys_fail_with_one_line(made: dict, tmp_path: Path, capsys) -> None:
    data, public = made["html"].read_bytes(), str(made["ed"][1])

    def check(changed: bytes, key: str = public) -> str:
        path = tmp_path / "t.html"
        path.write_bytes(changed)
        code = cli(["report", "verify", str(path), "--key", key])
        err = capsys.readouterr().err
        assert code == 3 and len(err.strip().splitlines()) == 1, err
        return err

    at = data.index(b"Leaderboard")
    assert "content no longer matches" in check(data[:at] + b"l" + data[at + 1:])
    m = data.rindex(b"medhelm-manifest")
    assert "signature does not match" in check(data[:m] + data[m:].replace(b"candidate", b"candidatX", 1))
    s = data.rindex(b"medhelm-signature ") + len(b"medhelm-signature ")
    flipped = b"B" if data[s:s + 1] == b"A" else b"A"  # the signature's first base64 digit
    assert "signature does not match" in check(data[:s] + flipped + data[s + 1:])
    # the body and its digest both changed: only the signature can tell
    body_end = data.index(b"\n<!-- medhelm-manifest ")
    body = data[:body_end].replace(b"Leaderboard", b"Leaderbored", 1)
    forged = body + data[body_end:].replace(hashlib.sha256(data[:body_end]).hexdigest().encode(),
                                            hashlib.sha256(body).hexdigest().encode())
    assert "signature does not match" in check(forged)
    other = _keypair(tmp_path, "other", "-algorithm", "ed25519")[1]
    assert "not with this key" in check(data, str(other))
    hmac_key = tmp_path / "hmac.key"
    hmac_key.write_text("ab" * 32)
    code = cli(["report", "verify", str(made["html"]), "--hmac-key", str(hmac_key)])
    err = capsys.readouterr().err
    assert code == 3 and "signed with Ed25519 key" in err and "HMAC-SHA256" in err


def test_unsigned_manifest_with_signature_line_removed_is_reported(made: dict, tmp_path: Path, capsys) -> None:
    data = made["html"].read_bytes()
    path = tmp_path / "cut.html"
    path.write_bytes(data[:data.rindex(b"<!-- medhelm-signature ")])
    assert cli(["report", "verify", str(path)]) == 3
    err = capsys.readouterr().err
    assert "disagree on whether it is signed" in err and len(err.strip().splitlines()) == 1


@needs_openssl
@pytest.mark.parametrize("name, genpkey, dgst", [
    ("ec", ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"), ("-sha256",)),
    ("rsa", ("-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"),
     ("-sha256", "-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:32")),
])
def test_ecdsa_and_rsa_pss(made: dict, tmp_path: Path, capsys, name: str, genpkey: tuple, dgst: tuple) -> None:
    private, public = _keypair(tmp_path, name, *genpkey)
    out = tmp_path / f"{name}.html"
    assert cli(["report", "--release", "accepted", "--sign", str(private), "--out", str(out), "--store",
                str(made["store"])]) == 0
    assert cli(["report", "verify", str(out), "--key", str(public)]) == 0
    algorithm = {"ec": "ECDSA-SHA256", "rsa": "RSA-PSS-SHA256"}[name]
    assert f"signed {algorithm}" in capsys.readouterr().out
    # openssl alone: the bytes before the signature line, the signature decoded
    data = out.read_bytes()
    at = data.rindex(b"<!-- medhelm-signature ")
    (tmp_path / "signed.part").write_bytes(data[:at])
    (tmp_path / "sig.bin").write_bytes(base64.b64decode(data[at:].split(b" ")[2]))
    done = _openssl("dgst", *dgst, "-verify", str(public), "-signature", str(tmp_path / "sig.bin"),
                    str(tmp_path / "signed.part"))
    assert done.returncode == 0 and "Verified OK" in done.stdout, done.stdout + done.stderr


def test_bad_keys_are_one_line_and_never_echoed(made: dict, tmp_path: Path, capsys) -> None:
    private, public = made["ed"]
    out = tmp_path / "x.html"
    store = str(made["store"])
    assert cli(["report", "--release", "accepted", "--sign", str(public), "--out", str(out), "--store", store]) == 2
    assert "a public key cannot sign" in capsys.readouterr().err and not out.exists()
    encrypted = tmp_path / "enc.pem"
    assert _openssl("genpkey", "-algorithm", "ed25519", "-aes-256-cbc", "-pass", "pass:pw", "-out",
                    str(encrypted)).returncode == 0
    assert cli(["report", "--release", "accepted", "--sign", str(encrypted), "--out", str(out), "--store",
                store]) == 2
    assert "encrypted" in capsys.readouterr().err and not out.exists()
    weak = tmp_path / "weak.pem"
    assert _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out",
                    str(weak)).returncode == 0
    assert cli(["report", "--release", "accepted", "--sign", str(weak), "--out", str(out), "--store", store]) == 2
    assert "at least 2048 bits" in capsys.readouterr().err and not out.exists()
    garbage = tmp_path / "garbage.pem"  # claims to be a PEM private key
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5IGF0IGFsbA==\n-----END PRIVATE KEY-----\n")
    assert cli(["report", "--release", "accepted", "--sign", str(garbage), "--out", str(out), "--store", store]) == 2
    err = capsys.readouterr().err
    assert "not a PEM private key" in err and "bm90IGEga2V5" not in err and len(err.strip().splitlines()) == 1
    # the signing key's base64 is in no output, no report and no audit row
    assert cli(["report", "--release", "accepted", "--sign", str(private), "--out", str(out), "--store", store]) == 0
    secret = private.read_text().splitlines()[1]
    said = capsys.readouterr()
    con = sqlite3.connect(store)
    audit = json.dumps(con.execute("SELECT * FROM audit").fetchall())
    con.close()
    for where in (said.out, said.err, out.read_text(), made["html"].read_text(), audit):
        assert secret not in where


def test_missing_sign_extra_is_one_line_naming_it(made: dict, tmp_path: Path) -> None:
    out = tmp_path / "x.html"
    code = ("import sys; sys.modules['cryptography'] = None\n"
            "from medhelm.cli import main\n"
            f"sys.exit(main(['report', '--sign', {str(made['ed'][0])!r}, '--out', {str(out)!r}, '--store', "
            f"{str(made['store'])!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "medhelm-k8s[report-sign]" in lines[0] and not out.exists()


def test_a_report_of_the_first_format_still_verifies(made: dict, tmp_path: Path, capsys) -> None:
    """Format 1 (HMAC-SHA256 over the manifest's canonical JSON, inside the manifest), built here by hand."""
    body = b"<!DOCTYPE html><html><body><h1>an old report</h1></body></html>"
    secret = b"c4" * 32
    manifest = {"release": "old", "against": None, "created_at": "2026-11-20T00:00:00+00:00", "code_version": "0.1",
                "inputs": {}, "format": "medhelm-report-manifest/1",
                "report_sha256": hashlib.sha256(body).hexdigest()}
    canonical = json.dumps(manifest, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode()
    manifest["signature"] = {"algorithm": "HMAC-SHA256", "key_id": hashlib.sha256(secret).hexdigest()[:16],
                             "value": hmac.new(secret, canonical, hashlib.sha256).hexdigest()}
    line = json.dumps(manifest, sort_keys=True, separators=(",", ":")).replace("-", "\\u002d").encode()
    key = tmp_path / "old.key"
    key.write_bytes(secret)
    path = tmp_path / "old.html"
    path.write_bytes(body + b"\n<!-- medhelm-manifest " + line + b" -->\n")
    assert cli(["report", "verify", str(path), "--hmac-key", str(key)]) == 0
    path.write_bytes(body + b"\n<!-- medhelm-manifest " + line.replace(b'"old"', b'"olD"') + b" -->\n")
    assert cli(["report", "verify", str(path), "--hmac-key", str(key)]) == 3
    assert "signature does not match" in capsys.readouterr().err
    assert re.search(r"^[0-9a-f]{16}$", manifest["signature"]["key_id"])
