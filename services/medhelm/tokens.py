"""Counting tokens without a tokenizer: the one estimate every prompt budget falls back on (benchmarks'
prompts, the jury's judge prompts, the planner's cost estimate). Pure arithmetic; it cannot fail."""

from __future__ import annotations


def approx_tokens(text: str) -> int:
    """A tokenizer-free, deliberately generous estimate (≈3 characters per token).

    English prose is ~4 characters per token, but clinical text (abbreviations, numbers, units)
    tokenizes denser; over-estimating only truncates a little early, under-estimating overflows."""
    return (len(text) + 2) // 3


def split_reasoning(completion_tokens: int | None, answer: str) -> int | None:
    """Of ``completion_tokens`` (every generated token, thinking included), those spent thinking — an
    estimate, for providers that count one output total (Anthropic, Bedrock Converse) or a server that
    splits the text but not the count (vLLM's reasoning parser). The answer's share is its text at ≈4
    characters per token (the usual English rate; neutral here, unlike ``approx_tokens``'s generous 3), the
    rest is thinking. Not a proportional split of the two texts: Claude 4 returns a summary of its thinking
    and redacted thinking returns none, while ``output_tokens`` bills the whole. None when the total is
    unknown."""
    if completion_tokens is None or completion_tokens < 0:
        return None
    answer_tokens = (len(answer.strip()) + 3) // 4
    return max(completion_tokens - answer_tokens, 0)
