"""HTTP helpers for tests that start an Airflow api-server of their own: GET with a token or
the UI's cookie, a token from the simple auth manager, waiting for health, stopping it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def get(url: str, token: str | None = None, cookie: str | None = None) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET; an error status is returned, not raised."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if cookie is not None:
        request.add_header("Cookie", f"_token={cookie}")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def token(base_url: str, user: str, password: str) -> str:
    """A JWT from the api-server's ``/auth/token`` (simple auth manager)."""
    body = json.dumps({"username": user, "password": password}).encode()
    request = urllib.request.Request(
        f"{base_url}/auth/token", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return str(json.load(resp)["access_token"])


def wait_healthy(base_url: str, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Until ``/api/v2/monitor/health`` answers 200; fails with the log's tail when the
    server exits or the time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"api-server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            if get(f"{base_url}/api/v2/monitor/health")[0] == 200:
                return
        time.sleep(0.25)
    raise AssertionError(
        f"api-server not healthy after {timeout_s:.0f}s:\n{log.read_text()[-3000:]}"
    )


def stop_group(proc: subprocess.Popen, timeout_s: float) -> None:
    """SIGTERM the process group this test started (its leader's pid), SIGKILL if it stays."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
