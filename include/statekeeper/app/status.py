"""The app's status: one JSON document served on 127.0.0.1 and written to a file.

Supervisors (Airflow sensors, ``statekeeper app status``) read either; the document has
the app state, per-task source lag, restore progress and store sizes, the last batch and
throughput. The same server answers ``GET /metrics`` with those figures in Prometheus' text
format (:mod:`statekeeper.app.metrics_exposition`), for scrapers and the usual alerting.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text

log = logging.getLogger("statekeeper.status")


class StatusBoard:
    """Thread-safe holder of the status document; ``update`` merges top-level keys."""

    def __init__(self, application_id: str, file: Path | None = None) -> None:
        self._lock = threading.Lock()
        # The batch thread and the supervisor both write the file: one at a time, or one's
        # rename finds the other's temporary file already gone.
        self._write_lock = threading.Lock()
        self._doc: dict[str, Any] = {
            "application_id": application_id,
            "pid": os.getpid(),
            "started_at": time.time(),
            "tasks": {},
        }
        self.file = file
        self._providers: list[Callable[[], dict[str, Any]]] = []

    def add_provider(self, provider: Callable[[], dict[str, Any]]) -> None:
        """A function whose result is merged into every snapshot (live values)."""
        self._providers.append(provider)

    def update(self, **fields: Any) -> None:
        """Merge ``fields``; a new ``state`` also sets ``state_since`` (epoch seconds), so a
        supervisor can tell how long the app has been in it (e.g. hung in REBALANCING)."""
        with self._lock:
            now = time.time()
            if "state" in fields and fields["state"] != self._doc.get("state"):
                self._doc["state_since"] = now
            self._doc.update(fields)
            self._doc["updated_at"] = now
        self.write_file()

    def update_task(self, task_id: str, **fields: Any) -> None:
        with self._lock:
            self._doc["tasks"].setdefault(task_id, {}).update(fields)
            self._doc["updated_at"] = time.time()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            doc = json.loads(json.dumps(self._doc, default=str))
        for provider in self._providers:
            try:
                doc.update(provider())
            except Exception:  # a live value must never break the status page
                log.exception("status provider failed")
        return doc

    def write_file(self) -> None:
        """Atomically replace the status file (write + rename), if one is configured."""
        if self.file is None:
            return
        text = json.dumps(self.snapshot(), indent=2, sort_keys=True, default=str)
        with self._write_lock:
            replace_text(self.file, text)


#: A POST action: the request's JSON body (``{}`` when empty) -> (HTTP code, JSON answer).
PostAction = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]
#: ``GET /metrics``: () -> (body, content type), rendered at each scrape.
MetricsRenderer = Callable[[], tuple[bytes, str]]


class StatusServer:
    """``GET /status`` (the document) and ``GET /health`` (200 while running) on a thread;
    ``GET /metrics`` (Prometheus text format) when given ``metrics``; ``actions`` adds
    ``POST <path>`` operations (``POST /snapshot``)."""

    def __init__(
        self,
        board: StatusBoard,
        host: str = "127.0.0.1",
        port: int = 0,
        actions: dict[str, PostAction] | None = None,
        metrics: MetricsRenderer | None = None,
    ) -> None:
        board_ref = board
        posts = dict(actions or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                if self.path.rstrip("/") in ("", "/status"):
                    self._send(200, board_ref.snapshot())
                elif self.path == "/health":
                    doc = board_ref.snapshot()
                    healthy = doc.get("state") not in ("ERROR", "NOT_RUNNING")
                    self._send(200 if healthy else 503, {"state": doc.get("state")})
                elif self.path.split("?")[0] == "/metrics" and metrics is not None:
                    body, content_type = metrics()
                    self.send_response(200)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self._send(404, {"error": f"no such path {self.path}; try /status"})

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                action = posts.get(self.path.rstrip("/"))
                if action is None:
                    self._send(404, {"error": f"no POST {self.path}; paths: {sorted(posts)}"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                except ValueError as exc:
                    self._send(400, {"error": f"the request body is not JSON: {exc}"})
                    return
                try:
                    code, answer = action(body if isinstance(body, dict) else {})
                except Exception as exc:  # answer, and keep serving
                    log.exception("POST %s failed", self.path)
                    code, answer = 500, {"error": f"{type(exc).__name__}: {exc}"}
                self._send(code, answer)

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body, sort_keys=True, default=str).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("status %s", fmt % args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="statekeeper-status", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/status"

    def start(self) -> StatusServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
