"""Reading the project's own JSON files with one-line errors (shared by the pipeline and the store)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
