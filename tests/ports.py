"""Ports for the servers tests start, without trusting "a port found free stays free".

Our own servers (the mock OpenAI server, the fault proxy, the OIDC provider, anything on ``--port 0``) bind
port 0 themselves and report the port they got: use that, never this module. Servers that must be told their
port (Streamlit with sign-in, whose redirect URI names it; Prometheus; the Pushgateway; PostgreSQL;
vLLM/KServe; podman's published ports) get a number from ``pick()``. Between ``pick()`` closing its socket and
the server binding the number, another process can take it (the other pytest-xdist worker starting the same
kind of server, any client's ephemeral port), so:

- ``on_a_free_port(start, what)`` runs ``start(port)`` and, when ``start`` raises ``PortTaken``, runs it again
  on a new number: a collision costs a retry, not a failure;
- ``taken(text)`` says whether a server's output reports its address in use (every server here words it one
  of a few ways), for ``start`` functions to raise ``PortTaken`` with;
- ``serving(proc, port, ...)`` waits until the server's OWN process (or one of its children) listens on the
  port — read from /proc, so a different server that grabbed the number and answers there never counts as
  ours started — then for ``ready()``; it raises ``PortTaken`` when the process exits saying the address is in
  use.

Failure semantics: a start that fails for any other reason fails at once with its own message (no retry hides
it); ``attempts`` collisions in a row raise RuntimeError naming the server; ``serving`` gives up after
``timeout_s`` (default 300 s, dozens of times a normal start: it only stops a hung test, a slow machine never
reaches it)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# how Streamlit, Go servers (Prometheus, Pushgateway, podman's rootlessport), PostgreSQL and Python's OSError
# (vLLM, KServe) say it
_IN_USE = re.compile(r"address already in use|port \d+ is not available|EADDRINUSE|\[Errno 98\]", re.IGNORECASE)


class PortTaken(Exception):
    """The server could not bind the port it was given: another process had taken it."""


def pick() -> int:
    """A port nobody listened on a moment ago (the kernel's pick for port 0); may be taken by the time it is used."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def taken(text: str) -> bool:
    """Whether a server's output says its address was already in use."""
    return bool(_IN_USE.search(text or ""))


def on_a_free_port(start: Callable[[int], T], what: str, attempts: int = 8) -> T:
    """``start(port)`` on a picked port; again on a new one each time it raises ``PortTaken``."""
    last: PortTaken | None = None
    for _ in range(attempts):
        try:
            return start(pick())
        except PortTaken as err:
            last = err
    raise RuntimeError(f"{what}: the port was taken before it could bind, {attempts} times in a row: {last}")


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":  # 0A: LISTEN
                inodes.add(f[9])
    return inodes


def _family(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return pids


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` or one of its descendants holds a listening TCP socket on ``port`` (Linux /proc)."""
    sockets = {f"socket:[{i}]" for i in _listening_inodes(port)}
    if not sockets:
        return False
    for p in _family(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{p}/fd/{fd}") in sockets:
                    return True
            except OSError:
                pass
    return False


def serving(proc: subprocess.Popen, port: int, what: str, output: Callable[[], str],
            ready: Callable[[], bool] | None = None, timeout_s: float = 300) -> None:
    """Wait until ``proc`` (or a child) listens on ``port`` and ``ready()`` holds (when given).

    ``output()`` is what the server wrote so far (for the in-use check and the failure message). Raises
    ``PortTaken`` when the server exits saying the port is in use, RuntimeError when it exits otherwise or is
    still not serving after ``timeout_s``; the caller stops ``proc`` in both cases."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            text = output()
            if taken(text):
                raise PortTaken(f"{what} on port {port}: {text.strip().splitlines()[-1:]}")
            raise RuntimeError(f"{what} exited ({proc.returncode}) before serving on port {port}: {text[-800:]}")
        if listens(proc.pid, port) and (ready is None or ready()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not serving on port {port} after {timeout_s:.0f} s: {output()[-800:]}")
        time.sleep(0.2)
