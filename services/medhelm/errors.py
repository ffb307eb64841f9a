"""User-facing errors: one clear line, naming the file/field/URL, exit code 2 at the CLI door.

Anything that is the user's input being wrong (a file, a field, a run entry, a deployment, an
unreachable server) raises a subclass of ``MedhelmError``. The CLI prints ``medhelm: error: <msg>``
and exits 2; every other door (gRPC, Job, dashboard) maps it to its own error channel.
Messages never contain patient text: name the file, line and field, not the cell's value.
"""

from __future__ import annotations

import copy
from pathlib import Path


class MedhelmError(Exception):
    """An error the user can fix; ``str(err)`` is the whole one-line message."""

    exit_code = 2

    def with_context(self, prefix: str) -> MedhelmError:
        """The same error (same type) with ``prefix`` in front: which .conf / run it came from."""
        wrapped = copy.copy(self)
        wrapped.args = (f"{prefix}{self}",)
        return wrapped


class ConfigError(MedhelmError):
    """A bad input file or value: names the file (and line / field where known)."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
            if field is not None:
                where += f": field '{field}'"
            where += ": "
        elif field is not None:
            where = f"field '{field}': "
        super().__init__(where + message)
        self.path, self.line, self.field = path, line, field


class DataUnavailable(MedhelmError):
    """A benchmark's data is not on this machine (gated/private, or no mirror while offline)."""


class InferenceError(MedhelmError):
    """A model server refused or failed a request. ``retryable`` errors are retried with backoff."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable, self.status, self.retry_after = retryable, status, retry_after


class ServerUnreachable(InferenceError):
    """Connection refused / DNS / timeout after all retries: the whole run stops (resumable)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)
