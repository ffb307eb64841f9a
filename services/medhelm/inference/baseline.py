"""The client of deployment kind ``baseline``: answers without a model (``medhelm.baselines``).

It answers from what the pipeline gives it: the instance (its options, its input) and, for the majority
baseline, the label counted at planning. ``generate`` alone (a request, no instance) serves ``empty`` and
``copy-input`` (the request's last user message); the others need the instance and refuse without it.

Failure semantics: nothing can fail at run time but a misuse (a strategy that needs the instance called
without it), a non-retryable InferenceError; the usage it reports is zero tokens and zero seconds, so a
baseline costs nothing.
"""

from __future__ import annotations

from medhelm import baselines
from medhelm.errors import ConfigError, InferenceError
from medhelm.specs import Completion, Deployment, GenerationRequest, Instance, Usage


class BaselineClient:
    def __init__(self, deployment: Deployment, *, connections: int | None = None) -> None:  # no connections
        self._deployment = deployment
        self.strategy = baselines.strategy_of(deployment.name)

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    def answer(self, instance: Instance, request: GenerationRequest, *, majority: str | None = None) -> Completion:
        """The baseline's completion for one instance (seeded by the request's seed)."""
        try:
            text = baselines.answer(self.strategy, instance, seed=request.seed or 0, majority=majority)
        except ConfigError as err:
            raise InferenceError(str(err), retryable=False) from None
        return _completion(text)

    async def generate(self, request: GenerationRequest) -> Completion:
        if self.strategy == baselines.EMPTY:
            return _completion("")
        if self.strategy == baselines.COPY_INPUT:
            users = [m.content for m in request.messages if m.role == "user"]
            return _completion(users[-1] if users else "")
        raise InferenceError(f"deployment '{self._deployment.name}' answers from the instance, not a bare request "
                             f"(it cannot be a judge)", retryable=False)

    async def aclose(self) -> None:
        return None


def _completion(text: str) -> Completion:
    return Completion(text=text, finish_reason="stop", usage=Usage(prompt_tokens=0, completion_tokens=0, latency_s=0.0))
