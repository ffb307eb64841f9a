"""Upstream HELM's own prod_env files, unchanged, from three crfm-helm releases on PyPI (tests/helm_releases.py):
model_deployments.yaml loads whole (entries of classes we do not run are kept, reported by `validate` one line
per class, and refused only when a run names one), duplicate names resolve as HELM resolves them (the later
entry wins; a model's default is its last deployment that is not deprecated), every argument HELM's
constructors take is understood, model_metadata.yaml (with `release:`, a repeated key) and
tokenizer_configs.yaml load beside it."""

from __future__ import annotations

import ast
import collections
import shutil
import warnings
from pathlib import Path

import pytest
import yaml

from medhelm import helm_env
from medhelm.cli import main
from medhelm.deployments import DeploymentRegistry
from medhelm.errors import ConfigError
from tests.core.conftest import write_benchmark

KEY = "sk-upstream-test-0c1d2e"  # a fake key: never printed


def upstream(release: Path) -> list[dict]:
    return yaml.safe_load((release / "helm/config/model_deployments.yaml").read_text())["model_deployments"]


def prod_env(release: Path, folder: Path, credentials: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("model_deployments.yaml", "model_metadata.yaml", "tokenizer_configs.yaml"):
        shutil.copy(release / "helm/config" / name, folder / name)
    (folder / "credentials.conf").write_text(credentials)
    return folder


def class_of(entry: dict) -> str:
    return entry["client_spec"]["class_name"].rsplit(".", 1)[-1]


def test_model_deployments_loads_whole_later_duplicates_win(helm_release, tmp_path):
    entries = upstream(helm_release)
    registry = DeploymentRegistry.load(prod_env(helm_release, tmp_path / "env"))
    last = {e["name"]: e for e in entries}  # HELM's registry: the later entry of a name replaces the earlier
    ours = {d.name: d for d in registry if d.options.get("helm_class")}
    assert set(ours) | set(registry.unrunnable) == set(last)
    assert not set(ours) & set(registry.unrunnable)
    for name, entry in last.items():
        got = ours[name].options["helm_class"] if name in ours else registry.unrunnable[name].class_name
        assert got == class_of(entry), name
        model = ours[name].model_name if name in ours else registry.unrunnable[name].model_name
        assert model == entry["model_name"], name
    # every class of upstream's file is either run or kept
    classes = {class_of(e) for e in last.values()}
    assert classes == {d.options["helm_class"] for d in ours.values()} | {
        u.class_name for u in registry.unrunnable.values()}
    assert {u.class_name for u in registry.unrunnable.values()}.isdisjoint(helm_env.CLIENT_CLASSES)
    assert len(ours) > 200  # the classes a hospital uses: OpenAI, Azure, Anthropic, Gemini, Bedrock, SHC, ...


def test_a_models_default_deployment_is_helms_choice(helm_release, tmp_path):
    """get_default_model_deployment_for_model: the last deployment of the model that is not deprecated."""
    entries = upstream(helm_release)
    registry = DeploymentRegistry.load(prod_env(helm_release, tmp_path / "env"))
    by_model: dict[str, list[dict]] = collections.defaultdict(list)
    order = {e["name"]: e for e in entries}  # a name's last definition, at the position HELM appended it
    for e in entries:
        by_model[e["model_name"]].append(e)
    checked = 0
    for model, deps in by_model.items():
        if model in order:  # a model named like a deployment resolves to that deployment
            continue
        current = [d for d in deps if not d.get("deprecated") and order[d["name"]] is d] or deps
        want = current[-1]
        if class_of(want) in helm_env.CLIENT_CLASSES and want["name"] not in registry.unrunnable:
            assert registry.resolve(model, None).name == want["name"], model
            checked += 1
        else:
            with pytest.raises(ConfigError, match="which medhelm does not run"):
                registry.resolve(model, None)
    assert checked > 0


def test_every_argument_helms_constructors_take_is_understood(helm_release):
    """For each class we run: the constructor's parameters in that release's source (helm/clients/*.py,
    the class and its bases up to CachingClient) are all handled by helm_env (honoured, ignored as changing
    nothing on the wire, or refused by name); and no arg of ours is one HELM never takes."""
    params: dict[str, tuple[list[str], set[str]]] = {}
    for source in (helm_release / "helm/clients").rglob("*.py"):
        with warnings.catch_warnings():  # upstream's own invalid escapes
            warnings.simplefilter("ignore")
            tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                init = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
                args = {a.arg for a in (init[0].args.args[1:] + init[0].args.kwonlyargs)} if init else None
                params[node.name] = ([ast.unparse(b) for b in node.bases], args)

    def constructor(name: str) -> set[str]:
        bases, args = params[name]
        if args is not None:
            return args
        return constructor(next(b for b in bases if b in params))

    known = set(helm_env._IGNORED_ARGS) | set(helm_env._UNHONOURED_ARGS)
    seen = 0
    for name, row in helm_env.CLIENT_CLASSES.items():
        if name not in params:
            continue  # not in this release
        missing = constructor(name) - row.args - known - {"model_name"}  # model_name: HELM's injected constant
        assert not missing, f"{name}: {sorted(missing)}"
        seen += 1
    assert seen >= 20


def test_validate_reports_kept_classes_and_refuses_a_run_that_names_one(helm_release, tmp_path, capsys):
    env = prod_env(helm_release, tmp_path / "env", f'openaiApiKey: "{KEY}"\n')
    cfg = write_benchmark(tmp_path / "bench", 3)
    counts = collections.Counter(class_of(e) for e in {e["name"]: e for e in upstream(helm_release)}.values()
                                 if class_of(e) not in helm_env.CLIENT_CLASSES)
    entry = f"medhelm_configurable_benchmark:config_path={cfg},model_deployment=openai/gpt-4o-2024-05-13"
    code = main(["validate", "-r", entry, "--local-path", str(env), "-o", str(tmp_path / "out")])
    out = capsys.readouterr()
    assert code == 0, out.err
    kept = [line for line in out.out.splitlines() if line.startswith("kept, not run:")]
    assert len(kept) == len(counts)  # one line per class
    for cls, n in counts.items():
        assert any(f" {n} HELM deployment(s) of class {cls} (" in line for line in kept), cls
    assert KEY not in out.out + out.err

    hf = next(e["name"] for e in upstream(helm_release) if class_of(e) == "HuggingFaceClient")
    entry = f"medhelm_configurable_benchmark:config_path={cfg},model_deployment={hf}"
    code = main(["validate", "-r", entry, "--local-path", str(env), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "\n" not in err and "Traceback" not in err
    assert f"'{hf}' uses HELM client class HuggingFaceClient, which medhelm does not run" in err
    assert "vLLM" in err  # what to use instead
    assert not (tmp_path / "out").exists()


def test_an_argument_that_changes_the_request_and_cannot_be_honoured_is_refused_by_name(tmp_path):
    env = tmp_path / "env"
    env.mkdir()
    (env / "model_deployments.yaml").write_text(yaml.safe_dump({"model_deployments": [
        {"name": "amazon/nova-pro-v1:0", "model_name": "amazon/nova-pro-v1:0", "tokenizer_name": "x/y",
         "max_sequence_length": 300000,
         "client_spec": {"class_name": "helm.clients.bedrock_client.BedrockNovaClient",
                         "args": {"assumed_role": "arn:aws:iam::123456789012:role/helm"}}}]}))
    registry = DeploymentRegistry.load(env)  # loads: kept
    with pytest.raises(ConfigError, match=r"BedrockNovaClient.*assumed_role.*AWS_SESSION_TOKEN") as err:
        registry.get("amazon/nova-pro-v1:0")
    assert "\n" not in str(err.value)


def test_model_metadata_and_tokenizer_configs_load_whole(helm_release, tmp_path):
    raw = yaml.safe_load((helm_release / "helm/config/model_metadata.yaml").read_text())["models"]
    meta = helm_env.read_metadata(helm_release / "helm/config/model_metadata.yaml")
    assert [m.name for m in meta] == [m["name"] for m in raw]
    assert any("release" in m for m in raw)  # upstream's extra key, which HELM ignores
    by_name = {m.name: m for m in meta}
    for m in raw:
        if m.get("display_name"):
            assert by_name[m["name"]].display_name == {x["name"]: x for x in raw}[m["name"]]["display_name"]
    # summarize reads it from the prod_env (and nothing reads tokenizer_configs.yaml: it loads by being ignored)
    env = prod_env(helm_release, tmp_path / "env")
    assert len(helm_env.read_metadata(env / helm_env.METADATA_FILE)) == len(raw)
