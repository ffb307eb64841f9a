"""Kind ``vertex_text`` (inference/vertex_text.py, HELM's ``VertexAITextClient``: MedLM, PaLM 2) and its fake
(devtools/fakes/vertex_text.py), with a token from Google ADC (devtools/fakes/google_oauth.py). The fake is
proven with the vertexai SDK's TextGenerationModel over REST, run from a venv of its own (google-cloud-aiplatform's
protobuf pin clashes with the product's; built on first use, tests/helm_venv.py). A HELM
``google/medlm-medium`` entry from upstream's file reaches the fake with the body the SDK builds for HELM's
call. Also here: HELM's ``VertexAIChatClient`` entries get HELM's safety settings (BLOCK_NONE for every
category) unless their preset is ``default``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest
import yaml

from medhelm import helm_env
from medhelm.deployments import DeploymentRegistry
from medhelm.devtools.fakes.gemini import FakeGemini
from medhelm.devtools.fakes.google_oauth import FakeGoogleOAuth
from medhelm.devtools.fakes.vertex_text import FakeVertexText
from medhelm.errors import ConfigError
from medhelm.inference import ClientPool, RetryPolicy
from medhelm.specs import GenerationRequest, Message

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.0, max_delay_s=0.0, jitter="none")
PROMPT = "Is aspirin an NSAID? yes or no"
# what vertexai's TextGenerationModel.predict sends for HELM's parameters (temperature 0, max_tokens 5,
# top_k_per_token 1, top_p 1, no stop sequences, one candidate): ours must send the same
MEDLM_PATH = "/v1/projects/hospital-proj/locations/us-central1/publishers/google/models/medlm-medium:predict"
MEDLM_BODY = {"instances": [{"content": PROMPT}],
              "parameters": {"maxDecodeSteps": 5, "temperature": 0.0, "topP": 1.0, "topK": 1, "candidateCount": 1}}


async def _generate(dep, request):
    pool = ClientPool(retry=FAST)
    try:
        return await pool.get(dep).generate(request), pool.stats[dep.name]
    finally:
        await pool.aclose()


def _prod_env(tmp_path, entries, base_url):
    (tmp_path / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": entries}))
    (tmp_path / "credentials.conf").write_text('googleProjectId: "hospital-proj"\ngoogleLocation: "us-central1"\n')
    return DeploymentRegistry.load(tmp_path)


MEDLM = {"name": "google/medlm-medium", "model_name": "google/medlm-medium", "tokenizer_name": "google/text-bison@001",
         "max_sequence_length": 6000, "max_sequence_and_generated_tokens_length": 7000,
         "client_spec": {"class_name": "helm.clients.vertexai_client.VertexAITextClient"}}


def test_medlm_entry_reaches_predict_with_an_adc_token(tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    with FakeGoogleOAuth(access_token="ya29.medlm") as oauth, \
            FakeVertexText(bearer="ya29.medlm", block_marker="BLOCKME") as fake:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(oauth.service_account_file(tmp_path / "sa.json")))
        monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", fake.base_url)
        dep = _prod_env(tmp_path, [MEDLM], fake.base_url).get("google/medlm-medium")
        assert dep.kind.value == "vertex_text" and dep.served_model_name == "medlm-medium"
        completion, stats = asyncio.run(_generate(dep, GenerationRequest((Message("user", PROMPT),), max_tokens=5)))
        assert completion.text in ("Yes", "No") and completion.usage.completion_tokens == 1
        seen = fake.requests[-1]
        assert seen["path"] == MEDLM_PATH
        assert seen["body"] == MEDLM_BODY
        blocked, _ = asyncio.run(_generate(dep, GenerationRequest((Message("user", "BLOCKME " + PROMPT),),
                                                                  max_tokens=5)))
        assert blocked.finish_reason == "content_filter" and blocked.text == ""
        fake.fail_next(2, "throttle")
        again, stats = asyncio.run(_generate(dep, GenerationRequest((Message("user", PROMPT),), max_tokens=5)))
        assert again.usage.attempts == 3 and stats.retries == 2
        assert len(oauth.issued) == 3  # one token per client (each _generate builds its own pool)


# google-cloud-aiplatform pins protobuf below the product's grpc stack's, so the SDK has a venv of its own
# (tests/helm_venv.py's recipe) and drives the fake from a child process; the fake runs here
SDK_PACKAGES = ("google-cloud-aiplatform==1.165.1",)
SDK_CALL = """
import json, sys
import vertexai
from google.oauth2 import credentials as user_credentials
from vertexai import language_models

user, endpoint, prompt = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
credentials = user_credentials.Credentials(None, refresh_token=user["refresh_token"], token_uri=user["token_uri"],
                                           client_id=user["client_id"], client_secret=user["client_secret"])
vertexai.init(project="hospital-proj", location="us-central1", credentials=credentials, api_endpoint=endpoint,
              api_transport="rest")
model = language_models.TextGenerationModel.from_pretrained("medlm-medium")
reply = model.predict(prompt, temperature=0.0, max_output_tokens=5, top_k=1, top_p=1, stop_sequences=[],
                      candidate_count=1)
print(json.dumps([candidate.text for candidate in reply.candidates]))
"""


@pytest.fixture(scope="session")
def vertexai_python():
    """The interpreter of the vertexai SDK's venv (built once under MEDHELM_ENGINES_DIR; skips when it cannot be)."""
    from tests.helm_venv import venv_python

    return venv_python("vertexai-sdk", SDK_PACKAGES)


def test_the_vertexai_sdk_accepts_the_fake(tmp_path, tls, vertexai_python):
    with FakeGoogleOAuth(access_token="ya29.sdk") as oauth, \
            FakeVertexText(bearer="ya29.sdk", certfile=tls["cert"], keyfile=tls["key"]) as fake:
        # gcloud's ADC file (a service account's would make google-api-core sign its own JWT for the API)
        adc = oauth.authorized_user_file(tmp_path / "adc.json")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["REQUESTS_CA_BUNDLE"] = tls["ca"]
        done = subprocess.run([str(vertexai_python), "-c", SDK_CALL, str(adc), f"127.0.0.1:{fake.port}", PROMPT],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        texts = json.loads(done.stdout.strip().splitlines()[-1])
        assert len(texts) == 1 and texts[0] in ("Yes", "No")
        assert oauth.issued == ["ya29.sdk"]
        seen = fake.requests[-1]
        assert seen["path"] == MEDLM_PATH
        assert seen["body"] == MEDLM_BODY


@pytest.mark.parametrize("preset,expected", [(None, True), ("block_none", True), ("default", False)])
def test_vertex_chat_entries_send_helms_safety_settings(tmp_path, monkeypatch, preset, expected):
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    entry = {"name": "google/gemini-1.5-pro-001", "model_name": "google/gemini-1.5-pro-001",
             "max_sequence_length": 1000000,
             "client_spec": {"class_name": "helm.clients.vertexai_client.VertexAIChatClient",
                             "args": {} if preset is None else {"safety_settings_preset": preset}}}
    with FakeGemini(platform="vertex", bearer="ya29.chat") as fake:
        monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", fake.base_url)
        (tmp_path / "token").write_text("ya29.chat")
        entry["options"] = {"access_token_file": str(tmp_path / "token")}
        dep = _prod_env(tmp_path, [entry], fake.base_url).get("google/gemini-1.5-pro-001")
        completion, _ = asyncio.run(_generate(dep, GenerationRequest((Message("user", PROMPT),), max_tokens=5)))
        assert completion.text in ("Yes", "No")
        body = fake.requests[-1]["body"]
        want = [{"category": c, "threshold": "BLOCK_NONE"} for c in helm_env.VERTEX_HARM_CATEGORIES]
        assert body.get("safetySettings") == (want if expected else None)
        assert body["contents"] == [{"role": "user", "parts": [{"text": PROMPT}]}]
        assert body["generationConfig"] == {"temperature": 0.0, "topP": 1.0, "topK": 1.0, "candidateCount": 1,
                                            "maxOutputTokens": 5}


def test_an_unknown_safety_preset_is_refused_naming_the_field(tmp_path, monkeypatch):
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    entry = {**MEDLM, "client_spec": {"class_name": MEDLM["client_spec"]["class_name"],
                                      "args": {"safety_settings_preset": "strict"}}}
    with pytest.raises(ConfigError) as caught:
        _prod_env(tmp_path, [entry], "http://127.0.0.1:1")
    assert "safety_settings_preset" in str(caught.value) and "model_deployments.yaml" in str(caught.value)


def test_a_vertex_entry_without_a_google_credential_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.delenv("HELM_CREDENTIALS", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    from medhelm.inference import make_client

    dep = _prod_env(tmp_path, [MEDLM], "http://127.0.0.1:1").get("google/medlm-medium")
    with pytest.raises(ConfigError, match="GOOGLE_APPLICATION_CREDENTIALS"):
        make_client(dep)
