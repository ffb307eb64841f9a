"""What every HTTP provider client shares, in one module: no provider imports another provider's helpers.

Owns: the one mapping of an HTTP error reply to a ``Refusal``
(``refusal``: the verdict from ``outcome.verdict_for``, the providers' "slow down" codes in ``THROTTLED``, their
"quota spent" codes in ``SPENT`` and a server's ``x-should-retry: false`` (not retried), the server's wait from
``retry-after-ms`` or ``Retry-After``), of a body that does not parse (``malformed``), and the
request and reply helpers the providers have in common: the provider key's headers (``key_headers``), the chat as
one prompt text, the system prompt apart, the answered model's name, a server's error text made safe, a leading
``<think>`` block cut, a required option with its environment fallbacks.

Failure semantics: an error reply becomes a ``Refusal`` whose message names the deployment, the URL, the HTTP
status and the server's own text passed through ``safe_server_message`` (one line, shortened, no links or encoded
runs, withheld when it quotes the prompt: PHI); a body that does not parse is a transient ``Refusal`` (a proxy cut
it short); a missing key or option is a ``ConfigError`` naming the variable or option, never its value.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from medhelm import credentials
from medhelm.errors import ConfigError
from medhelm.inference.gateway import gateway_headers
from medhelm.inference.http import HttpReply
from medhelm.inference.outcome import Outcome, Refusal, Verdict, verdict_for
from medhelm.inference.pacing import retry_after_seconds
from medhelm.scrub import scrub
from medhelm.specs import Deployment, GenerationRequest

# Error codes that mean "slow down" whatever HTTP status carries them (a gateway may turn them into 400/403): the
# native kinds' default (``NativeClient.throttled``); a provider with codes of its own adds them in its module.
THROTTLED = frozenset({"overloaded_error", "rate_limit_error", "RESOURCE_EXHAUSTED", "UNAVAILABLE",
                       "ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException",
                       "TooManyRequests", "429"})
# Error codes that mean the account's quota or credit is spent (OpenAI's and Azure's 429 "insufficient_quota"): no
# retry helps, and a rate limit is waited out for minutes (retry.py), so such a refusal is final. A server that says
# so itself (``x-should-retry: false``, which the OpenAI and Anthropic SDKs obey) is believed the same way.
SPENT = frozenset({"insufficient_quota"})
_SERVER_MESSAGE_CHARS = 300


def refusal(where: str, reply: HttpReply, text: str, *, code: str = "", throttled: frozenset[str] = THROTTLED,
            retry: bool = False, content_filter: bool = False) -> Refusal:
    """An error reply (status >= 400) as the provider's ``Refusal``: ``text`` the server's message, already safe;
    ``code`` its error type, rate-limited when in ``throttled`` (the provider's "slow down" codes); ``retry``: one
    more try can succeed."""
    status = reply.status_code
    verdict = verdict_for(status, throttled=code in throttled, retry=retry)
    if verdict is not Verdict.FATAL and (_spent(reply, code) or reply.headers.get("x-should-retry") == "false"):
        verdict = Verdict.FATAL
    outcome = Outcome(verdict, retry_after(reply.headers), reply.headers)
    return Refusal(f"{where}: HTTP {status}" + (f": {text}" if text else ""), outcome, status=status,
                   content_filter=content_filter)


def _spent(reply: HttpReply, code: str) -> bool:
    """The reply's error code (``code``, else the body's ``error.type`` / ``error.code``) says a quota is spent."""
    if code in SPENT:
        return True
    try:
        data = reply.json()
    except ValueError:
        return False
    err = data.get("error") if isinstance(data, Mapping) else None
    return isinstance(err, Mapping) and bool({str(err.get("type")), str(err.get("code"))} & SPENT)


def malformed(where: str, reply: HttpReply, what: str = "response body") -> Refusal:
    """A reply whose body is not the answer's shape: a proxy cut it short or answered itself; worth another try."""
    return Refusal(f"{where}: malformed {what} (HTTP {reply.status_code})",
                   Outcome(Verdict.TRANSIENT, None, reply.headers), status=reply.status_code)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait: ``retry-after-ms`` (Azure, Anthropic) first, then ``Retry-After`` (seconds or an
    HTTP date); the pacer's reader (``pacing.retry_after_seconds``)."""
    return retry_after_seconds(headers)


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


def key_headers(deployment: Deployment) -> dict[str, str]:
    """The gateway's headers and the provider key as the OpenAI-shaped kinds send it (``Authorization: Bearer``,
    ``options.auth_header``, or each of ``options.key_headers``): from ``api_key_env`` (or the file
    ``$<name>_FILE`` names), else credentials.conf for a HELM entry."""
    headers = gateway_headers(deployment)
    key = credentials.deployment_secret(deployment.options, "api_key", deployment=deployment.name)
    if deployment.api_key_env:
        from medhelm.files import env_secret

        key = env_secret(deployment.api_key_env)  # or the file $<name>_FILE names (the chart mounts keys so)
        if not key:
            raise ConfigError(f"environment variable {deployment.api_key_env} (or {deployment.api_key_env}_FILE) is not set "
                              f"(api_key_env of deployment '{deployment.name}')")
    if key:
        auth_header = deployment.options.get("auth_header")
        if deployment.options.get("key_headers"):  # the key in each header named (HELM's Azure SDK clients)
            for name in deployment.options["key_headers"]:
                headers[str(name)] = f"Bearer {key}" if str(name).lower() == "authorization" else key
        elif auth_header:
            headers[str(auth_header)] = key
        else:
            headers["Authorization"] = f"Bearer {key}"
    return headers


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


def joined_prompt(request: GenerationRequest) -> str:
    """The chat as one prompt text (HELM's ``request.prompt``): the legacy completions route, KServe v2's
    text input and Stanford Health Care's text routes take text, not turns."""
    return "\n\n".join(m.content for m in request.messages)


def split_system(request: GenerationRequest) -> tuple[str, list[tuple[str, str]]]:
    """(the system messages joined, the other turns as (role, text)) — the native APIs take the system
    prompt apart from the conversation."""
    system = "\n\n".join(m.content for m in request.messages if m.role == "system")
    return system, [(m.role, m.content) for m in request.messages if m.role != "system"]


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def answered_model(*names: object) -> str | None:
    """The model (and version) a server says answered, as one short line of text (None when it says nothing)."""
    parts = [part for name in names if isinstance(name, str) and (part := _one_name(name))]
    return " version ".join(parts) or None


@functools.lru_cache(maxsize=64)  # a server names the same few models over and over
def _one_name(name: str) -> str:
    return " ".join(name.split())[:120]


_THINK = re.compile(r"\A\s*<think>.*?</think>\s*", re.DOTALL)


def strip_reasoning(text: str) -> str:
    """Drop a reasoning model's leading ``<think>...</think>`` block and keep the answer.

    An unclosed block means the model ran out of tokens while thinking: there is no answer (""), and the
    caller keeps the finish_reason. Templates that open the block in the prompt leave only ``</think>``."""
    stripped = text.lstrip()
    if stripped.startswith("<think>"):
        match = _THINK.match(stripped)
        return stripped[match.end():] if match else ""
    if "</think>" in text and "<think>" not in text:
        return text.split("</think>", 1)[1].lstrip()
    return text


def server_message(reply: HttpReply, request: GenerationRequest) -> str:
    """An OpenAI-shaped server's own error text (``error.message``, ``message``, ``detail``), made safe."""
    try:
        data = reply.json()
    except ValueError:
        message = reply.text
    else:
        message = _find_message(data)
    return safe_server_message(message, request)


def safe_server_message(message: object, request: GenerationRequest) -> str:
    """A server's error text made fit for an error record: one line, shortened, without links or encoded
    runs, and withheld if it quotes the prompt (PHI). Every client kind passes its server's text here."""
    # secrets out before the cut (a key cut in half would no longer be found), links and blobs after
    message = " ".join(scrub(str(message)).split())[:_SERVER_MESSAGE_CHARS]
    if _quotes_prompt(message, request):
        return "[server message withheld: it quotes the prompt]"
    return _defanged(message)


_LINK = re.compile(r"(?i)(?:[a-z][a-z0-9+.\-]*://|www\.)\S+|!?\[[^\]]*\]\([^)]*\)?|<[^>]*>")
_BLOB = re.compile(r"[A-Za-z0-9+/=_%\-]{32,}")


def _defanged(message: str) -> str:
    """A server's error text without links, markup or long encoded runs: a hostile endpoint can put the
    prompt in base64 or a URL, which the literal-quote check above cannot see; none of it is kept."""
    return _BLOB.sub("[…]", _LINK.sub("[…]", message))


def _find_message(data: Any) -> str:
    if isinstance(data, Mapping):
        err = data.get("error")
        if isinstance(err, Mapping):
            return str(err.get("message") or err)
        for key in ("error", "message", "detail"):
            if data.get(key):
                return str(data[key])
    return json.dumps(data)[:_SERVER_MESSAGE_CHARS]


def _quotes_prompt(message: str, request: GenerationRequest, window: int = 24) -> bool:
    for m in request.messages:
        text = " ".join(m.content.split())
        for i in range(0, max(len(text) - window, 0) + 1, window // 2):
            chunk = text[i:i + window]
            if len(chunk) >= min(window, 12) and chunk in message:
                return True
    return False
