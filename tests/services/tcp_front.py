"""A TCP front on 127.0.0.1 for a gRPC service process, standing in for what a restart looks like from a
client: ``refuse`` first connections closed unanswered (a pod's port while it restarts), then every
connection piped to the current ``backend`` (a Kubernetes Service's name staying put while its pod is
replaced: assign ``backend``); a backend that is down gets its connection closed at once."""

from __future__ import annotations

import socket
import threading


class Front:
    def __init__(self, backend: str, refuse: int = 0) -> None:
        self.backend = backend
        self.refuse, self.refused, self.passed = refuse, 0, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            if self.refused < self.refuse:
                self.refused += 1
                conn.close()
                continue
            host, port = self.backend.rsplit(":", 1)
            try:
                upstream = socket.create_connection((host, int(port)), timeout=5)
            except OSError:  # the backend is gone: refused, as a Service without ready endpoints
                conn.close()
                continue
            self.passed += 1
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
