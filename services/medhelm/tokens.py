"""Counting tokens without a tokenizer: the one estimate every prompt budget falls back on (benchmarks'
prompts, the jury's judge prompts, the planner's cost estimate). Pure arithmetic; it cannot fail."""

from __future__ import annotations


def approx_tokens(text: str) -> int:
    """A tokenizer-free, deliberately generous estimate (≈3 characters per token).

    English prose is ~4 characters per token, but clinical text (abbreviations, numbers, units)
    tokenizes denser; over-estimating only truncates a little early, under-estimating overflows."""
    return (len(text) + 2) // 3
