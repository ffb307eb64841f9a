"""What the native provider kinds (anthropic, gemini, bedrock, azure_openai) share: secrets from the
environment and the API-gateway options (``gateway.py``), one request/reply shape (``NativeClient``) and
one mapping of a provider's refusal to our retry semantics.

Failure semantics: a missing variable is a ``ConfigError`` naming the variable (never its value); a
provider's error reply becomes an ``InferenceError`` whose message names the deployment, the URL, the HTTP
status and the provider's error type/message passed through ``safe_server_message`` (withheld if it quotes
the prompt). Retryable: 408, 429, every 5xx (Anthropic's 529 ``overloaded_error`` among them) and the
provider throttling codes in ``THROTTLED`` whatever their status; the wait is at least the server's
``retry-after-ms`` (Azure, Anthropic) or ``Retry-After`` (seconds or an HTTP date).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from medhelm.errors import ConfigError, InferenceError
from medhelm.inference.gateway import env_secret, gateway_headers
from medhelm.inference.http import HttpReply, JsonTransport
from medhelm.inference.openai import retry_after, safe_server_message
from medhelm.scrub import register
from medhelm.specs import Completion, Deployment, GenerationRequest

# Error codes that mean "slow down" whatever HTTP status carries them (a gateway may turn them into 400/403).
THROTTLED = frozenset({"overloaded_error", "rate_limit_error", "RESOURCE_EXHAUSTED", "UNAVAILABLE",
                       "ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException",
                       "TooManyRequests", "429"})
_RETRYABLE_STATUS = frozenset({408, 429})
# the region when a deployment names none, as boto3 (and HELM's bedrock_utils) read it
AWS_REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")


def error_parts(data: Any) -> tuple[str, str]:
    """(error type or code, message) from the providers' error bodies:
    Anthropic ``{"type":"error","error":{"type","message"}}``, Google ``{"error":{"code","status","message"}}``,
    Bedrock ``{"message"}`` with the type in ``x-amzn-ErrorType``, OpenAI/Azure ``{"error":{"code","message"}}``."""
    if not isinstance(data, Mapping):
        return "", ""
    err = data.get("error")
    if isinstance(err, Mapping):
        kind = err.get("type") or err.get("status") or err.get("code") or ""
        return str(kind), str(err.get("message") or "")
    return str(data.get("__type") or data.get("code") or ""), str(data.get("message") or data.get("Message") or "")


def provider_error(where: str, reply: HttpReply, request: GenerationRequest) -> InferenceError:
    status = reply.status_code
    try:
        kind, message = error_parts(reply.json())
    except ValueError:
        kind, message = "", reply.text
    amz = reply.headers.get("x-amzn-errortype")
    if amz:
        kind = amz.split(":", 1)[0]
    kind = kind.rsplit("#", 1)[-1]  # "com.amazon...#ThrottlingException" -> "ThrottlingException"
    retryable = status in _RETRYABLE_STATUS or status >= 500 or kind in THROTTLED
    text = safe_server_message(message, request) if message else ""
    label = f"{kind}: {text}" if kind and text else kind or text
    err = InferenceError(f"{where}: HTTP {status}" + (f": {safe_server_message(label, request)}" if label else ""),
                         retryable=retryable, status=status, retry_after=retry_after(reply.headers))
    err.throttled = kind in THROTTLED  # the pacer halves for it whatever status carried it (inference/pacing/)
    return err


def malformed(where: str, reply: HttpReply) -> InferenceError:
    # A proxy cut the body short or answered with something else: worth another try.
    return InferenceError(f"{where}: malformed response body (HTTP {reply.status_code})", retryable=True,
                          status=reply.status_code)


def split_system(request: GenerationRequest) -> tuple[str, list[tuple[str, str]]]:
    """(the system messages joined, the other turns as (role, text)) — the native APIs take the system
    prompt apart from the conversation."""
    system = "\n\n".join(m.content for m in request.messages if m.role == "system")
    return system, [(m.role, m.content) for m in request.messages if m.role != "system"]


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class NativeClient:
    """The shape every native kind shares: one URL per deployment, a JSON body built from the request,
    per-request auth headers (a SigV4 signature, an Entra token), the provider's errors mapped once.
    A subclass sets ``_url`` and implements ``payload`` and ``parse``; it may override ``auth_headers``."""

    def __init__(self, deployment: Deployment, url: str, headers: Mapping[str, str],
                 connections: int | None = None) -> None:
        self._deployment, self._url = deployment, url
        self._transport = JsonTransport(deployment, {**gateway_headers(deployment), **headers},
                                        connections=connections)
        # set by ClientPool: every reply's headers go to the deployment's pacer (anthropic-ratelimit-* ...)
        self.rate_listener: Callable[[Mapping[str, str]], None] | None = None

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    @property
    def endpoint_url(self) -> str:
        """Where the requests go (a run's access record keeps it without credentials or query string)."""
        return self._url

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, data: Any, latency: float) -> Completion:
        raise NotImplementedError

    def decode(self, reply: HttpReply, request: GenerationRequest) -> Any:
        """A successful reply's body as the data ``parse`` reads (JSON; a streamed reply is read whole by its
        kind); ValueError for a body cut short or of another shape (retried as malformed)."""
        return reply.json()

    async def auth_headers(self, body: bytes) -> Mapping[str, str] | None:
        return None

    def on_refused(self, status: int) -> None:
        """A 401/403 came back (an expired token is dropped here)."""

    async def generate(self, request: GenerationRequest) -> Completion:
        body = json.dumps(self.payload(request), ensure_ascii=False).encode("utf-8")
        reply, latency = await self._transport.post_bytes(self._url, body, self._where(),
                                                          await self.auth_headers(body))
        if self.rate_listener is not None:
            self.rate_listener(reply.headers)
        if reply.status_code >= 400:
            if reply.status_code in (401, 403):
                self.on_refused(reply.status_code)
            raise provider_error(self._where(), reply, request)
        try:
            data = self.decode(reply, request)
        except ValueError:
            raise malformed(self._where(), reply) from None
        try:
            return self.parse(data, latency)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            raise malformed(self._where(), reply) from None

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _where(self) -> str:
        return f"deployment '{self._deployment.name}' ({self._url})"


class _Static:
    """A bearer token that does not change (``api_key_env``) or is re-read from a file when it changes."""

    def __init__(self, read: Callable[[], str]) -> None:
        self._read = read

    async def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._read()}"}

    def invalidate(self) -> None:
        pass


def bearer_source(deployment: Deployment) -> Any:
    """An OAuth access token for Google/Vertex (``.headers()``, ``.invalidate()``): ``options.access_token_file``
    (read again when it changes: a sidecar or ``gcloud auth print-access-token`` in a CronJob refreshes it),
    ``api_key_env``, else Application Default Credentials: the key file in ``options.service_account_file`` or
    ``GOOGLE_APPLICATION_CREDENTIALS``, exchanged for tokens by ``google_adc.GoogleToken``."""
    path = deployment.options.get("access_token_file")
    if path:
        state: dict[str, Any] = {"mtime": None, "token": ""}

        def from_file() -> str:
            try:
                mtime = os.stat(path).st_mtime_ns
                if mtime != state["mtime"]:
                    with open(path, encoding="utf-8") as f:
                        state["token"], state["mtime"] = f.read().strip(), mtime
                    register(state["token"], slot=f"token-file:{path}")  # scrubbed from every text
            except OSError as err:
                raise ConfigError(f"deployment '{deployment.name}': cannot read options.access_token_file "
                                  f"({err.strerror})", path=str(path)) from None
            return state["token"]

        from_file()  # a missing file fails at planning
        return _Static(from_file)
    if deployment.api_key_env:
        token = env_secret(deployment, deployment.api_key_env, "api_key_env")
        return _Static(lambda: token)
    from medhelm.inference.google_adc import VARIABLE, GoogleToken, key_file

    adc = key_file(deployment.options)
    if not adc:
        raise ConfigError(f"deployment '{deployment.name}': Vertex AI needs a Google credential: set "
                          f"{VARIABLE} (a service-account key file), options.service_account_file, "
                          "options.access_token_file or api_key_env (an access token)")
    return GoogleToken(deployment.name, adc)


def option(deployment: Deployment, key: str, default: str | None = None, env: str | tuple[str, ...] = ()) -> str:
    """A required string option, else the first environment fallback set (``env``: one name or several, in
    order); a ConfigError naming them when absent."""
    names = (env,) if isinstance(env, str) else env
    value = deployment.options.get(key) or next((os.environ[n] for n in names if os.environ.get(n)), None) or default
    if not value:
        extra = f" (or the environment variable {' or '.join(names)})" if names else ""
        raise ConfigError(f"deployment '{deployment.name}': options.{key}{extra} is required for kind "
                          f"'{deployment.kind.value}'")
    return str(value)
