"""Send one request through HELM's OWN client for each named deployment of HELM's packaged
model_deployments.yaml, at whatever endpoints the environment and credentials point to (a capture server),
and say per deployment whether HELM's client call returned. Run with the crfm-helm venv's python (no medhelm
import here): the differential test (tests/providers/test_helm_differential.py) compares what arrives with
what medhelm sends for the same entries.

Usage: python helm_requests.py <spec.json>   spec: {"credentials": {...}, "deployments": [names], "prompt": str,
"max_tokens": int, "capture": url, "extra_path": [dirs], "prod_env": dir (optional)}; prints one JSON line per deployment: {"name", "ok",
"error"}. ``extra_path``: folders appended to sys.path (SDKs HELM's extras pin that the venv lacks; appended, so
the venv's own packages win). The mistralai SDK has no setting for its server (HELM's MistralAIClient passes
none): its one server's address is pointed at the capture server, as DNS would. With ``vertex_token``, HELM's
``vertexai.init`` gets the capture server as its endpoint (REST, the same request as gRPC's in JSON) and that
token as its credentials. HELM's clients with an address built in (TogetherClient's INFERENCE_ENDPOINT,
OpenRouterClient's https://openrouter.ai/api/v1/) are pointed at the capture server the same way, their paths kept.
Between deployments it POSTs <capture>/__next__ {"name"} so the server files what follows under that name.
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.parse
import urllib.request


def main(spec_path: str) -> int:
    spec = json.loads(open(spec_path).read())
    sys.path.extend(spec.get("extra_path") or [])
    try:
        from mistralai import sdkconfiguration

        sdkconfiguration.SERVERS = {name: spec["capture"] for name in sdkconfiguration.SERVERS}
    except ImportError:
        pass
    if spec.get("vertex_token"):  # HELM's vertexai.init(project, location), sent to the capture server over REST
        import vertexai
        from google.oauth2.credentials import Credentials

        init = vertexai.init
        vertexai.init = lambda **kw: init(**kw, api_endpoint=spec["capture"], api_transport="rest",
                                          credentials=Credentials(token=spec["vertex_token"]))
    from helm.benchmark.config_registry import register_builtin_configs_from_helm_package
    from helm.clients.auto_client import AutoClient
    from helm.common.cache_backend_config import BlackHoleCacheBackendConfig
    from helm.common.request import Request
    from helm.benchmark.model_deployment_registry import get_model_deployment

    try:
        from helm.clients import together_client

        built_in = urllib.parse.urlsplit(together_client.TogetherClient.INFERENCE_ENDPOINT)
        together_client.TogetherClient.INFERENCE_ENDPOINT = spec["capture"] + built_in.path
    except Exception:  # noqa: BLE001 - without the together SDK HELM's Together clients fail as they would
        pass
    register_builtin_configs_from_helm_package()
    if spec.get("prod_env"):  # a prod_env folder's own model_deployments.yaml, as helm-run --local-path reads it
        from helm.benchmark.config_registry import register_configs_from_directory

        register_configs_from_directory(spec["prod_env"])
    auto = AutoClient(spec["credentials"], tempfile.mkdtemp(), BlackHoleCacheBackendConfig())
    auto._auto_tokenizer._get_tokenizer = lambda *a, **k: None  # no tokenizer downloads: requests only
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for name in spec["deployments"]:
        opener.open(urllib.request.Request(spec["capture"] + "/__next__", data=json.dumps({"name": name}).encode(),
                                           method="POST"), timeout=10).read()
        ok, error = False, ""
        try:
            deployment = get_model_deployment(name)
            client = auto._get_client(name)
            if type(client).__name__ == "OpenRouterClient":
                built_in = urllib.parse.urlsplit(str(client.client.base_url))
                client.client = client.client.with_options(base_url=spec["capture"] + built_in.path)
            result = client.make_request(Request(model=deployment.model_name, model_deployment=name,
                                                 prompt=spec["prompt"], max_tokens=spec["max_tokens"],
                                                 temperature=0.0, stop_sequences=[]))
            ok, error = bool(result.success), str(result.error or "")[:300]
        except Exception as err:  # noqa: BLE001 - a client that cannot be built or raises: said, not fatal
            error = f"{type(err).__name__}: {err}"[:300]
        print(json.dumps({"name": name, "ok": ok, "error": error}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
