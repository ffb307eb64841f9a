"""`medhelm report verify` tested as an attacker would: real forgeries, each built the way a forger would build it
(the body edited and its digest recomputed, a signature made with a key the forger has), never a byte flipped
at random. What must hold: only a key the checker trusts makes a report "verified" (exit 0); without one the
signature is NOT checked (exit 4, and the line says so); the algorithm is the trusted key's own (a public key's
bytes used as an HMAC secret get nowhere); every byte of the file is covered (the PDF's trailer, the HTML's last
byte, the base64 of the signature); keys are read by their type (PEM, DER, OpenSSH, JWK, certificate) and a file
that is not a key is refused with one line; the store's trust list and a trust-list file refuse a report
re-signed by another key made from the very same store; docs/report.md's openssl block, run verbatim, agrees."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from medhelm.cli import main as cli
from tests.leaderboard.subgroup_helpers import make_two_releases

pytest.importorskip("cryptography", reason="the report-sign extra (cryptography) is not installed")
DOC = Path(__file__).resolve().parents[2] / "docs" / "report.md"
ROOT = Path(__file__).resolve().parents[2]
LINES = {"html": (b"<!-- medhelm-manifest ", b"<!-- medhelm-signature ", b" -->\n"),
         "pdf": (b"%medhelm-manifest ", b"%medhelm-signature ", b"\n")}


def _openssl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", *args], capture_output=True, timeout=300)


def _keypair(tmp: Path, name: str) -> dict[str, Path]:
    """An Ed25519 key made by openssl, in every form a hospital's tools hand out."""
    k = {"pem": tmp / f"{name}.pem", "pub": tmp / f"{name}.pub", "der": tmp / f"{name}.der",
         "priv_der": tmp / f"{name}.priv.der"}
    assert _openssl("genpkey", "-algorithm", "ed25519", "-out", str(k["pem"])).returncode == 0
    assert _openssl("pkey", "-in", str(k["pem"]), "-pubout", "-out", str(k["pub"])).returncode == 0
    assert _openssl("pkey", "-in", str(k["pem"]), "-pubout", "-outform", "DER", "-out", str(k["der"])).returncode == 0
    assert _openssl("pkey", "-in", str(k["pem"]), "-outform", "DER", "-out", str(k["priv_der"])).returncode == 0
    return k


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (the keys are made as docs/report.md says)")
    tmp = tmp_path_factory.mktemp("report_forgery")
    s = make_two_releases(tmp)
    s["tmp"] = tmp
    s["a"], s["b"] = _keypair(tmp, "genuine"), _keypair(tmp, "attacker")
    s["html"], s["accepted_html"] = tmp / "report.html", tmp / "accepted.html"
    for release, out in (("candidate", s["html"]), ("accepted", s["accepted_html"])):
        assert cli(["report", "--release", release, "--sign", str(s["a"]["pem"]), "--out", str(out), "--store",
                    str(s["store"])]) == 0
    try:
        import weasyprint  # noqa: F401

        s["pdf"] = tmp / "report.pdf"
        assert cli(["report", "--release", "candidate", "--format", "pdf", "--sign", str(s["a"]["pem"]), "--out",
                    str(s["pdf"]), "--store", str(s["store"])]) == 0
    except (ImportError, OSError):  # the report-pdf extra, or the system's Pango, is missing
        s["pdf"] = None
    return s


def _key_id(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()[:16]


def _parts(data: bytes) -> tuple[bytes, dict, str]:
    """(body, manifest, kind) of a sealed report, read as a forger reads it."""
    kind = "pdf" if data.startswith(b"%PDF-") else "html"
    start, _, end = LINES[kind]
    at = data.rindex(b"\n" + start)
    line = data[at + 1 + len(start):data.index(b"\n", at + 1)]
    return data[:at], json.loads(line[:len(line) - len(end) + 1] if kind == "html" else line), kind


def _forge(data: bytes, *, body: bytes | None = None, signer=None, manifest: dict | None = None) -> bytes:
    """A report rebuilt by a forger: ``body`` (default: the original's), its digest recomputed, the manifest
    updated with ``manifest``, and the signature line made by ``signer(signed_bytes) -> bytes``."""
    old_body, doc, kind = _parts(data)
    body = old_body if body is None else body
    start, sig_start, end = LINES[kind]
    doc = {**doc, "report_sha256": hashlib.sha256(body).hexdigest(), **(manifest or {})}
    text = json.dumps(doc, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode()
    text = text.replace(b"-", b"\\u002d").replace(b"<", b"\\u003c").replace(b">", b"\\u003e")
    signed = body + b"\n" + start + text + end
    out = signed + sig_start + base64.b64encode(signer(signed)) + end
    if kind == "pdf":
        out += data[data.rindex(b"startxref\n"):]
    return out


def _edit_body(data: bytes) -> bytes:
    body, _, kind = _parts(data)
    if kind == "html":
        return body.replace(b"Leaderboard", b"Leaderbored", 1)
    at = body.index(b"/Type")  # one byte of the PDF's objects
    return body[:at] + b"/Typf" + body[at + 5:]


def _verify(tmp: Path, data: bytes, *args: str, name: str = "t.html") -> tuple[int, str, str]:
    import contextlib
    import io

    path = tmp / name
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(["report", "verify", str(path), *args])
    return code, out.getvalue(), err.getvalue()


def _refused(result: tuple[int, str, str], code: int, words: str) -> None:
    got, out, err = result
    assert got == code and words in err and len(err.strip().splitlines()) == 1 and "verified" not in out, result


def test_without_a_key_a_forgery_is_never_verified(made: dict, tmp_path: Path) -> None:
    """The issue's forgery: body changed, digest recomputed, random bytes as the signature."""
    data = made["html"].read_bytes()
    forged = _forge(data, body=_edit_body(data), signer=lambda _: os.urandom(64))
    code, out, err = _verify(tmp_path, forged)
    assert code == 4 and "verified" not in out and err == ""
    assert "the signature was NOT checked (it claims a Ed25519 signature by key" in out
    # with --store and no trust list in it: still not checked
    code, out, _ = _verify(tmp_path, forged, "--store", str(made["store"]))
    assert code == 4 and "NOT checked" in out
    # the genuine report says the same without a key: a digest proves nothing about who made it
    assert _verify(tmp_path, data)[0] == 4
    for form in ("pub", "der", "pem", "priv_der"):
        _refused(_verify(tmp_path, forged, "--key", str(made["a"][form])), 3, "signature does not match")
        assert _verify(tmp_path, data, "--key", str(made["a"][form]))[0] == 0


def test_algorithm_confusion_public_key_bytes_as_an_hmac_secret(made: dict, tmp_path: Path) -> None:
    """The forger signs with HMAC-SHA256 keyed by the genuine public key's bytes (which everyone has) and names
    the genuine key's id: the checker's public key fixes the algorithm, so no form of it accepts the forgery."""
    data = made["html"].read_bytes()
    der, pem = made["a"]["der"].read_bytes(), made["a"]["pub"].read_bytes()
    genuine_id = _key_id(der)
    assert genuine_id == hashlib.sha256(der).hexdigest()[:16]  # the old HMAC key id of that secret: a collision
    body = _edit_body(data)
    for secret in (der, pem, pem.strip()):
        for algorithm in ("HMAC-SHA256", "Ed25519"):
            forged = _forge(data, body=body, manifest={"signature": {"algorithm": algorithm, "key_id": genuine_id}},
                            signer=lambda signed, k=secret: hmac.new(k, signed, hashlib.sha256).digest())
            for form in ("der", "pub", "pem"):
                code, out, err = _verify(tmp_path, forged, "--key", str(made["a"][form]))
                assert code == 3 and "verified" not in out, (algorithm, form, err)
                assert ("not with this key (Ed25519" in err) if algorithm.startswith("HMAC") else \
                    ("signature does not match" in err)
    # and the public key can never be handed over as the secret
    for form in ("der", "pub"):
        _refused(_verify(tmp_path, forged, "--hmac-key", str(made["a"][form])), 2, "not an HMAC secret")
    # an HMAC secret's id is not a plain hash of its bytes, so it never equals a public key's id
    secret = tmp_path / "secret.key"
    secret.write_text(os.urandom(32).hex())  # hex: no surrounding whitespace to strip
    from medhelm.report.keys import HMAC_ID_TEXT, load_hmac

    key = load_hmac(secret)
    assert key.key_id == hmac.new(secret.read_bytes(), HMAC_ID_TEXT, hashlib.sha256).hexdigest()[:16]
    assert key.key_id != hashlib.sha256(secret.read_bytes()).hexdigest()[:16]


def test_key_id_collision_another_key_claims_the_genuine_id(made: dict, tmp_path: Path) -> None:
    """The attacker signs with their own Ed25519 key and writes the genuine key's id in the manifest."""
    from medhelm.report.keys import load_private

    data = made["html"].read_bytes()
    attacker = load_private(made["b"]["pem"])
    forged = _forge(data, body=_edit_body(data), signer=attacker.sign,
                    manifest={"signature": {"algorithm": "Ed25519", "key_id": _key_id(made["a"]["der"].read_bytes())}})
    _refused(_verify(tmp_path, forged, "--key", str(made["a"]["pub"])), 3, "signature does not match")
    both = tmp_path / "both.pem"
    both.write_bytes(made["a"]["pub"].read_bytes() + made["b"]["pub"].read_bytes())
    # even a trust list holding both keys: the key named does not sign it, the one that signs is not named
    _refused(_verify(tmp_path, forged, "--trusted", str(both)), 3, "signature does not match")


@pytest.mark.parametrize("fmt", ["html", "pdf"])
def test_every_byte_is_covered_trailer_edits_and_truncation(made: dict, tmp_path: Path, fmt: str) -> None:
    report = made["html"] if fmt == "html" else made["pdf"]
    if report is None:
        pytest.skip("the report-pdf extra (weasyprint) cannot be imported")
    data, key = report.read_bytes(), str(made["a"]["pub"])
    name = f"t.{fmt}"
    assert _verify(tmp_path, data, "--key", key, name=name)[0] == 0
    sig = data.rindex(b"medhelm-signature ") + len(b"medhelm-signature ")
    sig_end = data.index(b"\n", sig)
    b64 = data[sig:sig_end].split(b" ")[0]
    assert b64.endswith(b"==")  # a 64-byte signature: the last digit before "==" carries 4 unused bits
    last = sig + len(b64) - 3
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    same_bytes = alphabet[alphabet.index(data[last:last + 1]) ^ 1:][:1]
    assert base64.b64decode(data[sig:last] + same_bytes + b"==") == base64.b64decode(b64)
    edits = {
        "last byte cut": data[:-1],
        "two bytes cut": data[:-2],
        "a newline added": data + b"\n",
        "a space added": data[:-1] + b" \n",
        "bytes added after the signature": data[:sig_end + 1] + b"<p>added</p>\n" + data[sig_end + 1:],
        "the signature's base64 spelled differently": data[:last] + same_bytes + data[last + 1:],
        "the signature line removed": data[:data.rindex(b"\n", 0, sig) + 1] + data[sig_end + 1:],
        "cut inside the signature line": data[:sig + 20],
        "cut inside the manifest": data[:data.rindex(b"medhelm-manifest") + 40],
    }
    if fmt == "pdf":
        xref = data.rindex(b"startxref\n")
        edits |= {
            "startxref changed": data[:xref] + b"startxref\n1" + data[xref + len(b"startxref\n"):],
            "%%EOF with CRLF": data[:-1] + b"\r\n",
            "%%EOF removed": data[:-len(b"%%EOF\n")],
            "trailer removed": data[:xref],
            "blank line before %%EOF": data[:-len(b"%%EOF\n")] + b"\n%%EOF\n",
            "a comment after %%EOF": data + b"%x\n",
        }
    for what, changed in edits.items():
        assert changed != data
        code, out, err = _verify(tmp_path, changed, "--key", key, name=name)
        assert code in (2, 3) and "verified" not in out and len(err.strip().splitlines()) == 1, (what, code, err)
        code, out, _ = _verify(tmp_path, changed, name=name)
        assert code in (2, 3), (what, code, out)  # not even "content matches" (exit 4) for a changed end


def test_swapped_manifests(made: dict, tmp_path: Path) -> None:
    """Two genuine reports signed by the same key: one's body with the other's manifest and signature."""
    a, b = made["html"].read_bytes(), made["accepted_html"].read_bytes()
    key = str(made["a"]["pub"])
    body_a = _parts(a)[0]
    tail_b = b[len(_parts(b)[0]):]
    _refused(_verify(tmp_path, body_a + tail_b, "--key", key), 3, "content no longer matches")
    # the other's manifest with the digest recomputed, and its signature: the signature no longer matches
    swapped = _forge(b, body=body_a, signer=lambda _: base64.b64decode(b.rsplit(b"medhelm-signature ", 1)[1][:88]))
    _refused(_verify(tmp_path, swapped, "--key", key), 3, "signature does not match")
    # the manifest of release 'accepted' on the report of 'candidate', digest kept: content no longer matches
    _refused(_verify(tmp_path, a[:len(body_a)] + b[len(_parts(b)[0]):], "--key", key), 3, "content no longer")


def test_keys_are_read_by_their_type(made: dict, tmp_path: Path, capsys) -> None:
    from cryptography.hazmat.primitives import serialization

    from medhelm.report.keys import load_public

    store, data = str(made["store"]), made["html"].read_bytes()
    public = load_public(made["a"]["pub"]).public
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    forms = {"jwk": json.dumps({"kty": "OKP", "crv": "Ed25519",
                                "x": base64.urlsafe_b64encode(raw).rstrip(b"=").decode()}).encode(),
             "ssh": public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)}
    cert = tmp_path / "cert.pem"
    assert _openssl("req", "-x509", "-key", str(made["a"]["pem"]), "-subj", "/CN=report", "-days", "30",
                    "-out", str(cert)).returncode == 0
    forms["cert"] = cert.read_bytes()
    for form, content in forms.items():
        path = tmp_path / f"key.{form}"
        path.write_bytes(content)
        code, out, err = _verify(tmp_path, data, "--key", str(path))
        assert code == 0 and "verified (content, signature)" in out, (form, err)
    # a DER private key and an OpenSSH private key sign (Ed25519), and verify with the PEM public key
    ssh_private = tmp_path / "id_ed25519"
    ssh_private.write_bytes(load_private_pem(made["a"]["pem"]).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    for private in (made["a"]["priv_der"], ssh_private):
        out = tmp_path / f"signed-{private.name}.html"
        assert cli(["report", "--release", "accepted", "--sign", str(private), "--out", str(out), "--store",
                    store]) == 0
        assert "signed Ed25519" in capsys.readouterr().out
        assert _verify(tmp_path, out.read_bytes(), "--key", str(made["a"]["pub"]))[0] == 0
    # what is not a private key never signs (the old code took any non-PEM file as an HMAC secret)
    random_bytes = tmp_path / "random.bin"
    random_bytes.write_bytes(os.urandom(64))
    for path, words in ((ROOT / "README.md", "not a private key"), (random_bytes, "not a private key"),
                        (made["a"]["der"], "a public key cannot sign"), (made["a"]["pub"], "a public key cannot sign")):
        out = tmp_path / "refused.html"
        assert cli(["report", "--release", "accepted", "--sign", str(path), "--out", str(out), "--store",
                    store]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1 and str(path) in err and not out.exists()
    # what is not a public key never verifies
    for path in (ROOT / "README.md", random_bytes):
        _refused(_verify(tmp_path, data, "--key", str(path)), 2, "not a key: expected a public key")
    # a key given as an HMAC secret, to sign or to verify, is refused
    assert cli(["report", "--release", "accepted", "--hmac-key", str(made["a"]["pem"]), "--out",
                str(tmp_path / "h.html"), "--store", store]) == 2
    assert "not an HMAC secret" in capsys.readouterr().err and not (tmp_path / "h.html").exists()


def load_private_pem(path: Path):
    from medhelm.report.keys import load_private

    return load_private(path).private


def test_resigned_by_another_key_from_the_same_store(made: dict, tmp_path: Path, capsys) -> None:
    """The attacker, with write access to reports but not to the committee's keys, makes a report from the very
    same store (so every input digest matches) and signs it with their own key, or re-signs the genuine one
    after an edit: the store's trust list and a trust-list file refuse both; the genuine one passes."""
    from medhelm.report.keys import load_private

    store = str(made["store"])
    genuine = made["html"].read_bytes()
    own = tmp_path / "own.html"
    assert cli(["report", "--release", "candidate", "--sign", str(made["b"]["pem"]), "--out", str(own), "--store",
                store]) == 0
    resigned = _forge(genuine, body=_edit_body(genuine), signer=load_private(made["b"]["pem"]).sign,
                      manifest={"signature": {"algorithm": "Ed25519", "key_id": _key_id(made["b"]["der"].read_bytes())}})
    capsys.readouterr()
    # no trust list yet: `--store` checks the inputs, and says plainly that the signature was not checked
    code, out, _ = _verify(tmp_path, own.read_bytes(), "--store", store)
    assert code == 4 and "NOT checked" in out
    # pin the genuine key (given as DER, as a KMS exports it) in the store
    assert cli(["report", "trust", "add", str(made["a"]["der"]), "--label", "AI lab", "--store", store]) == 0
    assert cli(["report", "trust", "list", "--store", store]) == 0
    listed = capsys.readouterr().out
    assert _key_id(made["a"]["der"].read_bytes()) in listed and "AI lab" in listed
    code, out, _ = _verify(tmp_path, genuine, "--store", store)
    assert code == 0 and "verified (content, signature, inputs)" in out and "trust list (the store's)" in out
    for forged in (own.read_bytes(), resigned):
        _refused(_verify(tmp_path, forged, "--store", store), 3, "which is not in the trust list (the store's)")
    # a trust-list file: the genuine key and another one (OpenSSH line), as a committee keeps them
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    committee = tmp_path / "committee.keys"
    committee.write_bytes(made["a"]["pub"].read_bytes() + other + b" committee\n")
    assert _verify(tmp_path, genuine, "--trusted", str(committee))[0] == 0
    for forged in (own.read_bytes(), resigned):
        _refused(_verify(tmp_path, forged, "--trusted", str(committee)), 3, "which is not in the trust list")
    # a trust list must not hold a private key; adding twice or a non-key is refused; every change is audited
    bad = tmp_path / "bad.keys"
    bad.write_bytes(made["a"]["pub"].read_bytes() + made["b"]["pem"].read_bytes())
    _refused(_verify(tmp_path, genuine, "--trusted", str(bad)), 2, "holds a private key")
    assert cli(["report", "trust", "add", str(made["a"]["pub"]), "--store", store]) == 2
    assert "in the store's trust list already" in capsys.readouterr().err
    assert cli(["report", "trust", "add", str(ROOT / "README.md"), "--store", store]) == 2
    assert "not a key" in capsys.readouterr().err
    con = sqlite3.connect(store)
    details = [d for (d,) in con.execute("SELECT detail FROM audit WHERE action = 'report' AND detail LIKE 'trust%'")]
    con.close()
    assert details == [f"trust add Ed25519 key {_key_id(made['a']['der'].read_bytes())}"]
    assert cli(["report", "trust", "remove", _key_id(made["a"]["der"].read_bytes()), "--store", store]) == 0
    assert _verify(tmp_path, genuine, "--store", store)[0] == 4


def _doc_block(title: str) -> str:
    text = DOC.read_text()
    at = text.index(title)
    start = text.rindex("```sh\n", 0, at) + len("```sh\n")
    return text[start:text.index("```", at)]


@pytest.mark.parametrize("fmt", ["html", "pdf"])
def test_openssl_alone_as_the_docs_say_refuses_forgeries(made: dict, tmp_path: Path, fmt: str) -> None:
    """docs/report.md's block, run verbatim with bash and coreutils only: the genuine report passes; a changed
    manifest, bytes added after the signature, the last byte cut, a PDF trailer edited and the signature's
    base64 spelled differently all fail."""
    report = made["html"] if fmt == "html" else made["pdf"]
    if report is None:
        pytest.skip("the report-pdf extra (weasyprint) cannot be imported")
    script = _doc_block("# check a public-key signature offline")
    work = tmp_path / "offline"
    work.mkdir()
    name = f"report.{fmt}"
    shutil.copy(made["a"]["pub"], work / "report.pub")

    def offline(data: bytes) -> subprocess.CompletedProcess:
        (work / name).write_bytes(data)
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "REPORT": name, "PUB": "report.pub"}, timeout=300)

    data = report.read_bytes()
    done = offline(data)
    assert done.returncode == 0 and "Signature Verified Successfully" in done.stdout, done.stdout + done.stderr
    at = data.rindex(b"medhelm-manifest")
    sig = data.rindex(b"medhelm-signature ") + len(b"medhelm-signature ")
    sig_end = data.index(b"\n", sig)
    b64 = data[sig:sig_end].split(b" ")[0]
    last = sig + len(b64) - 3
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    same_bytes = alphabet[alphabet.index(data[last:last + 1]) ^ 1:][:1]
    bad = {"changed manifest": data[:at] + data[at:].replace(b"candidate", b"candidatX", 1),
           "added after the signature": data[:sig_end + 1] + b"<p>added later</p>\n" + data[sig_end + 1:],
           "last byte cut": data[:-1],
           "a byte added at the end": data + b"\n",
           "base64 spelled differently": data[:last] + same_bytes + data[last + 1:],
           "forged body, digest recomputed": _forge(data, body=_edit_body(data), signer=lambda _: os.urandom(64))}
    if fmt == "pdf":
        xref = data.rindex(b"startxref\n")
        bad["startxref changed"] = data[:xref] + b"startxref\n1" + data[xref + len(b"startxref\n"):]
        bad["%%EOF with CRLF"] = data[:-1] + b"\r\n"
    for what, changed in bad.items():
        done = offline(changed)
        assert done.returncode != 0 and "Signature Verified Successfully" not in done.stdout, (what, done.stdout)
