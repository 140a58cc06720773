"""An ASGI application served by uvicorn in a thread of its own.

The query server runs inside a process that does other work (the executor's service
process beside the standby updater and the snapshot uploader, or a Python worker), so
uvicorn runs its event loop in a daemon thread instead of owning the process:
it installs no signal handlers there (uvicorn does so only in the main thread). The
listening socket is bound before the thread starts, so port 0 gives the bound port at
once and a port in use fails in the constructor.

Settings that matter for the queries: keep-alive connections (one client connection serves
many queries) closed after 60 s idle, httptools' HTTP parser with each response sent as one
segment (:class:`CorkedHttpToolsProtocol`), no access log, no proxy-header middleware.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

KEEP_ALIVE_S = 60
START_TIMEOUT_S = 10.0
_CORK: int | None = getattr(socket, "TCP_CORK", None)  # Linux only; elsewhere no cork


class CorkedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, sending each response as one TCP segment.

    uvicorn writes a response's head and body separately, and with ``TCP_NODELAY`` each
    write is a segment of its own: two deliveries, two wake-ups of the client per answer.
    For small JSON answers those cost more CPU than the answer itself. The socket is corked
    (``TCP_CORK``) from a request's start until its response is complete, so the kernel
    sends head and body together; Linux flushes corked data after 200 ms at the latest, so a
    response can never be held longer."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        self._cork_socket = sock if _CORK is not None and sock is not None else None

    def _cork(self, on: bool) -> None:
        if self._cork_socket is not None:
            try:
                self._cork_socket.setsockopt(socket.IPPROTO_TCP, _CORK, int(on))
            except OSError:  # a closed connection: nothing left to send
                self._cork_socket = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._cork(True)

    def on_response_complete(self) -> None:
        self._cork(False)
        super().on_response_complete()


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
            http=CorkedHttpToolsProtocol,
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
