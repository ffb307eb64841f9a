"""Local fakes of the cloud model APIs, strict as the real services, for tests and benchmarks: one module per
provider kind of ``backend_kinds.KINDS`` (``<kind>.py``, mirroring ``inference/<kind>.py``; its test
``tests/providers/test_<kind>.py`` drives it with the provider's official client), ``server.py`` (the server
and bookkeeping they share), ``sigv4.py`` (AWS's signature check), ``google_oauth.py`` (Google's token
endpoint), ``shc.py`` (Stanford Health Care's gateway routes).

    with FakeAnthropic(api_key="k") as srv:
        srv.base_url; srv.requests; srv.fail_next(2, "overloaded"); srv.kill(); srv.restart()

In ``medhelm.devtools``, not ``tests/``: bench/bench_native_clients.py measures our clients against them, and
a developer can point a deployment at one: ``python -m medhelm.devtools.fakes anthropic --port 8000``.
"""
