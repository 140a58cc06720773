"""``statekeeper platform up|down|status``: the embedded broker + Airflow (make up)."""

from __future__ import annotations

import argparse
from pathlib import Path

from statekeeper.cli.common import (
    EXIT_ERROR,
    EXIT_NOT_RUNNING,
    EXIT_OK,
    PORT,
    emit,
    run_dir_option,
    seconds,
    subcommand,
    timeout_option,
)


def add_platform(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    platform = subcommand(commands, "platform", "the embedded broker + Airflow on 127.0.0.1")
    actions = platform.add_subparsers(title="actions", metavar="ACTION")
    for name, text, handler in (
        (
            "up",
            "start what is not running, unpause the DAGs, launch the apps and name each one's "
            "state (exit code 3 when an app is FAILED or down)",
            _cmd_platform_up,
        ),
        ("down", "stop every process the platform started", _cmd_platform_down),
        (
            "status",
            "what runs: services and apps (exit code 3 when a service or an app is down, or an "
            "app FAILED)",
            _cmd_platform_status,
        ),
    ):
        sub = subcommand(actions, name, text, handler)
        run_dir_option(
            sub,
            Path("var/platform"),
            "the platform's folder: pid files, logs, Airflow home (var/platform)",
            "--root",
        )
        if name == "up":
            sub.add_argument(
                "--airflow-port", type=PORT, help="1-65535 (default: last used, else 8080)"
            )
            sub.add_argument(
                "--broker-port", type=PORT, help="1-65535 (default: last used, else 9092)"
            )
            timeout_option(sub, 180.0, "seconds to come up")
            sub.add_argument(
                "--specs-dir", type=Path, help="app specs the DAGs act on (default: spark_apps/)"
            )
            sub.add_argument(
                "--apps-timeout-s",
                type=seconds,
                default=180.0,
                help="seconds to wait for every app to run (or be FAILED/stopped); 0: no wait "
                "(180)",
            )
            sub.add_argument(
                "--apps-timeout", dest="apps_timeout_s", type=seconds, help=argparse.SUPPRESS
            )


def _cmd_platform_up(args: argparse.Namespace) -> int:
    from statekeeper.platform import PlatformConfig, up
    from statekeeper.platform.report import up_text

    config = PlatformConfig.load(
        args.run_dir,
        airflow_port=args.airflow_port,
        broker_port=args.broker_port,
        specs_dir=args.specs_dir,
    )
    say = (lambda _: None) if args.json else (lambda line: print(line, flush=True))
    result = up(config, timeout_s=args.timeout_s, apps_timeout_s=args.apps_timeout_s, say=say)
    emit(args, result, up_text(result))
    return EXIT_NOT_RUNNING if result["apps_bad"] else EXIT_OK


def _cmd_platform_down(args: argparse.Namespace) -> int:
    from statekeeper.platform import PlatformConfig, down

    say = (lambda _: None) if args.json else (lambda line: print(line, flush=True))
    result = down(PlatformConfig.load(args.run_dir), say=say)
    left = result["left"]
    emit(args, result, f"platform down{'; STILL RUNNING: ' + str(left) if left else ''}")
    return EXIT_ERROR if left else EXIT_OK


def _cmd_platform_status(args: argparse.Namespace) -> int:
    from statekeeper.platform import PlatformConfig, status
    from statekeeper.platform.report import status_text

    result = status(PlatformConfig.load(args.run_dir))
    emit(args, result, status_text(result))
    return EXIT_OK if result["running"] and not result["apps_bad"] else EXIT_NOT_RUNNING
