"""Real rate-limiting gateways in front of an upstream server, for tests and benchmarks: the pacer's oracle is a
rate limiter nobody here wrote (issue 53: "pace to any gateway"). Two that hospitals run, with different rules:

    with NginxGateway(upstream_url, requests_per_minute=600, burst=10) as gw:
        ...  # point a deployment's base_url at gw.base_url; gw.log() lists (time, status) per request

``NginxGateway`` (ngx_http_limit_req_module, as nginx.org documents it): one shared bucket per key (here
``$binary_remote_addr``: every client on 127.0.0.1 shares it, as the shards of a Job behind one egress address
share a hospital's gateway) drains at ``rate``, counted to the millisecond; a request that finds more than
``burst`` requests of excess in it is refused with ``limit_req_status`` (nginx's default 503, here 429 unless
``status`` says otherwise), with no ``Retry-After`` and no rate header: a bare refusal. With ``nodelay`` the
burst's requests pass at once; without it nginx holds each until its turn (it smooths instead of refusing).
nginx takes ``rate`` only as a whole number of requests a second or a minute (``r/s``, ``r/m``). Refused requests
take nothing from the bucket.

``HaproxyGateway`` (HAProxy's stick table, as its configuration manual documents it): ``http-request track-sc0 src``
then ``deny deny_status 429 if { sc_http_req_rate(0) gt N }`` counts every request over a sliding window of
``window_s`` seconds, the refused ones too (tracking comes before the deny), and refuses past ``N`` in the window:
a client that keeps sending while refused keeps the window full.

The binaries: Debian's packages unpacked into the tools cache by scripts/_env.sh (``$MEDHELM_TOOLS_DIR``, default
``~/.cache/medhelm-tools``: ``nginx/usr/sbin/nginx``; ``haproxy/usr/sbin/haproxy`` with its libraries beside it),
else on PATH. Everything a gateway writes (config, pid, logs, buffers) lies in a temporary folder removed on
``stop``; nothing outside it.

Failure semantics: ``start`` raises ``GatewayMissing`` when no binary is found, RuntimeError with the tail of the
gateway's error output when it exits or does not listen within 60 s; a port taken between the pick and the bind
(the gateway says the address is in use) costs a retry on a new port, 8 in a row raise RuntimeError. ``stop`` sends
the gateway's graceful stop signal, SIGKILL after 10 s, and always removes the folder; ``log()`` may be read before
or after. A caller that dies without ``stop`` takes the gateway with it (``setpriv --pdeathsig``, where util-linux
has it); its folder then stays in the temporary directory.
"""

from __future__ import annotations

import functools
import glob
import os
import re
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
_IN_USE = re.compile(r"address already in use|cannot bind socket", re.IGNORECASE)


class GatewayMissing(RuntimeError):
    """No binary for the gateway: neither the tools cache's nor one on PATH."""



def _tools() -> Path:
    return Path(os.environ.get("MEDHELM_TOOLS_DIR") or Path.home() / ".cache" / "medhelm-tools")


def _binary(name: str) -> str | None:
    cached = _tools() / name / "usr" / "sbin" / name
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    system = f"/usr/sbin/{name}"  # Debian's, when /usr/sbin is not on PATH
    return shutil.which(name) or (system if os.access(system, os.X_OK) else None)


def nginx_binary() -> str | None:
    """The nginx to run: the tools cache's (scripts/_env.sh) first, else PATH's; None when there is neither."""
    return _binary("nginx")


def haproxy_binary() -> str | None:
    """The HAProxy to run: the tools cache's (scripts/_env.sh) first, else PATH's; None when there is neither, or
    when it does not run (a library it loads is missing)."""
    return _haproxy()[0]


@functools.lru_cache(maxsize=1)
def _haproxy() -> tuple[str | None, str]:
    """HAProxy's binary and version (``haproxy -v``, run once a process: a test module's skip, each start and the
    bench all ask); (None, "") when there is none or it does not run."""
    binary = _binary("haproxy")
    if binary is None:
        return None, ""
    done = subprocess.run([binary, "-v"], env=_library_env(binary), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return None, ""
    return binary, done.stdout.split()[2] if done.stdout.startswith("HAProxy version") else ""


def _library_env(binary: str) -> dict[str, str] | None:
    """The environment to run ``binary`` in: unpacked from Debian's packages, its libraries (HAProxy's Lua and
    opentracing) lie beside it; None (this process's) when there are none."""
    libs = glob.glob(str(Path(binary).parents[2] / "usr" / "lib" / "*-linux-gnu"))
    if not libs:
        return None
    return dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([*libs, os.environ.get("LD_LIBRARY_PATH", "")]))


class _Gateway:
    """One gateway process in a folder of its own: subclasses say what to run (``_command``) and how to read its
    access log (``_rows``)."""

    name = ""
    stop_signal = signal.SIGQUIT

    def __init__(self, upstream: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.port = 0
        self._proc: subprocess.Popen | None = None
        self._dir: Path | None = None
        self._log: list[tuple[float, int]] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _binary(self) -> str | None:
        raise NotImplementedError

    def _command(self, binary: str, folder: Path, port: int) -> tuple[list[str], dict[str, str] | None]:
        """The command line and environment (None: this process's) serving on ``port`` from ``folder``."""
        raise NotImplementedError

    def _rows(self, text: str) -> list[tuple[float, int]]:
        rows = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2:
                rows.append((float(parts[0]), int(parts[1])))
        return rows

    def start(self):
        binary = self._binary()
        if binary is None:
            raise GatewayMissing(f"{self.name} not found: scripts/_env.sh unpacks Debian's {self.name} package into "
                                 "the tools cache")
        self._dir = Path(tempfile.mkdtemp(prefix=f"medhelm-{self.name}-"))
        last = ""
        for _ in range(ATTEMPTS):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            command, env = self._command(binary, self._dir, port)
            errors = self._dir / "error.log"
            # util-linux's setpriv has the kernel stop the gateway when this process dies without stopping it (a
            # test killed, an exception past ``with``): no gateway outlives its caller
            guard = ["setpriv", "--pdeathsig", self.stop_signal.name.removeprefix("SIG")] \
                if shutil.which("setpriv") else []
            with open(self._dir / "stdout.log", "ab") as out, open(errors, "ab") as err:
                self._proc = subprocess.Popen([*guard, *command], env=env, stdout=out, stderr=err)
            deadline = time.monotonic() + START_TIMEOUT_S
            while self._proc.poll() is None and time.monotonic() < deadline:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        self.port = port
                        return self
                except OSError:
                    time.sleep(0.05)
            last = errors.read_text(errors="replace")[-800:] if errors.exists() else ""
            code = self._proc.returncode
            self._halt()
            if not _IN_USE.search(last):
                self.stop()
                raise RuntimeError(f"{self.name} did not start (exit {code}): {last.strip()}")
        self.stop()
        raise RuntimeError(f"{self.name}: the port was taken before it could bind, {ATTEMPTS} times in a row: {last}")

    def _halt(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(self.stop_signal)
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)

    def _access_log(self) -> Path:
        return self._dir / "access.log"

    def log(self) -> list[tuple[float, int]]:
        """Every request the gateway answered: (its time, epoch seconds to the millisecond; its status), in order."""
        if self._log is not None:
            return self._log
        if self._dir is None or not self._access_log().exists():
            return []
        return self._rows(self._access_log().read_text(errors="replace"))

    def stop(self) -> None:
        self._halt()
        if self._dir is not None:
            self._log = self.log()  # flushed: the graceful stop closes the log
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class NginxGateway(_Gateway):
    """nginx in front of ``upstream`` (``http://host:port``), refusing past ``requests_per_minute`` (a whole number
    of requests a second or a minute) with ``burst`` requests of excess (``nodelay``: at once; else held)."""

    name = "nginx"

    def __init__(self, upstream: str, requests_per_minute: int, burst: int = 0, nodelay: bool = True,
                 status: int | None = 429) -> None:
        super().__init__(upstream)
        self.rate = f"{requests_per_minute // 60}r/s" if requests_per_minute % 60 == 0 else f"{requests_per_minute}r/m"
        self.requests_per_minute = requests_per_minute
        self.burst, self.nodelay, self.status = burst, nodelay, status

    def _binary(self) -> str | None:
        return nginx_binary()

    def _command(self, binary: str, folder: Path, port: int) -> tuple[list[str], dict[str, str] | None]:
        limit = f"limit_req zone=gateway{f' burst={self.burst}' if self.burst else ''}" \
                f"{' nodelay' if self.nodelay and self.burst else ''};"
        status_line = f"limit_req_status {self.status};" if self.status is not None else ""
        temp = "\n".join(f"    {kind}_temp_path {folder / kind};" for kind in
                         ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = folder / "nginx.conf"
        conf.write_text(f"""daemon off;
worker_processes 1;
pid {folder / 'nginx.pid'};
error_log {folder / 'error.log'} warn;
events {{ worker_connections 4096; }}
http {{
    log_format pacing '$msec $status';
    access_log {folder / 'access.log'} pacing;
{temp}
    limit_req_zone $binary_remote_addr zone=gateway:1m rate={self.rate};
    upstream model {{ server {self.upstream.hostname}:{self.upstream.port}; keepalive 128; }}
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
""")
        return [binary, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(conf)], None


class HaproxyGateway(_Gateway):
    """HAProxy in front of ``upstream``, refusing (429) a request that makes more than ``requests_per_minute``'s part
    of ``window_s`` seconds in its sliding count of every request, the refused ones included."""

    name = "haproxy"
    stop_signal = signal.SIGUSR1  # HAProxy's soft stop: finish what is in flight, then exit

    def __init__(self, upstream: str, requests_per_minute: int, window_s: int = 1) -> None:
        super().__init__(upstream)
        self.requests_per_minute, self.window_s = requests_per_minute, window_s
        self.limit = requests_per_minute * window_s // 60

    def _binary(self) -> str | None:
        return haproxy_binary()

    @staticmethod
    def version() -> str:
        """HAProxy's version, as ``haproxy -v`` states it ("" when it does not run)."""
        return _haproxy()[1]

    def _command(self, binary: str, folder: Path, port: int) -> tuple[list[str], dict[str, str] | None]:
        conf = folder / "haproxy.cfg"
        conf.write_text(f"""global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 600s
    timeout server 600s
    option dontlognull
frontend gateway
    bind 127.0.0.1:{port}
    log stdout format raw local0
    log-format "%Ts.%ms %ST"
    stick-table type ip size 100k expire {2 * self.window_s + 60}s store http_req_rate({self.window_s}s)
    http-request track-sc0 src
    http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt {self.limit} }}
    default_backend model
backend model
    http-reuse always
    server model {self.upstream.hostname}:{self.upstream.port}
""")
        return [binary, "-db", "-f", str(conf)], _library_env(binary)

    def _access_log(self) -> Path:
        return self._dir / "stdout.log"  # ``log stdout``: the access log is what HAProxy writes to its stdout
