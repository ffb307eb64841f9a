"""The keys a report is signed and verified with, each read by its type, never guessed from "not a PEM":

* ``load_private`` (``report --sign``): a private key in PEM (PKCS#8 or traditional), DER or OpenSSH form;
* ``load_public`` (``report verify --key``): a public key in PEM, DER (SubjectPublicKeyInfo), OpenSSH
  (``ssh-ed25519 AAAA…``), JWK (RFC 7517 JSON) or an X.509 certificate; a private key gives its public half;
* ``load_trusted`` (``report verify --trusted``): a trust list, several public keys in one file (PEM blocks,
  OpenSSH lines as in ``authorized_keys``, or a JWK Set);
* ``load_hmac`` (``--hmac-key``, and only there): an HMAC-SHA256 secret of at least 32 bytes. A file that
  parses as a key is refused here, so a public key can never be used as a shared secret (algorithm confusion).

Supported kinds: Ed25519, ECDSA P-256 / P-384, RSA of at least 2048 bits (signed with RSA-PSS). The algorithm
is a property of the key (``SigningKey.algorithm``), never taken from the report being checked.

Each key has a ``key_id`` (16 hex digits): for a public key, of the SHA-256 of its DER SubjectPublicKeyInfo
(``openssl pkey -pubin -in KEY.pub -outform DER | sha256sum``); for an HMAC secret, of the HMAC-SHA256 of the
text ``medhelm report key id`` under the secret, so that no secret (not even one made of a public key's bytes)
shares an id with a public key, and the id is not a plain hash of the secret. Reports signed before with an
HMAC secret named it by the SHA-256 of the secret (``legacy_ids``). The id only names a key; the signature
check is what decides.

Parsing is ``cryptography``'s (the ``report-sign`` extra); JWK is read here (``cryptography`` has no JWK reader:
the members are RFC 7518's base64url integers and points, handed to its constructors).

Failure semantics: a file that is not a usable key of the expected kind (not a key, a public key given to sign,
a private key in a trust list, an encrypted private key, an unsupported algorithm, a short HMAC secret) is a
``ConfigError`` of one line naming the file, never echoing its bytes; ``cryptography`` missing is a
``ConfigError`` naming the extra. ``verify`` returns False for a signature that does not match; it never raises
on a forged value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.errors import ConfigError
from medhelm.scrub import register

MIN_HMAC_BYTES = 32
MIN_RSA_BITS = 2048
HMAC = "HMAC-SHA256"
KEY_LIMIT = 64 * 1024
TRUST_LIMIT = 4 * 1024 * 1024
HMAC_ID_TEXT = b"medhelm report key id"
NOT_A_KEY = ("not a key: expected a public key in PEM, DER, OpenSSH or JWK form (an HMAC secret is given with "
             "--hmac-key)")
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----", re.S)
_SSH_LINE = re.compile(rb"^(?:ssh-ed25519|ecdsa-sha2-nistp(?:256|384)|ssh-rsa) [A-Za-z0-9+/=]+(?: .*)?$", re.M)


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
    except ImportError:
        raise ConfigError("a public-key signature needs the cryptography package: "
                          "pip install 'medhelm-k8s[report-sign]'") from None
    return InvalidSignature, hashes, serialization, ec, ed25519, padding, rsa


@dataclass(frozen=True)
class SigningKey:
    """What signs or verifies: ``private`` is None for a verify-only public key; ``secret`` is set for HMAC."""

    algorithm: str
    key_id: str
    secret: bytes | None = None
    private: Any = None
    public: Any = None
    legacy_ids: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never the key's bytes, whatever prints it
        return f"SigningKey({self.algorithm}, key id {self.key_id})"

    def names(self, key_id: object) -> bool:
        """Whether ``key_id`` (as a manifest records it) is this key's id."""
        return isinstance(key_id, str) and key_id in (self.key_id, *self.legacy_ids)

    def sign(self, data: bytes) -> bytes:
        if self.secret is not None:
            return hmac.new(self.secret, data, hashlib.sha256).digest()
        if self.private is None:
            raise ConfigError("a public key cannot sign: give the private key to --sign")
        return _pk_call(self.algorithm, self.private, data, None)

    def verify(self, data: bytes, signature: bytes) -> bool:
        if self.secret is not None:
            return hmac.compare_digest(self.sign(data), signature)
        InvalidSignature = _crypto()[0]
        try:
            _pk_call(self.algorithm, self.public, data, signature)
        except (InvalidSignature, ValueError):
            return False
        return True

    def spki(self) -> bytes:
        """The public key's DER SubjectPublicKeyInfo (what the key id and a stored trust list are made of)."""
        serialization = _crypto()[2]
        return self.public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _pk_call(algorithm: str, key: Any, data: bytes, signature: bytes | None) -> Any:
    """Sign (``signature`` None, with the private key) or verify (with the public key) with the algorithm's
    fixed parameters, the ones docs/report.md gives openssl."""
    _, hashes, _, ec, _, padding, _ = _crypto()
    args: tuple = ()
    if algorithm.startswith("ECDSA-"):
        args = (ec.ECDSA(hashes.SHA384() if algorithm.endswith("384") else hashes.SHA256()),)
    elif algorithm == "RSA-PSS-SHA256":
        args = (padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32), hashes.SHA256())
    if signature is None:
        return key.sign(data, *args)
    return key.verify(signature, data, *args)


def _identity(public: Any, path: Path) -> tuple[str, str]:
    """(algorithm, key_id) of a public key, or a ConfigError for a kind we do not sign with."""
    _, _, serialization, ec, ed25519, _, rsa = _crypto()
    if isinstance(public, ed25519.Ed25519PublicKey):
        algorithm = "Ed25519"
    elif isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name in ("secp256r1", "secp384r1"):
        algorithm = "ECDSA-SHA256" if public.curve.name == "secp256r1" else "ECDSA-SHA384"
    elif isinstance(public, rsa.RSAPublicKey) and public.key_size >= MIN_RSA_BITS:
        algorithm = "RSA-PSS-SHA256"
    else:
        raise ConfigError("unsupported key: use Ed25519 (openssl genpkey -algorithm ed25519), ECDSA P-256 / P-384, "
                          f"or RSA of at least {MIN_RSA_BITS} bits", path=path)
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return algorithm, hashlib.sha256(der).hexdigest()[:16]


def _key(public: Any, path: Path, private: Any = None) -> SigningKey:
    algorithm, key_id = _identity(public, path)
    return SigningKey(algorithm, key_id, private=private, public=public)


def _private(data: bytes, path: Path) -> Any | None:
    """The private key in ``data`` (PEM, OpenSSH or DER), None when ``data`` holds no private key."""
    _, _, serialization, *_ = _crypto()
    from cryptography.exceptions import UnsupportedAlgorithm

    text = data.strip()
    if text.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----"):
        loader, what = (lambda: serialization.load_ssh_private_key(text, password=None)), "OpenSSH"
    elif text.startswith(b"-----BEGIN ") and b"PRIVATE KEY-----" in text.split(b"\n", 1)[0]:
        loader, what = (lambda: serialization.load_pem_private_key(text, password=None)), "PEM"
    elif text.startswith(b"-----BEGIN ") or not data[:1] == b"\x30":  # a DER key is an ASN.1 SEQUENCE
        return None
    else:
        try:
            return serialization.load_der_private_key(data, password=None)
        except TypeError:
            raise ConfigError("the private key is encrypted: give an unencrypted key (keep the file itself "
                              "protected, e.g. a Kubernetes Secret)", path=path) from None
        except (ValueError, UnsupportedAlgorithm):
            return None
    try:
        return loader()
    except TypeError:
        raise ConfigError("the private key is encrypted: give an unencrypted key (keep the file itself protected, "
                          "e.g. a Kubernetes Secret)", path=path) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(f"not a {what} private key that can be read", path=path) from None


def _public(data: bytes, path: Path) -> Any | None:
    """The public key in ``data`` (PEM, certificate, OpenSSH, JWK or DER), None when it holds none."""
    _, _, serialization, *_ = _crypto()
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm

    text = data.strip()
    try:
        if text.startswith(b"-----BEGIN CERTIFICATE-----"):
            return x509.load_pem_x509_certificate(text).public_key()
        if text.startswith(b"-----BEGIN ") and b"PUBLIC KEY-----" in text.split(b"\n", 1)[0]:
            return serialization.load_pem_public_key(text)
        if _SSH_LINE.fullmatch(text.split(b"\n", 1)[0]) and b"\n" not in text:
            return serialization.load_ssh_public_key(text)
        if text.startswith(b"{"):
            try:
                doc = json.loads(text)
            except ValueError:
                return None  # not JSON: not a JWK (an HMAC secret may start with "{" too)
            return _jwk(text, path, doc) if isinstance(doc, dict) and "kty" in doc else None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(NOT_A_KEY.replace("not a key", "not a public key that can be read"), path=path) from None
    if data[:1] == b"\x30":  # DER: an ASN.1 SEQUENCE (an HMAC secret may start with "0" too: then None)
        for der_loader in (serialization.load_der_public_key, lambda d: x509.load_der_x509_certificate(d).public_key()):
            try:
                return der_loader(data)
            except (ValueError, UnsupportedAlgorithm):
                pass
    return None


def _b64url_int(value: object, path: Path, name: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(str(value) + "=" * (-len(str(value)) % 4))
    except (binascii.Error, ValueError):
        raise ConfigError(f"JWK member '{name}' is not base64url", path=path) from None
    return int.from_bytes(raw, "big")


def _jwk(text: bytes, path: Path, doc: Any = None) -> Any:
    """A public key from one JWK (RFC 7517/7518/8037): OKP Ed25519, EC P-256/P-384, RSA; ``d`` is ignored."""
    _, _, _, ec, ed25519, _, rsa = _crypto()
    if doc is None:
        try:
            doc = json.loads(text)
        except ValueError:
            raise ConfigError("not a JWK (not valid JSON)", path=path) from None
    if not isinstance(doc, dict) or "kty" not in doc:
        raise ConfigError("not a JWK (no 'kty' member)", path=path)
    kty, crv = doc.get("kty"), doc.get("crv")
    need = {"OKP": ("x",), "EC": ("x", "y"), "RSA": ("n", "e")}.get(str(kty))
    if need is None:
        raise ConfigError(f"JWK kty '{str(kty)[:8]}' is not a public-key type (a shared secret is given with "
                          "--hmac-key)", path=path)
    for member in need:
        if not isinstance(doc.get(member), str):
            raise ConfigError(f"JWK member '{member}' is missing", path=path)
    if kty == "OKP":
        if crv != "Ed25519":
            raise ConfigError(f"JWK curve '{str(crv)[:16]}' is not supported (Ed25519 is)", path=path)
        raw = _b64url_int(doc["x"], path, "x").to_bytes(32, "big")
        return ed25519.Ed25519PublicKey.from_public_bytes(raw)
    if kty == "EC":
        curves = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1()}
        if crv not in curves:
            raise ConfigError(f"JWK curve '{str(crv)[:16]}' is not supported (P-256, P-384 are)", path=path)
        numbers = ec.EllipticCurvePublicNumbers(_b64url_int(doc["x"], path, "x"), _b64url_int(doc["y"], path, "y"),
                                                curves[crv])
        return numbers.public_key()
    return rsa.RSAPublicNumbers(_b64url_int(doc["e"], path, "e"), _b64url_int(doc["n"], path, "n")).public_key()


def _hold(data: bytes) -> None:
    """A private key's file held as a secret of this process: a PEM/OpenSSH file by its base64 lines (as an echo
    would quote them), anything else whole."""
    if data.lstrip().startswith(b"-----BEGIN "):
        for line in data.splitlines():
            if line.strip() and not line.startswith(b"-----"):
                register(line.decode("ascii", "replace").strip())
    else:
        register(data)


def load_private(path: Path) -> SigningKey:
    """The private key in ``path`` to sign with (PEM, DER or OpenSSH)."""
    data = files.read_bytes(path, limit=KEY_LIMIT, what="signing key")
    _hold(data)
    private = _private(data, path)
    if private is None:
        if _public(data, path) is not None:
            raise ConfigError("a public key cannot sign: give the private key to --sign (and the public key to "
                              "`report verify --key`)", path=path)
        raise ConfigError("not a private key (PEM, DER or OpenSSH); an HMAC secret is given with --hmac-key",
                          path=path)
    return _key(private.public_key(), path, private)


def load_public(path: Path) -> SigningKey:
    """The public key in ``path`` to verify with (or a private key's public half)."""
    data = files.read_bytes(path, limit=KEY_LIMIT, what="verification key")
    private = _private(data, path)
    public = private.public_key() if private is not None else _public(data, path)
    if public is None:
        raise ConfigError(NOT_A_KEY, path=path)
    return _key(public, path)


def load_hmac(path: Path) -> SigningKey:
    """The HMAC-SHA256 secret in ``path``: at least 32 bytes once surrounding whitespace is stripped, and not
    a public or private key."""
    data = files.read_bytes(path, limit=KEY_LIMIT, what="HMAC secret")
    try:
        is_key = _private(data, path) is not None or _public(data, path) is not None
    except ConfigError:
        is_key = True  # it claims to be a key (a PEM header, JWK JSON …) even if unreadable
    if is_key or data.strip().startswith(b"-----BEGIN "):
        raise ConfigError("this file is a public or private key, not an HMAC secret: give it to --sign / --key "
                          "(a public key is never used as a shared secret)", path=path)
    secret = data.strip()
    register(secret)  # held: scrubbed from every text this process emits
    if len(secret) < MIN_HMAC_BYTES:
        raise ConfigError(f"the HMAC secret has {len(secret)} bytes; use at least {MIN_HMAC_BYTES} random bytes "
                          "(e.g. `openssl rand -hex 32 > KEYFILE`)", path=path)
    key_id = hmac.new(secret, HMAC_ID_TEXT, hashlib.sha256).hexdigest()[:16]
    return SigningKey(HMAC, key_id, secret=secret, legacy_ids=(hashlib.sha256(secret).hexdigest()[:16],))


def load_trusted(path: Path) -> list[SigningKey]:
    """The public keys of a trust list: PEM blocks (public keys, certificates), OpenSSH public-key lines, a JWK
    Set (``{"keys": [...]}``), or one key in any form ``load_public`` reads. A private key is refused."""
    data = files.read_bytes(path, limit=TRUST_LIMIT, what="trust list")
    text = data.strip()
    publics: list[Any] = []
    if text.startswith(b"{"):
        try:
            doc = json.loads(text)
        except ValueError:
            raise ConfigError("the trust list is not valid JSON", path=path) from None
        for jwk in doc.get("keys", []) if isinstance(doc, dict) and "keys" in doc else [doc]:
            publics.append(_jwk(b"", path, jwk))
    else:
        blocks = [m.group(0) for m in _PEM_BLOCK.finditer(text)] + [m.group(0) for m in _SSH_LINE.finditer(text)]
        if not blocks and not text.startswith((b"-----", b"ssh-", b"ecdsa-")):
            blocks = [data]  # one DER key
        for block in blocks:
            if _private(block, path) is not None or b"PRIVATE KEY-----" in block[:40]:
                raise ConfigError("a trust list holds public keys only; this one holds a private key", path=path)
            public = _public(block, path)
            if public is None:
                raise ConfigError(NOT_A_KEY, path=path)
            publics.append(public)
    if not publics:
        raise ConfigError("the trust list holds no public key", path=path)
    return [_key(p, path) for p in publics]


def from_spki(der: bytes, where: str) -> SigningKey:
    """A public key kept as DER SubjectPublicKeyInfo (the store's trust list)."""
    _, _, serialization, *_ = _crypto()
    try:
        public = serialization.load_der_public_key(der)
    except ValueError:
        raise ConfigError(f"{where}: a stored trusted key cannot be read") from None
    return _key(public, Path(where))
