"""``statekeeper app run|status``: run an app from its spec, read its status."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from statekeeper.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    app_options,
    app_target,
    emit,
    subcommand,
)
from statekeeper.errors import StatekeeperError


def add_app(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    app = subcommand(commands, "app", "run stateful apps on Spark and read their status")
    sub = app.add_subparsers(title="app commands", metavar="ACTION")
    run = subcommand(sub, "run", "run an app from its spec on Spark (blocks)", _cmd_app_run)
    app_options(run, required=False)
    run.add_argument("spec_file", nargs="?", metavar="SPEC", help=argparse.SUPPRESS)
    run.add_argument("--spec", dest="spec_option", help=argparse.SUPPRESS)  # the old name
    run.add_argument(
        "--stop-when-idle",
        action="store_true",
        help="stop gracefully once all input is processed (batch-style runs, tests)",
    )
    status = subcommand(
        sub,
        "status",
        "print an app's status: from its running status endpoint, else its status file "
        "(exit code 2 when the app is in ERROR)",
        _cmd_app_status,
    )
    app_options(status, required=False)
    status.add_argument(
        "target",
        nargs="?",
        metavar="STATUS",
        help="instead of --app: a status file or an http://127.0.0.1:PORT/status URL",
    )


def _one_app(args: argparse.Namespace, *given: str | None) -> None:
    """Set ``args.app`` from ``--app`` or the one other form of naming it in ``given``."""
    from statekeeper.errors import ConfigError

    named = [value for value in (args.app, *given) if value]
    if len(named) > 1:
        raise ConfigError(f"name the app once (--app), got {named}")
    if not named:
        raise ConfigError("give the app: --app SPEC (a spec file or an application id)")
    args.app = named[0]


def _cmd_app_run(args: argparse.Namespace) -> int:
    from statekeeper.app.launcher import configure_logging, run_app

    _one_app(args, args.spec_file, args.spec_option)
    settings, spec = app_target(args, need_spec="app run")  # every check before Spark starts
    configure_logging()
    status = run_app(spec, settings=settings, stop_when_idle=args.stop_when_idle)
    emit(args, status, f"{status['application_id']}: {status['state']} {status.get('totals')}")
    return EXIT_OK


def _cmd_app_status(args: argparse.Namespace) -> int:
    import urllib.request

    from statekeeper.errors import ConfigError

    target: str | None = args.target
    if target and (
        target.startswith(("http://", "https://"))
        or (Path(target).is_file() and Path(target).suffix not in (".yaml", ".yml", ".toml"))
    ):
        if args.app:
            raise ConfigError(f"give --app or a status file/URL, not both ({target})")
        source = target
    else:
        from statekeeper.ops.snapshot_app import running_app_status_url

        _one_app(args, target)
        settings, _ = app_target(args, need_spec="app status")
        source = running_app_status_url(settings) or str(settings.status_path())
        if not source.startswith("http") and not Path(source).is_file():
            raise ConfigError(
                f"app {settings.application_id!r} has no status file at {source}: it has "
                "not run with this state_dir (set state_dir or status_file to where it ran)"
            )
    try:
        if source.startswith(("http://", "https://")):
            with urllib.request.urlopen(source, timeout=10) as resp:
                status = json.load(resp)
        else:
            status = json.loads(Path(source).read_text())
    except (OSError, ValueError) as exc:
        raise StatekeeperError(f"cannot read app status from {source}: {exc}") from exc
    if not isinstance(status, dict):
        raise StatekeeperError(f"{source} is not an app status document")
    last = status.get("last_batch") or {}
    text = (
        f"{status.get('application_id')}: {status.get('state')}; last batch "
        f"{last.get('batch_id', '-')} ({last.get('records', 0)} records); "
        f"tasks {len(status.get('tasks', {}))}"
    )
    emit(args, status, text)
    return EXIT_OK if status.get("state") not in ("ERROR",) else EXIT_ERROR
