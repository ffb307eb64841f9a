"""One fake per provider (``<provider>.py``), each built from the provider's published API reference and proven
by driving it with the provider's official client (tests/providers/test_<provider>.py). The shared server and
the older fakes are in ``devtools/fake_providers.py``."""
