"""Plain-text summaries of the platform's ``up`` and ``status`` results for the terminal."""

from __future__ import annotations

import time
from typing import Any


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%H:%M:%S", time.gmtime(float(at)))


def apps_text(apps: list[dict[str, Any]]) -> list[str]:
    """One line per app (name, condition, pid, uptime, restarts in the window and the last
    one's reason), then what to do about each FAILED one."""
    if not apps:
        return ["apps: none (no app spec in the specs folder)"]
    width = max(14, *(len(a["application_id"]) for a in apps))
    lines = [
        f"{'app':<{width}} {'condition':<12} {'pid':>8} {'uptime':>8} {'restarts':>9}  last restart"
    ]
    for app in apps:
        limit = app.get("max_restarts")
        restarts = f"{app['restarts_in_window']}/{limit if limit is not None else '-'}"
        last = app.get("last_restart") or {}
        reason = f"{_when(last.get('at'))} UTC {last.get('reason')}" if last else "-"
        lines.append(
            f"{app['application_id']:<{width}} {app['condition']:<12} {app.get('pid') or '-':>8} "
            f"{_uptime(app.get('uptime_s')):>8} {restarts:>9}  {reason}"
        )
    for app in apps:
        failed = app.get("failed")
        if failed:
            lines.append(
                f"{app['application_id']} FAILED at {_when(failed.get('at'))} UTC: "
                f"{failed.get('reasons')} ({failed.get('explanation')}). {failed.get('remedy')}"
            )
        elif app.get("bad"):
            lines.append(
                f"{app['application_id']} is {app['condition']}: the supervising DAG "
                "(statekeeper_apps) relaunches it; see its log under the app's folder"
            )
    return lines


def status_text(status: dict[str, Any]) -> str:
    """One line per service (name, state, pid, port, uptime, log), one per app (name,
    condition, pid, uptime, restarts), then the verdict and UI."""
    lines = [f"{'service':<14} {'state':<8} {'pid':>8} {'port':>6} {'uptime':>8}  log"]
    for row in status["services"]:
        lines.append(
            f"{row['service']:<14} {'running' if row['running'] else 'down':<8} "
            f"{row['pid'] or '-':>8} {row['port'] or '-':>6} {_uptime(row['uptime_s']):>8}  "
            f"{row['log']}"
        )
    lines += apps_text(status.get("apps") or [])
    apps = status.get("spark_apps") or []
    lines.append(f"spark-submit apps: {len(apps)}{' (pids ' + str(apps) + ')' if apps else ''}")
    bad = status.get("apps_bad") or []
    if not status["running"]:
        state = "DOWN (make up starts what is missing)"
    elif bad:
        state = f"up, but apps need an operator: {', '.join(bad)}"
    else:
        state = "up"
    lines.append(f"platform {state}: UI {status['ui']}, broker {status['bootstrap_servers']}")
    lines.append(f"login: {status['username']}, password in {status['password_file']}")
    return "\n".join(lines)


def up_text(result: dict[str, Any]) -> str:
    """Where the UI is, the login, and how long start-up took."""
    lines = [
        f"platform {'up' if not result.get('apps_bad') else 'UP WITH APPS DOWN'} in "
        f"{result['seconds']:.1f} s (root {result['root']})",
        f"  Airflow UI   {result['ui']}",
        f"  State stores {result['state_stores']}",
        f"  login        {result['username']} / {result['password']}",
        f"  broker       {result['bootstrap_servers']}",
        f"  DAGs         {', '.join(result['dags'])}",
    ]
    lines += [f"  note: {note}" for note in result["notes"]]
    lines += [f"  {line}" for line in apps_text(result.get("apps") or [])]
    bad = result.get("apps_bad") or []
    if bad:
        lines.append(f"  NOT ALL APPS RUN: {', '.join(bad)} (see above; make status)")
    lines.append("  make status  shows what runs; make down stops everything")
    return "\n".join(lines)
