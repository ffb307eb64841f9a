"""gRPC doors onto the pipeline's parts: ScenarioService, JuryService, MetricsService.

Servicers hold no evaluation logic: they decode spec JSON, call the same benchmark / metric / pipeline
functions the CLI uses, and encode the results. ``server.py`` adds health, reflection, Prometheus,
TLS and graceful shutdown; ``remote.py`` holds the client-side adapters a ``medhelm job`` plugs in.
"""
