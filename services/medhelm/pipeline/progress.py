"""Progress on stderr while runs go (a live line on a terminal, periodic lines otherwise).

Shows counts and rates only — never instance text (it may be PHI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, enabled: bool = True, stream: TextIO | None = None, interval_s: float = 10.0) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = enabled and self.stream.isatty()
        self.interval_s = interval_s
        self._label = ""
        self._total = self._done = self._failed = self._base = 0
        self._t0 = self._last = 0.0

    def begin_run(self, index: int, count: int, name: str) -> None:
        self._label = f"[{index}/{count}] {name}"
        self._t0 = self._last = time.monotonic()

    def set_total(self, total: int, already_done: int = 0) -> None:
        self._total, self._done, self._failed, self._base = total, already_done, 0, already_done
        if already_done and self.enabled:
            self._print(f"{self._label}: resuming, {already_done}/{total} already done", final=True)

    def advance(self, failed: bool = False) -> None:
        self._done += 1
        self._failed += int(failed)
        now = time.monotonic()
        if self.tty and now - self._last >= 0.1 or (not self.tty and now - self._last >= self.interval_s):
            self._last = now
            self._print(self._line(now))

    def end_run(self, outcome) -> None:  # RunOutcome (imported lazily to avoid a cycle)
        if not self.enabled:
            return
        if outcome.skipped:
            self._print(f"{self._label}: skipped (already complete)", final=True)
            return
        self._print(self._line(time.monotonic()), final=True)

    def _line(self, now: float) -> str:
        elapsed = max(now - self._t0, 1e-9)
        rate = (self._done - self._base) / elapsed
        left = self._total - self._done
        eta = f" ETA {_fmt(left / rate)}" if rate > 0 and left > 0 else ""
        bar_w = 24
        filled = int(bar_w * self._done / self._total) if self._total else bar_w
        bar = "#" * filled + "-" * (bar_w - filled)
        failed = f" {self._failed} failed" if self._failed else ""
        return f"{self._label} |{bar}| {self._done}/{self._total} {rate:.1f}/s {_fmt(elapsed)}{eta}{failed}"

    def _print(self, text: str, final: bool = False) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
