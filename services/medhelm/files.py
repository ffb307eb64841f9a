"""Reading JSON and YAML files with one-line errors naming the file and line (shared by every layer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from medhelm.errors import ConfigError


def load_json(path: Path, *, missing: str = "missing") -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(missing, path=path) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"corrupt JSON ({e.msg})", path=path, line=e.lineno) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=path) from None


def load_yaml(path: Path, *, missing: str = "file not found") -> Any:
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(missing, path=path) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=path) from None
    except yaml.YAMLError as err:
        raise yaml_error(err, path) from None


def yaml_error(err: yaml.YAMLError, path: Path) -> ConfigError:
    """A YAML parse error as one line: the file, the line, what the parser said."""
    mark = getattr(err, "problem_mark", None)
    return ConfigError(f"invalid YAML ({getattr(err, 'problem', None) or err})", path=path,
                       line=None if mark is None else mark.line + 1)
