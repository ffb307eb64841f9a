"""The evaluation report a governance committee signs: one self-contained HTML file built from a release's
aggregates in the results store (``content``: what is read; ``render``: the page and its plots; ``seal``:
the manifest of input digests, the report's own digest and its signature, and their verification)."""
