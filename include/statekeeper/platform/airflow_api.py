"""The few Airflow REST calls the platform makes: health, log in, list, unpause and trigger
DAGs (``/api/v2``, a Bearer token from ``POST /auth/token``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from statekeeper.errors import StatekeeperError


class AirflowApiError(StatekeeperError):
    """The Airflow api-server refused or failed a request."""


def _call(
    url: str, method: str = "GET", body: Any = None, token: str | None = None, timeout: float = 5
) -> Any:
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise AirflowApiError(f"{method} {url}: HTTP {exc.code} {detail}") from exc
    return json.loads(raw) if raw else None


def health(base_url: str) -> dict[str, Any] | None:
    """``/api/v2/monitor/health``, or None while the api-server does not answer."""
    try:
        return dict(_call(f"{base_url}/api/v2/monitor/health", timeout=3))
    except (OSError, AirflowApiError, ValueError):
        return None


def unhealthy_components(report: dict[str, Any] | None) -> list[str]:
    """Components the health report does not call healthy (all of them without a report)."""
    names = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    if report is None:
        return ["api-server", *names]
    return [n for n in names if (report.get(n) or {}).get("status") != "healthy"]


class AirflowClient:
    """A logged-in client of one api-server."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base_url = base_url
        reply = _call(
            f"{base_url}/auth/token",
            "POST",
            {"username": username, "password": password},
        )
        self._token = str(reply["access_token"])

    def _api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        return _call(f"{self.base_url}/api/v2{path}", method, body, self._token, timeout=15)

    def dags(self) -> dict[str, dict[str, Any]]:
        """Registered DAGs by id."""
        reply = self._api("/dags?limit=1000")
        return {d["dag_id"]: d for d in reply["dags"]}

    def import_errors(self) -> list[dict[str, Any]]:
        """DAG files that failed to import: filename and stack trace."""
        return list(self._api("/importErrors?limit=1000")["import_errors"])

    def unpause(self, dag_id: str) -> None:
        """Unpause one DAG."""
        self._api(f"/dags/{dag_id}", "PATCH", {"is_paused": False})

    def active_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Queued or running runs of a DAG."""
        reply = self._api(f"/dags/{dag_id}/dagRuns?state=queued&state=running&limit=100")
        return list(reply["dag_runs"])

    def run_count(self, dag_id: str) -> int:
        """How many runs the DAG has, in any state."""
        return int(self._api(f"/dags/{dag_id}/dagRuns?limit=1")["total_entries"])

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Trigger a run now; returns its run id."""
        body: dict[str, Any] = {"logical_date": None}
        if conf:
            body["conf"] = conf
        reply = self._api(f"/dags/{dag_id}/dagRuns", "POST", body)
        return str(reply["dag_run_id"])
