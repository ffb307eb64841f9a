"""TLS material from PEM files (server side; the client side is ``remote.Endpoint``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from medhelm import files
from medhelm.errors import ConfigError


def read_pem(path: Path, flag: str) -> bytes:
    try:
        return files.read_bytes(path, what=f"{flag} PEM file")
    except ConfigError as err:
        raise err.with_context(f"{flag}: ") from None


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None  # given: mutual TLS (clients must present a certificate it signed)

    def credentials(self) -> grpc.ServerCredentials:
        cert, key = read_pem(self.cert, "--tls-cert"), read_pem(self.key, "--tls-key")
        ca = read_pem(self.client_ca, "--tls-client-ca") if self.client_ca else None
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def self_check_name(cert: Path, host: str) -> str | None:
    """The name to verify the server's own certificate by when the process calls itself on ``host``
    (readiness, ``server._HealthPort``): None when ``host`` is among its addresses, else its first DNS name."""
    import ssl

    try:  # CPython's own PEM decoder (the one its test suite uses): no extra dependency for one field
        decoded = ssl._ssl._test_decode_cert(str(cert))  # type: ignore[attr-defined]
    except (AttributeError, OSError, ssl.SSLError):
        return "localhost"
    names = decoded.get("subjectAltName", ())
    if any(kind == "IP Address" and value.strip() == host for kind, value in names):
        return None
    dns = [value for kind, value in names if kind == "DNS" and "*" not in value]
    return "localhost" if not dns or "localhost" in dns else dns[0]
