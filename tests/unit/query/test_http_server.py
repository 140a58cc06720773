"""uvicorn serving an ASGI app in a thread (statekeeper.query.http_server)."""

from __future__ import annotations

import asyncio
import http.client
import socket
import subprocess
import sys

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


_READER = """
import socket, sys
port = int(sys.argv[1])
with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    split = 0
    for i in range(20):
        client.sendall(b"GET /k?i=%d HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n" % i)
        body = b"/k?i=%d" % i
        first = rest = client.recv(65536)
        while not rest.endswith(body):  # the rest, if the answer came in two reads
            rest += client.recv(65536)
        split += not first.endswith(body)
print(split)
"""


async def _echo_slowly(scope: dict, receive: object, send: object) -> None:
    """:func:`_echo` with a pause between head and body: without the cork the head would
    leave alone every time."""
    body = scope["path"].encode() + b"?" + scope["query_string"]
    headers = [(b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})  # type: ignore[operator]
    await asyncio.sleep(0.01)
    await send({"type": "http.response.body", "body": body})  # type: ignore[operator]


def test_each_response_leaves_as_one_segment_head_and_body_together() -> None:
    """uvicorn writes a response's head and body separately; the corked socket sends them
    together, so the client's first read holds the whole answer (one wake-up, not two).
    The client runs in a process of its own (in this one it would wait for the GIL)."""
    server = ThreadedHttpServer(_echo_slowly, "127.0.0.1", 0, "test-http-cork")
    try:
        reader = subprocess.run(
            [sys.executable, "-c", _READER, str(server.port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        split = int(reader.stdout)
        assert split == 0, f"{split} of 20 answers arrived in more than one read"
    finally:
        server.close()
