"""A real nginx ``limit_req`` gateway in front of an upstream server, for tests and benchmarks: the pacer's
oracle is a rate limiter nobody here wrote (issue 53: "pace to any gateway").

    with NginxGateway(upstream_url, requests_per_minute=600, burst=10) as gw:
        ...  # point a deployment's base_url at gw.base_url; gw.log() lists (time, status) per request

What nginx does (ngx_http_limit_req_module, as nginx.org documents it): one shared bucket per key (here
``$binary_remote_addr``: every client on 127.0.0.1 shares it, as the shards of a Job behind one egress address
share a hospital's gateway) drains at ``rate``, counted to the millisecond; a request that finds more than
``burst`` requests of excess in it is refused with ``limit_req_status`` (nginx's default 503, here 429 unless
``status`` says otherwise), with no ``Retry-After`` and no rate header: a bare refusal. With ``nodelay`` the
burst's requests pass at once; without it nginx holds each until its turn (it smooths instead of refusing).
nginx takes ``rate`` only as a whole number of requests a second or a minute (``r/s``, ``r/m``).

The binary: Debian's ``nginx`` package unpacked into the tools cache by scripts/_env.sh (``$MEDHELM_TOOLS_DIR``,
default ``~/.cache/medhelm-tools``, ``nginx/usr/sbin/nginx``), else ``nginx`` on PATH. Everything nginx writes
(config, pid, logs, proxy buffers) lies in a temporary folder removed on ``stop``; nothing outside it.

Failure semantics: ``start`` raises ``NginxMissing`` when no binary is found, RuntimeError with the tail of nginx's
error log when it exits or does not listen within 60 s; a port taken between the pick and nginx's bind (nginx
says "Address already in use") costs a retry on a new port, 8 in a row raise RuntimeError. ``stop`` sends SIGQUIT
(nginx's graceful stop), SIGKILL after 10 s, and always removes the folder; ``log()`` may be read before or after.
A caller that dies without ``stop`` takes nginx with it (``setpriv --pdeathsig``, where util-linux has it); its
folder then stays in the temporary directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

ATTEMPTS = 8
START_TIMEOUT_S = 60.0


class NginxMissing(RuntimeError):
    """No nginx binary: neither the tools cache's nor one on PATH."""


def nginx_binary() -> str | None:
    """The nginx to run: the tools cache's (scripts/_env.sh) first, else PATH's; None when there is neither."""
    tools = Path(os.environ.get("MEDHELM_TOOLS_DIR") or Path.home() / ".cache" / "medhelm-tools")
    cached = tools / "nginx" / "usr" / "sbin" / "nginx"
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def _config(prefix: Path, port: int, upstream: str, rate: str, burst: int, nodelay: bool, status: int | None) -> str:
    up = urllib.parse.urlsplit(upstream)
    limit = f"limit_req zone=gateway{f' burst={burst}' if burst else ''}{' nodelay' if nodelay and burst else ''};"
    status_line = f"limit_req_status {status};" if status is not None else ""
    temp = "\n".join(f"    {kind}_temp_path {prefix / kind};" for kind in
                     ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""daemon off;
worker_processes 1;
pid {prefix / 'nginx.pid'};
error_log {prefix / 'error.log'} warn;
events {{ worker_connections 4096; }}
http {{
    log_format pacing '$msec $status';
    access_log {prefix / 'access.log'} pacing;
{temp}
    limit_req_zone $binary_remote_addr zone=gateway:1m rate={rate};
    upstream model {{ server {up.hostname}:{up.port}; keepalive 128; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            {limit}
            {status_line}
            proxy_pass http://model;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


class NginxGateway:
    """nginx in front of ``upstream`` (``http://host:port``), refusing past ``requests_per_minute`` (a whole number
    of requests a second or a minute) with ``burst`` requests of excess (``nodelay``: at once; else held)."""

    def __init__(self, upstream: str, requests_per_minute: int, burst: int = 0, nodelay: bool = True,
                 status: int | None = 429) -> None:
        if requests_per_minute % 60 == 0:
            self.rate = f"{requests_per_minute // 60}r/s"
        else:
            self.rate = f"{requests_per_minute}r/m"
        self.requests_per_minute = requests_per_minute
        self.upstream, self.burst, self.nodelay, self.status = upstream, burst, nodelay, status
        self.port = 0
        self._proc: subprocess.Popen | None = None
        self._dir: Path | None = None
        self._log: list[tuple[float, int]] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> NginxGateway:
        binary = nginx_binary()
        if binary is None:
            raise NginxMissing("nginx not found: scripts/_env.sh unpacks Debian's nginx package into the tools cache")
        self._dir = Path(tempfile.mkdtemp(prefix="medhelm-nginx-"))
        last = ""
        for _ in range(ATTEMPTS):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            conf = self._dir / "nginx.conf"
            conf.write_text(_config(self._dir, port, self.upstream, self.rate, self.burst, self.nodelay,
                                    self.status))
            error_log = self._dir / "error.log"
            # util-linux's setpriv has the kernel send nginx SIGQUIT (its graceful stop) when this process dies
            # without stopping it (a test killed, an exception past ``with``): no nginx outlives its caller
            guard = ["setpriv", "--pdeathsig", "QUIT"] if shutil.which("setpriv") else []
            self._proc = subprocess.Popen([*guard, binary, "-p", str(self._dir), "-e", str(error_log), "-c", str(conf)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + START_TIMEOUT_S
            while self._proc.poll() is None and time.monotonic() < deadline:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        self.port = port
                        return self
                except OSError:
                    time.sleep(0.05)
            last = error_log.read_text(errors="replace")[-800:] if error_log.exists() else ""
            self._halt()
            if "Address already in use" not in last:
                self.stop()
                raise RuntimeError(f"nginx did not start (exit {self._proc.returncode}): {last.strip()}")
        self.stop()
        raise RuntimeError(f"nginx: the port was taken before it could bind, {ATTEMPTS} times in a row: {last}")

    def _halt(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGQUIT)
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)

    def log(self) -> list[tuple[float, int]]:
        """Every request nginx answered: (its time, epoch seconds to the millisecond; its status), in order."""
        if self._log is not None:
            return self._log
        path = self._dir / "access.log" if self._dir else None
        if path is None or not path.exists():
            return []
        rows = []
        for line in path.read_text().splitlines():
            at, status = line.split()
            rows.append((float(at), int(status)))
        return rows

    def stop(self) -> None:
        self._halt()
        if self._dir is not None:
            self._log = self.log()  # nginx has flushed it: the graceful stop closes the log
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> NginxGateway:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
