"""Integration fixtures: an S3 API on loopback (moto server) for snapshot storage tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass
class MotoS3:
    """A running moto S3 server; ``options`` are the s3fs storage options reaching it."""

    endpoint_url: str
    options: dict[str, Any]

    def make_bucket(self, name: str) -> None:
        import boto3

        # boto3, not s3fs.mkdir: s3fs sends a LocationConstraint, which us-east-1 rejects.
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """A moto S3 server on 127.0.0.1 (free port) with dummy credentials, for the session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    try:
        yield MotoS3(endpoint, options)
    finally:
        server.stop()


@pytest.fixture
def moto_s3_checking_credentials() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 that checks credentials (it knows none, so every key is
    wrong); yields its endpoint URL. A subprocess: moto reads that switch at import."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        yield endpoint
    finally:
        server.kill()
        server.wait()
