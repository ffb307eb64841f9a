"""The inference contract: one async ``generate`` per deployment kind.

Clients raise ``InferenceError(retryable=...)``; retries, caching and accounting are wrappers
(``retry.py``, ``cache.py``) composed by ``ClientPool`` so every kind gets them identically, and
candidate models and judges go through the same pool.
"""

from __future__ import annotations

from typing import Protocol

from medhelm.specs import Completion, Deployment, GenerationRequest
from medhelm.telemetry import NULL_CLIENT_METRICS, ClientMetrics

# Tokens a chat template adds around the messages (role markers; SmolLM2's template even adds a default
# system message). Prompt budgets computed from a context length leave this much room.
CHAT_TEMPLATE_TOKENS = 32


class ModelClient(Protocol):
    @property
    def deployment(self) -> Deployment: ...

    async def generate(self, request: GenerationRequest) -> Completion: ...

    async def aclose(self) -> None: ...


class InferenceObserver(Protocol):
    """Hook for telemetry (``medhelm.telemetry.Telemetry``): bound once per (deployment, role); the bound
    handle gets numbers and error codes per attempt and request, never prompt/completion text."""

    def bind_client(self, deployment: Deployment, role: str) -> ClientMetrics: ...


class NullObserver:
    def bind_client(self, deployment: Deployment, role: str) -> ClientMetrics:
        return NULL_CLIENT_METRICS
