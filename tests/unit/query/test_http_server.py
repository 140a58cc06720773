"""uvicorn serving an ASGI app in a thread (statekeeper.query.http_server)."""

from __future__ import annotations

import http.client
import socket

import pytest

from statekeeper.query.http_server import ThreadedHttpServer


async def _echo(scope: dict, receive: object, send: object) -> None:
    body = scope["path"].encode() + b"?" + scope["query_string"]
    headers = [(b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": body})  # type: ignore[operator]


def test_serves_keep_alive_on_a_bound_port_and_frees_it_on_close() -> None:
    server = ThreadedHttpServer(_echo, "127.0.0.1", 0, "test-http")
    port = server.port
    try:
        assert server.host == "127.0.0.1" and port > 0
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        for i in range(3):  # one connection, three requests
            connection.request("GET", f"/a/b?k={i}")
            answer = connection.getresponse()
            assert (answer.status, answer.read()) == (200, f"/a/b?k={i}".encode())
        connection.close()
        with pytest.raises(OSError):  # in use: the constructor fails, no thread starts
            ThreadedHttpServer(_echo, "127.0.0.1", port, "test-http-2")
    finally:
        server.close()
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
