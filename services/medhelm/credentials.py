"""HELM's ``credentials.conf``: the keys and endpoints of a prod_env, read the way HELM reads them.

HELM keeps secrets in ``<local-path>/credentials.conf`` (HOCON), or in the environment variable
``HELM_CREDENTIALS`` holding the whole HOCON text (a Kubernetes Secret mounted as a variable); when the
variable is set it is used and the file is not read (HELM's rule). Entries are looked up by the deployment's
*host organization* (the part of its name before the first ``/``):

* ``<host>ApiKey`` — the key (HELM's ``provide_api_key``); failing that ``deployments { "<deployment name>":
  "<key>" }``;
* ``<host>Endpoint``, ``<host>Deployment``, ``<host>ProjectId``, ``<host>Location``, ``<host>OrgId`` —
  what HELM's client classes take as ``endpoint``, ``deployment``, ``project_id``, ``location``, ``org_id``;
* ``huggingfaceAuthToken``.

A value may be ``${VAR}`` / ``${?VAR}`` (HOCON substitution from the environment; ``${?VAR}`` may be unset).

Secrets never enter a spec, a record, a log or an error: a deployment carries a ``SecretRef`` (the file or
variable *and the entry's name*), and the client reads the value when it is built (``secret``). Every
secret-named value is registered with ``scrub`` when a source is read, so a server echoing one back has it
removed from every text the process emits. Failure
semantics: a file that cannot be read or parsed is a ConfigError naming the file and line, never a value
(the parser's own message, which may quote a token, is replaced); a missing entry is a ConfigError naming the
entry, the source and the deployment.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm import files
from medhelm.errors import ConfigError, escape
from medhelm.scrub import register

FILE = "credentials.conf"
ENV = "HELM_CREDENTIALS"
_SUBSTITUTION = re.compile(r"\$\{(\?)?([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Credentials:
    """The entries of one credentials source (values are held in memory only, never printed)."""

    source: str  # a file path, or "HELM_CREDENTIALS" (the environment variable)
    entries: Mapping[str, Any]

    def __repr__(self) -> str:  # never the values
        return f"Credentials(source={self.source!r}, entries={sorted(self.entries)!r})"

    @classmethod
    def empty(cls, source: str = "") -> Credentials:
        return cls(source, {})

    @classmethod
    def load(cls, folder: Path | None) -> Credentials:
        """``HELM_CREDENTIALS`` when set, else ``<folder>/credentials.conf`` when it exists, else empty."""
        text = os.environ.get(ENV)
        if text:
            return cls(ENV, _held(_parse(text, ENV)))
        if folder is None:
            return cls.empty()
        path = Path(folder) / FILE
        if not path.exists():
            return cls.empty(str(path))
        return cls(str(path), _held(_parse(files.read_text(path, what="credentials file"), str(path))))

    def get(self, name: str) -> Any:
        return self.entries.get(name)

    def api_key_name(self, host: str, deployment: str) -> str | None:
        """The entry holding a deployment's key, as HELM's ``provide_api_key`` picks it: ``<host>ApiKey``,
        else ``deployments.<deployment name>``; None when neither is there."""
        if f"{host}ApiKey" in self.entries:
            return f"{host}ApiKey"
        per_deployment = self.entries.get("deployments")
        if isinstance(per_deployment, Mapping) and deployment in per_deployment:
            return f"deployments.{deployment}"
        return None

    def lookup(self, name: str) -> Any:
        """An entry by name; ``deployments.<deployment name>`` reaches into the ``deployments`` object."""
        if name.startswith("deployments."):
            per_deployment = self.entries.get("deployments")
            return per_deployment.get(name[len("deployments."):]) if isinstance(per_deployment, Mapping) else None
        return self.entries.get(name)


def ref(credentials: Credentials, name: str) -> dict[str, str]:
    """What a deployment carries instead of a secret: where to find it and under which name (JSON values,
    kept in ``Deployment.options``)."""
    return {"source": credentials.source, "name": name}


def secret(reference: Mapping[str, Any], *, deployment: str) -> str:
    """The value a reference (``ref``) names, read now; a ConfigError naming the entry when it is absent."""
    source, name = str(reference.get("source") or ""), str(reference.get("name") or "")
    if source == ENV:
        text = os.environ.get(ENV)
        if not text:
            raise ConfigError(f"deployment '{escape(deployment)}': the environment variable {ENV} is not set "
                              f"(it held '{escape(name)}' when the deployments were read)")
        found = Credentials(ENV, _parse(text, ENV)).lookup(name)
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"deployment '{escape(deployment)}': {FILE} not found (it holds '{escape(name)}')",
                              path=path)
        found = Credentials(source, _parse(files.read_text(path, what="credentials file"), source)).lookup(name)
    if found is None or found == "" or isinstance(found, (Mapping, list)):
        raise ConfigError(f"deployment '{escape(deployment)}': '{escape(name)}' is not set in {escape(source)}")
    register(str(found), slot=f"credentials:{source}:{name}")  # the file may have changed since it was loaded
    return str(found)


def deployment_secret(options: Mapping[str, Any], role: str, *, deployment: str) -> str | None:
    """The secret a deployment's ``options.credentials`` names for ``role`` (``api_key`` | ``subscription_key``:
    ``credentials.as``, default ``api_key``), read now; None when it names none for that role."""
    reference = options.get("credentials")
    if not isinstance(reference, Mapping) or str(reference.get("as") or "api_key") != role:
        return None
    return secret(reference, deployment=deployment)


# entry names whose values are secrets (HELM's ``<host>ApiKey``, ``huggingfaceAuthToken``, ...); endpoints,
# deployments, project ids and locations are not, and stay readable in messages
_SECRET_NAME = re.compile(r"(?i)key|token|secret|password|credential")


def _held(entries: dict[str, Any]) -> dict[str, Any]:
    """Every secret-named value (and every ``deployments { name: key }`` value) registered with the
    scrubber as soon as the file is read: ``scrub.register``."""
    for name, value in entries.items():
        if isinstance(value, Mapping):
            if name == "deployments":
                for inner in value.values():
                    if isinstance(inner, (str, int, float)) and not isinstance(inner, bool):
                        register(str(inner))
        elif _SECRET_NAME.search(name) and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            register(str(value))
    return entries


# ``name: https://host/path`` unquoted, as HELM's docstrings write it: quoted before parsing (HOCON would read
# ``//`` as the start of a comment)
_BARE_URL = re.compile(r'^(\s*[A-Za-z0-9_."-]+\s*[:=]\s*)(https?://[^\s"#,{}\[\]]+)[ \t]*(?=\r?$)', re.MULTILINE)


def _parse(text: str, source: str) -> dict[str, Any]:
    from medhelm.runentries import parse_hocon

    text = _BARE_URL.sub(lambda m: m.group(1) + json.dumps(m.group(2)), text)
    text = _substitute(text, source)
    try:
        doc = parse_hocon(text, Path(source))
    except ConfigError as err:
        # the parser's message may quote a token, which here may be a key: keep the line only
        raise ConfigError("not in credentials.conf's shape (HOCON 'name: \"value\"' lines; quote a value that "
                          "holds ':', such as a URL)", path=source, line=err.line) from None
    except RecursionError:
        raise ConfigError(f"nested too deeply (more than {files.MAX_DEPTH} levels)", path=source) from None
    return doc


def _substitute(text: str, source: str) -> str:
    """HOCON's ``${VAR}`` / ``${?VAR}`` from the environment, as a quoted string (an unset ``${?VAR}``: empty,
    which reads as not set). Quoted strings and comments are left as they are."""
    out: list[str] = []
    i, n, quoted = 0, len(text), False
    while i < n:
        c = text[i]
        if quoted:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"' or c == "\n":
                quoted = False
            i += 1
            continue
        if c == '"':
            quoted = True
        elif c == "#" or text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(text[i:end])
            i = end
            continue
        elif c == "$":
            match = _SUBSTITUTION.match(text, i)
            if match:
                optional, name = match.group(1), match.group(2)
                found = os.environ.get(name)
                if found is None and not optional:
                    raise ConfigError(f"${{{name}}} names an environment variable that is not set",
                                      path=source, line=text.count("\n", 0, i) + 1)
                out.append(json.dumps(found or ""))
                i = match.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)
