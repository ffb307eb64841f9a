"""User-facing errors: one clear line, naming the file/field/URL, exit code 2 at the CLI door.

Anything that is the user's input being wrong (a file, a field, a run entry, a deployment, an
unreachable server) raises a subclass of ``MedhelmError``. The CLI prints ``medhelm: error: <msg>``
and exits 2; every other door (gRPC, Job, dashboard) maps it to its own error channel.
Messages never contain patient text: name the file, line and field, not the cell's value. User values
that do appear (a path, a field name, a run entry) go through ``escape``: control characters are shown
as ``\\n``-style escapes and long values are cut, so a message stays one line whatever the input.
A full or read-only output folder is ``OutputUnwritable`` (exit 74).
Secrets: ``str(err)`` of every ``MedhelmError`` passes ``scrub.scrub`` (each secret the process holds, by
value and in its encodings), so no door — the CLI's line, a record's ``error``, a jury explanation, a gRPC
status — can carry a key a server echoed back.
Anything else escaping a door is a bug: the CLI logs its traceback and exits 70 (``INTERNAL_EXIT``).
"""

from __future__ import annotations

import copy
import errno
import re
from pathlib import Path

from medhelm.scrub import scrub

INTERNAL_EXIT = 70  # EX_SOFTWARE: a bug, never a user mistake
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")  # + bidi overrides
MAX_VALUE_CHARS = 300


def escape(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A user value safe inside a one-line message: control characters escaped, cut at ``limit``."""
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))
    if len(text) <= limit:
        return text  # whole: the message it goes into is scrubbed as a whole (MedhelmError.__str__)
    return scrub(text)[: limit - 1] + "…"  # scrubbed before the cut, which could leave half a key


def without_password(url: str) -> str:
    """A connection URL fit for a message: the password of ``scheme://user:password@host`` becomes ``***``."""
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
    return url


def one_line(message: str, limit: int = 4000) -> str:
    """A whole message as one line, without secrets (the CLI's last step before printing)."""
    return escape(scrub(message), limit)


class MedhelmError(Exception):
    """An error the user can fix; ``str(err)`` is the whole one-line message."""

    exit_code = 2

    def __str__(self) -> str:
        return scrub(super().__str__())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

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
            where = escape(path, 1000)
            if line is not None:
                where += f":{line}"
            if field is not None:
                where += f": field '{escape(field, 120)}'"
            where += ": "
        elif field is not None:
            where = f"field '{escape(field, 120)}': "
        super().__init__(where + message)
        self.path, self.line, self.field = path, line, field


class OutputUnwritable(MedhelmError):
    """The output folder is full, read-only or not ours to write: the run stops, its finished records kept.
    Exit 74 (EX_IOERR): not the user's input, and a Job may retry once space is back."""

    exit_code = 74

    # errno values meaning "this folder cannot take more writes now" (not a bug in medhelm)
    ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})

    @classmethod
    def from_os_error(cls, err: OSError, folder: str | Path) -> OutputUnwritable | None:
        """The one-line error for ``err`` when it says the folder is full/read-only; None for anything else."""
        if err.errno not in cls.ERRNOS:
            return None
        reason = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                  errno.EROFS: "read-only file system", errno.EFBIG: "file too large for the file system",
                  }.get(err.errno, "permission denied")
        return cls(f"cannot write to the output folder {escape(folder, 1000)} ({reason}); the run stopped and every "
                   "instance already written is kept: free space or make the folder writable, then run the same "
                   "command again to resume")


class DataUnavailable(MedhelmError):
    """A benchmark's data is not on this machine (gated/private, or no mirror while offline)."""


class InferenceError(MedhelmError):
    """A model server refused or failed a request. ``retryable`` errors are retried with backoff."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None,
                 retry_after: float | None = None, content_filter: bool = False) -> None:
        super().__init__(message)
        self.retryable, self.status, self.retry_after = retryable, status, retry_after
        self.content_filter = content_filter  # a provider's content filter refused this instance's prompt


class ServerUnreachable(InferenceError):
    """Connection refused / DNS / timeout after all retries: the whole run stops (resumable)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)
