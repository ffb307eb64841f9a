"""tests/ports.py, the one way tests start a server that must be told its port: a port taken between the pick
and the bind costs a retry (never a failure), and a server counts as started only when its own process listens."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from tests import ports

# a server that must be told its port, as Prometheus or Streamlit: binds it (or dies saying it is in use)
SERVER = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket()
    s.bind(("127.0.0.1", int(sys.argv[1])))
    s.listen()
    print("listening", flush=True)
    time.sleep(600)
""")


def _server(port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_a_port_taken_before_the_server_binds_it_costs_a_retry():
    thief = socket.socket()  # another process's listener on the first number handed out
    thief.bind(("127.0.0.1", 0))
    thief.listen()
    handed = [thief.getsockname()[1]]
    started: list[subprocess.Popen] = []

    def start(port: int) -> int:
        port = handed.pop() if handed else port
        proc = _server(port)
        started.append(proc)
        ports.serving(proc, port, "test server", lambda: proc.stdout.read() if proc.poll() is not None else "")
        return port

    try:
        port = ports.on_a_free_port(start, "test server")
        assert len(started) == 2 and started[0].returncode not in (None, 0)  # the first died: address in use
        assert port != thief.getsockname()[1] and ports.listens(started[1].pid, port)
        assert not ports.listens(started[1].pid, thief.getsockname()[1])  # someone else's listener is not ours
    finally:
        thief.close()
        for proc in started:
            proc.kill()
            proc.wait()


def test_another_failure_is_not_retried_and_collisions_are_bounded():
    calls = []

    def broken(port: int) -> None:
        calls.append(port)
        raise RuntimeError("config error")

    with pytest.raises(RuntimeError, match="config error"):
        ports.on_a_free_port(broken, "broken")
    assert len(calls) == 1

    def always_taken(port: int) -> None:
        raise ports.PortTaken(f"port {port}")

    with pytest.raises(RuntimeError, match="always: the port was taken before it could bind, 3 times in a row"):
        ports.on_a_free_port(always_taken, "always", attempts=3)


@pytest.mark.parametrize("said, taken", [
    ("OSError: [Errno 98] Address already in use", True),
    ('FATAL:  could not bind IPv4 address "127.0.0.1": Address already in use', True),
    ("listen tcp 127.0.0.1:9091: bind: address already in use", True),
    ("Port 8501 is not available", True),
    ("FATAL:  could not load pg_hba.conf", False),
    ("", False),
])
def test_taken_reads_how_each_server_says_it(said, taken):
    assert ports.taken(said) is taken
