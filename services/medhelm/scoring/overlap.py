"""(owned by a capability; see docs/architecture.md)"""

FACTORIES: dict = {}
