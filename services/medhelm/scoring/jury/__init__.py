"""The LLM jury (see docs/jury.md)."""

FACTORIES: dict = {}
