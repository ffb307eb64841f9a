"""The keys a report is signed and verified with: an HMAC-SHA256 secret (a file of at least 32 random bytes,
standard library only) or a public-key pair in PEM (Ed25519, ECDSA P-256 / P-384, RSA-PSS of at least 2048 bits),
read with ``cryptography`` (the ``report-sign`` extra). A public-key signature can be checked by anyone who has
the public key, offline, with ``openssl`` alone (docs/report.md); an HMAC only by whoever holds the secret.

Each key has a ``key_id``: the first 16 hex digits of the SHA-256 of the secret (HMAC) or of the public key's
DER SubjectPublicKeyInfo (``openssl pkey -pubin -in KEY.pub -outform DER | sha256sum``). The manifest names the
key by it, never by its bytes.

Failure semantics: a key file that cannot be used (too short, an unreadable or encrypted PEM, an unsupported
algorithm, a public key given to sign with) is a ``ConfigError`` naming the file, never echoing its bytes; a PEM
key without ``cryptography`` installed is a ``ConfigError`` naming the extra. ``verify`` returns False for a
signature that does not match; it never raises on a forged value.
"""

from __future__ import annotations

import hashlib
import hmac
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


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
    except ImportError:
        raise ConfigError("a PEM key (public-key signature) needs the cryptography package: "
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

    def __repr__(self) -> str:  # never the key's bytes, whatever prints it
        return f"SigningKey({self.algorithm}, key id {self.key_id})"

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
        except InvalidSignature:
            return False
        return True


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


def _pk_identity(public: Any, path: Path) -> tuple[str, str]:
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


def load(path: Path, *, to_sign: bool) -> SigningKey:
    """The key in ``path``: a PEM private key (to sign or verify), a PEM public key (to verify) or an HMAC
    secret (any other content, at least 32 bytes once surrounding whitespace is stripped)."""
    data = files.read_bytes(path, limit=KEY_LIMIT, what="signing key" if to_sign else "verification key")
    if b"-----BEGIN " not in data:
        secret = data.strip()
        register(secret)  # held: scrubbed from every text this process emits
        if len(secret) < MIN_HMAC_BYTES:
            raise ConfigError(f"the signing key has {len(secret)} bytes; use at least {MIN_HMAC_BYTES} random bytes "
                              "(e.g. `openssl rand -hex 32 > KEYFILE`) or a PEM key", path=path)
        return SigningKey(HMAC, hashlib.sha256(secret).hexdigest()[:16], secret=secret)
    _, _, serialization, *_ = _crypto()
    from cryptography.exceptions import UnsupportedAlgorithm

    private = None
    if b"PRIVATE KEY-----" in data:
        for line in data.splitlines():  # the PEM's base64 lines, as an echo would quote them
            if line and not line.startswith(b"-----"):
                register(line.decode("ascii", "replace").strip())
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except TypeError:
            raise ConfigError("the private key is encrypted: give an unencrypted PEM (keep the file itself "
                              "protected, e.g. a Kubernetes Secret)", path=path) from None
        except (ValueError, UnsupportedAlgorithm):
            raise ConfigError("not a PEM private key that can be read", path=path) from None
        public = private.public_key()
    else:
        if to_sign:
            raise ConfigError("a public key cannot sign: give the private key to --sign (and the public key to "
                              "`report verify --key`)", path=path)
        try:
            public = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm):
            raise ConfigError("not a PEM public key that can be read", path=path) from None
    algorithm, key_id = _pk_identity(public, path)
    return SigningKey(algorithm, key_id, private=private, public=public)
