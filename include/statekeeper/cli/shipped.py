"""``statekeeper generate`` and ``statekeeper demo``: tools of the shipped apps in
./spark_apps (imported from the current directory, a checkout)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from statekeeper.cli.common import (
    subcommand,
)
from statekeeper.errors import StatekeeperError


def _shipped_app_module(app: str, module: str) -> Any:
    """Import ``spark_apps.<app>.<module>`` from the current directory (a checkout)."""
    import importlib

    folder = app.replace("-", "_")
    root = Path.cwd()
    if not (root / "spark_apps" / folder / f"{module}.py").is_file():
        raise StatekeeperError(
            f"no spark_apps/{folder}/{module}.py under {root}: run this from the statekeeper "
            "repository, where the shipped apps live"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # the app's modules import each other as spark_apps.*
    return importlib.import_module(f"spark_apps.{folder}.{module}")


def add_generate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    generate = subcommand(
        commands,
        "generate",
        "produce seed-deterministic input for a shipped app (spark_apps/APP/generator.py)",
        _cmd_generate,
    )
    generate.add_argument(
        "app", metavar="APP", help="word-count or patient-monitoring (a folder of spark_apps/)"
    )
    generate.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        metavar="...",
        help="the generator's options (`statekeeper generate APP --help` lists them)",
    )


def _cmd_generate(args: argparse.Namespace) -> int:
    options = list(args.options) + (["--json"] if args.json else [])
    return int(_shipped_app_module(args.app, "generator").main(options))


def add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subcommand(
        commands,
        "demo",
        "patient_monitoring on Spark end to end: kill -9, lost task state, exact recovery "
        "(spark_apps/patient_monitoring/demo.py)",
        _cmd_demo,
    )
    # Passed on to the demo, which checks them and knows the defaults.
    demo.add_argument("--patients", help="patients to simulate (default: 40)")
    demo.add_argument("--minutes", help="event-time span, minutes (default: 30)")
    demo.add_argument("--seed", help="random seed (default: 7)")


def _cmd_demo(args: argparse.Namespace) -> int:
    options = [
        f"--{name}={value}"
        for name in ("patients", "minutes", "seed")
        if (value := getattr(args, name)) is not None
    ]
    return int(_shipped_app_module("patient_monitoring", "demo").main(options))
