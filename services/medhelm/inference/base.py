"""The inference contract: one async ``generate`` per deployment kind.

Clients raise ``InferenceError(retryable=...)``; retries, caching and accounting are wrappers
(``retry.py``, ``cache.py``) composed by ``ClientPool`` so every kind gets them identically, and
candidate models and judges go through the same pool.
"""

from __future__ import annotations

from typing import Protocol

from medhelm.specs import Completion, Deployment, GenerationRequest

# Tokens a chat template adds around the messages (role markers; SmolLM2's template even adds a default
# system message). Prompt budgets computed from a context length leave this much room.
CHAT_TEMPLATE_TOKENS = 32


class ModelClient(Protocol):
    @property
    def deployment(self) -> Deployment: ...

    async def generate(self, request: GenerationRequest) -> Completion: ...

    async def aclose(self) -> None: ...


class InferenceObserver(Protocol):
    """Hook for telemetry (Prometheus in the services). Must never receive prompt/completion text."""

    def on_request(self, deployment: str, *, cached: bool, attempts: int, latency_s: float,
                   prompt_tokens: int | None, completion_tokens: int | None, error: str | None) -> None: ...


class NullObserver:
    def on_request(self, deployment: str, **_: object) -> None:
        return None
