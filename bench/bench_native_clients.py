"""Our own HTTP transport vs each provider's official SDK, for the native kinds (issue 28): start-up (CPU
time of the import in a fresh interpreter), client CPU per request against the local fake of the API (the fake runs in
another process, so only the client's CPU is counted) and dependency weight (installed bytes the SDK adds
beyond medhelm's base install).

    .venv/bin/python bench/bench_native_clients.py [--requests 300] [--repeats 5]

Prints a markdown table (docs/benchmarks.md, "Native provider clients"). The SDKs come from the ``test``
extra; a provider whose SDK is missing is reported as such.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata as md
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

KEYS = {"ANTHROPIC_TEST_KEY": "sk-ant-test", "GEMINI_TEST_KEY": "AIza-test", "AZURE_TEST_KEY": "azure-key",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
PROVIDERS = {  # kind -> (our module, the SDK's import, the SDK's distributions)
    "anthropic": ("medhelm.inference.anthropic", "anthropic", ["anthropic"]),
    "gemini": ("medhelm.inference.gemini", "google.genai", ["google-genai"]),
    "bedrock": ("medhelm.inference.bedrock", "boto3", ["boto3"]),
    "azure_openai": ("medhelm.inference.azure_openai", "openai, azure.identity", ["openai", "azure-identity"]),
}


def import_seconds(module: str, repeats: int) -> float:
    """Median CPU time (user + system, so a loaded machine does not inflate it) of ``python -c 'import
    <module>'`` minus the bare interpreter's."""
    def run(code: str) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime

    bare = statistics.median(run("pass") for _ in range(repeats))
    return statistics.median(run(f"import {module}") for _ in range(repeats)) - bare


def _closure(names: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = re.split(r"[\s;<>=!~\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(req)
    return seen


def installed_bytes(dists: set[str]) -> int:
    total = 0
    for name in dists:
        dist = md.distribution(name)
        for f in dist.files or []:
            try:
                total += os.path.getsize(dist.locate_file(f))
            except OSError:
                pass
    return total


def sdk_weight(dists: list[str]) -> tuple[int, int]:
    """(bytes, distributions) the SDK adds beyond medhelm's base closure."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    base = _closure(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
    extra = _closure(dists) - base
    return installed_bytes(extra), len(extra)


def start_fake(kind: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "medhelm.devtools.fakes", kind], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, **KEYS})
    line = proc.stdout.readline()
    return proc, line.rsplit(" ", 1)[-1].strip()


def cpu_ms_ours(kind: str, url: str, n: int) -> float:
    from medhelm.inference import make_client
    from medhelm.specs import Deployment, GenerationRequest, Message

    options = {"region": "us-east-1"} if kind == "bedrock" else {}
    key = {"anthropic": "ANTHROPIC_TEST_KEY", "gemini": "GEMINI_TEST_KEY", "azure_openai": "AZURE_TEST_KEY"}.get(kind)
    dep = Deployment(name=f"bench/{kind}", model_name="m", kind=kind, base_url=url, api_key_env=key,
                     served_model_name="model-x", options=options)
    request = GenerationRequest(messages=(Message("user", "Is this a bench? yes or no"),), max_tokens=8)

    async def run() -> float:
        client = make_client(dep)
        await client.generate(request)  # connection and first-use costs out of the measurement
        before = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(n):
            await client.generate(request)
        after = resource.getrusage(resource.RUSAGE_SELF)
        await client.aclose()
        return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000 / n

    return asyncio.run(run())


def sdk_call(kind: str, url: str):
    """A zero-argument callable making one request with the official SDK (sync clients, no retries)."""
    if kind == "anthropic":
        import anthropic

        c = anthropic.Anthropic(api_key=KEYS["ANTHROPIC_TEST_KEY"], base_url=url, max_retries=0)
        return lambda: c.messages.create(model="model-x", max_tokens=8,
                                         messages=[{"role": "user", "content": "Is this a bench? yes or no"}])
    if kind == "gemini":
        from google import genai
        from google.genai import types

        c = genai.Client(api_key=KEYS["GEMINI_TEST_KEY"], http_options=types.HttpOptions(base_url=url))
        cfg = types.GenerateContentConfig(max_output_tokens=8, temperature=0)
        return lambda: c.models.generate_content(model="model-x", contents="Is this a bench? yes or no", config=cfg)
    if kind == "bedrock":
        import boto3

        c = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=url,
                         aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"], aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])
        return lambda: c.converse(modelId="model-x", messages=[{"role": "user", "content": [{"text": "yes or no"}]}],
                                  inferenceConfig={"maxTokens": 8})
    import openai

    c = openai.AzureOpenAI(azure_endpoint=url, api_key=KEYS["AZURE_TEST_KEY"], api_version="2024-10-21", max_retries=0)
    return lambda: c.chat.completions.create(model="model-x", max_tokens=8,
                                             messages=[{"role": "user", "content": "Is this a bench? yes or no"}])


def cpu_ms_sdk(kind: str, url: str, n: int) -> float:
    call = sdk_call(kind, url)
    call()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(n):
        call()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000 / n


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.update(KEYS)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {args.requests} requests, "
          f"median of {args.repeats} imports\n")
    # every run already imports the OpenAI-compatible client (and with it medhelm.inference): what a native
    # kind adds on top of that is its start-up cost
    openai_ms = import_seconds("medhelm.inference.openai", args.repeats) * 1000
    print(f"(import medhelm.inference.openai: {openai_ms:.0f} ms CPU; 'ours' is what the kind's module adds)\n")
    print("| kind | import ours (ms CPU) | import SDK (ms CPU) | CPU/request ours (ms) | CPU/request SDK (ms) | SDK adds |")
    print("|---|---|---|---|---|---|")
    for kind, (ours, sdk_import, dists) in PROVIDERS.items():
        proc, url = start_fake(kind)
        try:
            ours_import = max(import_seconds(ours, args.repeats) * 1000 - openai_ms, 0.0)
            ours_cpu = cpu_ms_ours(kind, url, args.requests)
            try:
                sdk_import_ms = import_seconds(sdk_import, args.repeats) * 1000
                sdk_cpu = f"{cpu_ms_sdk(kind, url, args.requests):.3f}"
                size, count = sdk_weight(dists)
                weight = f"{size / 1e6:.1f} MB in {count} distributions"
                sdk_ms = f"{sdk_import_ms:.0f}"
            except (ImportError, subprocess.CalledProcessError):
                sdk_ms, sdk_cpu, weight = "not installed", "-", "-"
            print(f"| {kind} | {ours_import:.0f} | {sdk_ms} | {ours_cpu:.3f} | {sdk_cpu} | {weight} |", flush=True)
        finally:
            proc.terminate()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))
    raise SystemExit(main())
