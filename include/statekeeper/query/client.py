"""A small client of the query server (:mod:`statekeeper.query.server`): one persistent
HTTP connection per host, JSON in and out, and a ``421`` followed once to the active host
the metadata names, as a Kafka Streams app re-routes a query after a rebalance."""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from statekeeper.errors import StatekeeperError


class QueryFailedError(StatekeeperError):
    """The server answered with an error status (``status``; ``body`` holds its JSON)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"query failed with HTTP {status}: {body.get('error', body)}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class QueryAnswer:
    """A server's answer: the HTTP status, its JSON and the URL that gave it."""

    status: int
    body: dict[str, Any]
    url: str


class QueryClient:
    """Talks to one executor's query server (``base_url``: ``http://host:port``); follows a
    421 to the active host once. Thread-safe: each thread gets its own connections."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._local = threading.local()

    # -- raw requests ----------------------------------------------------------------------

    def request(
        self, path: str, params: dict[str, Any] | None = None, *, base_url: str | None = None
    ) -> QueryAnswer:
        """One GET; any status comes back (no redirect is followed)."""
        base = (base_url or self.base_url).rstrip("/")
        query = urlencode({k: _param(v) for k, v in (params or {}).items() if v is not None})
        target = path + (f"?{query}" if query else "")
        for attempt in (1, 2):
            conn = self._connection(base)
            try:
                conn.request("GET", target)
                response = conn.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException, OSError):
                self._drop(base)
                if attempt == 2:
                    raise
                continue  # a kept-alive connection the server closed: once more, fresh
            try:
                body = json.loads(data) if data else {}
            except ValueError:
                body = {"error": data[:200].decode(errors="replace")}
            return QueryAnswer(response.status, body, base)
        raise AssertionError("unreachable")

    def _connection(self, base: str) -> http.client.HTTPConnection:
        pool: dict[str, http.client.HTTPConnection] = self._local.__dict__.setdefault("pool", {})
        conn = pool.get(base)
        if conn is None:
            split = urlsplit(base)
            conn = http.client.HTTPConnection(split.hostname, split.port, timeout=self.timeout_s)
            pool[base] = conn
        return conn

    def _drop(self, base: str) -> None:
        pool = self._local.__dict__.get("pool", {})
        conn = pool.pop(base, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close this thread's connections."""
        for conn in self._local.__dict__.pop("pool", {}).values():
            conn.close()

    # -- queries ---------------------------------------------------------------------------

    def _store_path(self, store: str, route: str) -> str:
        return f"/stores/{quote(store, safe='')}/{route}"

    def _follow(self, path: str, params: dict[str, Any]) -> QueryAnswer:
        answer = self.request(path, params)
        if answer.status == 421:
            active = (answer.body.get("metadata") or {}).get("active") or {}
            url = active.get("query_url")
            if url and url.rstrip("/") != answer.url:
                answer = self.request(path, params, base_url=url)
        return answer

    def get_answer(
        self, store: str, key: Any = None, *, key_b64: str | None = None, fresh: bool = False
    ) -> QueryAnswer:
        """The full answer to a point get (any status), after following one 421."""
        params = {"key": key, "key_b64": key_b64, "fresh": "true" if fresh else None}
        return self._follow(self._store_path(store, "get"), params)

    def get(
        self, store: str, key: Any = None, *, key_b64: str | None = None, fresh: bool = False
    ) -> dict[str, Any]:
        """Point get: the answer's JSON (``found``, ``value``, ``source``, ``lag``, ...);
        raises :class:`QueryFailedError` for an error status."""
        return _ok(self.get_answer(store, key, key_b64=key_b64, fresh=fresh))

    def window(
        self, store: str, key: Any, from_ms: int = 0, to_ms: int | None = None, **params: Any
    ) -> dict[str, Any]:
        return _ok(
            self._follow(
                self._store_path(store, "window"),
                {"key": key, "from_ms": from_ms, "to_ms": to_ms, **params},
            )
        )

    def metadata(self, store: str, key: Any = None) -> dict[str, Any]:
        return _ok(self.request(f"/metadata/{quote(store, safe='')}", {"key": key}))

    def scan(self, store: str, route: str, **params: Any) -> list[dict[str, Any]]:
        """Every entry of a ``range`` or ``prefix`` query on this host, page after page."""
        entries: list[dict[str, Any]] = []
        token = None
        while True:
            body = _ok(
                self.request(self._store_path(store, route), {**params, "page_token": token})
            )
            entries += body["entries"]
            token = body.get("next_page_token")
            if not token:
                return entries


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _ok(answer: QueryAnswer) -> dict[str, Any]:
    if answer.status != 200:
        raise QueryFailedError(answer.status, answer.body)
    return answer.body
