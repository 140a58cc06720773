"""Plain-text summaries of the platform's ``up`` and ``status`` results for the terminal."""

from __future__ import annotations

from typing import Any


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def status_text(status: dict[str, Any]) -> str:
    """One line per service (name, state, pid, port, uptime, log), then the apps and UI."""
    lines = [f"{'service':<14} {'state':<8} {'pid':>8} {'port':>6} {'uptime':>8}  log"]
    for row in status["services"]:
        lines.append(
            f"{row['service']:<14} {'running' if row['running'] else 'down':<8} "
            f"{row['pid'] or '-':>8} {row['port'] or '-':>6} {_uptime(row['uptime_s']):>8}  "
            f"{row['log']}"
        )
    apps = status.get("spark_apps") or []
    lines.append(f"spark-submit apps: {len(apps)}{' (pids ' + str(apps) + ')' if apps else ''}")
    state = "up" if status["running"] else "DOWN (make up starts what is missing)"
    lines.append(f"platform {state}: UI {status['ui']}, broker {status['bootstrap_servers']}")
    lines.append(f"login: {status['username']}, password in {status['password_file']}")
    return "\n".join(lines)


def up_text(result: dict[str, Any]) -> str:
    """Where the UI is, the login, and how long start-up took."""
    lines = [
        f"platform up in {result['seconds']:.1f} s (root {result['root']})",
        f"  Airflow UI   {result['ui']}",
        f"  State stores {result['state_stores']}",
        f"  login        {result['username']} / {result['password']}",
        f"  broker       {result['bootstrap_servers']}",
        f"  DAGs         {', '.join(result['dags'])}",
    ]
    lines += [f"  note: {note}" for note in result["notes"]]
    lines.append("  make status  shows what runs; make down stops everything")
    return "\n".join(lines)
