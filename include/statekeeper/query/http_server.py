"""An ASGI application served by uvicorn in a thread of its own.

The query server runs inside a process that does other work (the executor's service
process beside the standby updater and the snapshot uploader, or a Python worker), so
uvicorn runs its event loop in a daemon thread instead of owning the process:
it installs no signal handlers there (uvicorn does so only in the main thread). The
listening socket is bound before the thread starts, so port 0 gives the bound port at
once and a port in use fails in the constructor.

Settings that matter for the queries: keep-alive connections (one client connection serves
many queries) closed after 60 s idle, httptools' HTTP parser, no access log, no proxy-header
middleware.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import uvicorn

KEEP_ALIVE_S = 60
START_TIMEOUT_S = 10.0


class ThreadedHttpServer:
    """Serves ``app`` on ``host:port`` (0: a free port) until :meth:`close`."""

    def __init__(self, app: Any, host: str, port: int, name: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, port))
            self._socket.listen(128)
        except OSError:
            self._socket.close()
            raise
        self.host, self.port = self._socket.getsockname()[:2]
        config = uvicorn.Config(
            app,
            http="httptools",
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_keep_alive=KEEP_ALIVE_S,
            # Clients call executors directly: no proxy's X-Forwarded-* to trust, and no
            # Server header to advertise (each costs work on every request).
            proxy_headers=False,
            server_header=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name=name, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._socket.close()
