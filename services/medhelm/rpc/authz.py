"""Caller authorization for the gRPC services: only allowed callers reach the MedHELM methods.

Every ``/medhelm.v1.*`` method carries or returns patient text (instances, prompts, answers, records)
or reads the results on the server, so every one is guarded; health checks and reflection stay open
(probes and tooling, no data). A caller is allowed when it presents either

* a bearer token (``authorization: Bearer <token>`` metadata) whose SHA-256 is in the caller-token
  file (``--caller-tokens``: lines ``<caller name> <token>``; compared in constant time), or
* over mutual TLS, a client certificate carrying one ``--allow-client TYPE:VALUE`` identity in exactly that
  field: ``uri:`` a URI SAN (e.g. a SPIFFE id), ``dns:`` a DNS SAN, ``email:`` an e-mail SAN, ``cn:`` the
  subject CN. A value never matches in another field (``dns:x`` is not satisfied by a CN or URI ``x``, which
  another team's certificate from the same CA could carry). The chain is already checked by TLS against
  ``--tls-client-ca``; gRPC reports each SAN type apart (``peer_uri``, ``peer_dns``, ``peer_email``).

Failure semantics: no credentials at all -> ``UNAUTHENTICATED``; credentials that are not allowed ->
``PERMISSION_DENIED``; both before the servicer runs, so no data is read or sent. Each refusal counts
in ``medhelm_rpc_denied_total{service,method,code}`` and logs one line naming the method and the
caller's identity (never a token, never request content).
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import grpc
from prometheus_client import CollectorRegistry, Counter

from medhelm import files
from medhelm.errors import ConfigError, escape
from medhelm.scrub import register

log = logging.getLogger("medhelm.rpc")

GUARDED_PREFIX = "/medhelm.v1."
TOKEN_HEADER = "authorization"


# --allow-client TYPE -> the gRPC auth-context property holding exactly that field of the client certificate
IDENTITY_FIELDS = {"uri": "peer_uri", "dns": "peer_dns", "email": "peer_email", "cn": "x509_common_name"}


def parse_identity(text: str) -> tuple[str, str]:
    """``TYPE:VALUE`` (``uri:spiffe://...``, ``dns:job.ns.svc``, ``email:...``, ``cn:...``) as (type, value)."""
    kind, sep, value = text.strip().partition(":")
    if not sep or kind.lower() not in IDENTITY_FIELDS or not value:
        raise ConfigError(f"--allow-client {text.strip()[:80]!r}: give the certificate field it must match, as "
                          "uri:VALUE, dns:VALUE, email:VALUE or cn:VALUE", field="--allow-client")
    return kind.lower(), value


@dataclass(frozen=True)
class CallerPolicy:
    """Who may call: mTLS client identities ((field, value) pairs) and (caller name, SHA-256 of token) pairs."""

    identities: frozenset[tuple[str, str]] = frozenset()
    tokens: tuple[tuple[str, bytes], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.identities and not self.tokens

    @classmethod
    def build(cls, identities: Iterable[str] = (), token_file: Path | None = None) -> CallerPolicy:
        return cls(frozenset(parse_identity(i) for i in identities if i.strip()),
                   read_token_file(token_file) if token_file else ())

    def caller_for_token(self, token: str) -> str | None:
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        found = None
        for name, expected in self.tokens:  # no early exit: constant time in the number of tokens
            if hmac.compare_digest(digest, expected):
                found = name
        return found


def read_token_file(path: Path) -> tuple[tuple[str, bytes], ...]:
    """``<caller name> <token>`` per line (``#`` comments); only the tokens' SHA-256 is kept."""
    text = files.read_text(path, missing="caller-token file not found", what="caller-token file")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[1]) < 16:
            raise ConfigError("expected '<caller name> <token>' with a token of at least 16 characters",
                              path=path, line=n)  # the line itself is not repeated: it holds a secret
        out.append((parts[0], hashlib.sha256(parts[1].encode("utf-8")).digest()))
        register(parts[1])  # held: scrubbed from every text this process emits
    if not out:
        raise ConfigError("no caller tokens in the file", path=path)
    return tuple(out)


def read_token(path: Path) -> str:
    """A client's own token (the whole file, stripped): ``medhelm job --service-token-file``."""
    token = files.read_text(path, missing="service token file not found", what="service token file").strip()
    if not token:
        raise ConfigError("the service token file is empty", path=path)
    register(token, slot=f"service-token:{path}")
    return token


def certificate_identities(auth_context: Mapping[str, Sequence[bytes]]) -> list[tuple[str, str]]:
    """The (field, value) identities a verified client certificate carries: subject CN, URI/DNS/e-mail SANs."""
    return [(kind, v.decode("utf-8", "replace")) for kind, key in IDENTITY_FIELDS.items()
            for v in auth_context.get(key, ())]


class CallerAuthorization(grpc.aio.ServerInterceptor):
    """The server side: wraps every guarded method's handler with the check above."""

    def __init__(self, policy: CallerPolicy, service: str, registry: CollectorRegistry) -> None:
        self.policy, self.service = policy, service
        self.denied = Counter("medhelm_rpc_denied", "calls refused by caller authorization",
                              ["service", "method", "code"], registry=registry)

    async def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(GUARDED_PREFIX):
            return handler
        metadata = {k.lower(): v for k, v in (details.invocation_metadata or ())}
        method = details.method.rsplit("/", 1)[-1]

        async def check(context: grpc.aio.ServicerContext) -> None:
            code, why, who = self._decide(metadata, context)
            if code is None:
                return
            self.denied.labels(self.service, method, code.name).inc()
            log.warning("%s.%s refused (%s) for %s", self.service, method, code.name, who)
            await context.abort(code, why)

        return _guarded(handler, check)

    def _decide(self, metadata: Mapping[str, Any], context: grpc.aio.ServicerContext
                ) -> tuple[grpc.StatusCode | None, str, str]:
        presented = False
        header = metadata.get(TOKEN_HEADER)
        if isinstance(header, str) and header:
            presented = True
            scheme, _, token = header.partition(" ")
            if scheme.lower() == "bearer" and token and self.policy.caller_for_token(token.strip()):
                return None, "", ""
        identities = certificate_identities(context.auth_context() or {})
        if identities:
            presented = True
            if any(i in self.policy.identities for i in identities):
                return None, "", ""
        if not presented:
            return (grpc.StatusCode.UNAUTHENTICATED,
                    "this service needs caller credentials: a bearer token or a client certificate", "anonymous")
        first = next((v for k, v in identities if k == "cn"), identities[0][1]) if identities else ""
        who = f"certificate {escape(first)}" if identities else "an unknown bearer token"
        return grpc.StatusCode.PERMISSION_DENIED, "this caller is not allowed on this service", who


def _guarded(handler: grpc.RpcMethodHandler, check: Callable[[Any], Any]) -> grpc.RpcMethodHandler:
    """The same handler, with ``check(context)`` awaited before the servicer's code runs."""
    kinds = (("unary_unary", grpc.unary_unary_rpc_method_handler), ("unary_stream", grpc.unary_stream_rpc_method_handler),
             ("stream_unary", grpc.stream_unary_rpc_method_handler),
             ("stream_stream", grpc.stream_stream_rpc_method_handler))
    for attr, make in kinds:
        inner = getattr(handler, attr)
        if inner is None:
            continue
        if inspect.isasyncgenfunction(inner):
            async def behaviour(request: Any, context: Any, _inner: Any = inner) -> Any:
                await check(context)
                async for item in _inner(request, context):
                    yield item
        else:
            async def behaviour(request: Any, context: Any, _inner: Any = inner) -> Any:  # type: ignore[misc]
                await check(context)
                result = _inner(request, context)
                return await result if inspect.isawaitable(result) else result
        return make(behaviour, request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)
    return handler


# --- the client side: a bearer token on every call of a channel -------------------------------------

class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


def _with_token(details: Any, token: str) -> Any:
    metadata = [*(details.metadata or ()), (TOKEN_HEADER, f"Bearer {token}")]
    if isinstance(details, grpc.aio.ClientCallDetails):
        return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                          details.wait_for_ready)
    return _Details(details.method, details.timeout, metadata, details.credentials,
                    getattr(details, "wait_for_ready", None), getattr(details, "compression", None))


class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Sync channels: ``grpc.intercept_channel(channel, BearerToken(token))``."""

    def __init__(self, token: str) -> None:
        self._token = token

    def intercept_unary_unary(self, continuation, details, request):  # noqa: ANN001, ANN201
        return continuation(_with_token(details, self._token), request)

    def intercept_unary_stream(self, continuation, details, request):  # noqa: ANN001, ANN201
        return continuation(_with_token(details, self._token), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):  # noqa: ANN001, ANN201
        return continuation(_with_token(details, self._token), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):  # noqa: ANN001, ANN201
        return continuation(_with_token(details, self._token), request_iterator)


def aio_bearer_interceptors(token: str) -> list[grpc.aio.ClientInterceptor]:
    """Async channels: ``grpc.aio.insecure_channel(..., interceptors=aio_bearer_interceptors(token))``."""

    class UU(grpc.aio.UnaryUnaryClientInterceptor):
        async def intercept_unary_unary(self, continuation, details, request):  # noqa: ANN001, ANN201
            return await continuation(_with_token(details, token), request)

    class US(grpc.aio.UnaryStreamClientInterceptor):
        async def intercept_unary_stream(self, continuation, details, request):  # noqa: ANN001, ANN201
            return await continuation(_with_token(details, token), request)

    class SU(grpc.aio.StreamUnaryClientInterceptor):
        async def intercept_stream_unary(self, continuation, details, request_iterator):  # noqa: ANN001, ANN201
            return await continuation(_with_token(details, token), request_iterator)

    class SS(grpc.aio.StreamStreamClientInterceptor):
        async def intercept_stream_stream(self, continuation, details, request_iterator):  # noqa: ANN001, ANN201
            return await continuation(_with_token(details, token), request_iterator)

    return [UU(), US(), SU(), SS()]
