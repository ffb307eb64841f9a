"""The evaluation report a governance committee signs: one self-contained HTML page or tagged PDF built from a
release's aggregates in the results store (``content``: what is read; ``render``: the page and its plots;
``pdf``: the same page as a PDF; ``seal``: the manifest of input digests, the report's own digest and its
signature line, and their verification; ``keys``: the HMAC secret or public-key pair that signs)."""
