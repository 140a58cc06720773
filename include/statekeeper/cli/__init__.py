"""The ``statekeeper`` command.

One module per command group (``app``, ``snapshot``, ``stores``, ...), each with an
``add_<group>`` function that registers its subcommands in :func:`build_parser` and one
``_cmd_*`` function per subcommand, returning an exit code; what they share is in
``common``. Heavy modules are imported inside the functions so ``statekeeper --help`` and
Airflow tasks that shell out stay fast. Errors from :mod:`statekeeper.errors` and bad
arguments print one line to stderr and exit 2 (with ``--json``, also one JSON object
``{"error": ..., "code": 2}`` on stdout); every subcommand takes ``--json`` for
machine-readable output.

Every command that acts on an app takes the same options: ``--app SPEC`` (a spec file, or
an application id found in ``$STATEKEEPER_SPECS_DIR``), ``--set NAME=VALUE`` (repeatable)
and ``--bootstrap`` (the ``bootstrap_servers`` setting); see
:func:`statekeeper.cli.common.app_options`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from statekeeper import __version__
from statekeeper.cli.app import add_app
from statekeeper.cli.audit import EXIT_AUDIT_FAILED, add_audit
from statekeeper.cli.backfill import add_backfill
from statekeeper.cli.broker import add_broker
from statekeeper.cli.cluster import add_cluster
from statekeeper.cli.common import (
    EXIT_ERROR,
    EXIT_NOT_RUNNING,
    EXIT_OK,
    Handler,
    Parser,
    UsageError,
)
from statekeeper.cli.drill import add_drill
from statekeeper.cli.generate import add_generate
from statekeeper.cli.platform import add_platform
from statekeeper.cli.restore import add_restore
from statekeeper.cli.snapshot import add_snapshot
from statekeeper.cli.spec import add_spec
from statekeeper.cli.stores import add_stores
from statekeeper.cli.upgrade import EXIT_INCOMPATIBLE, add_upgrade
from statekeeper.errors import StatekeeperError

__all__ = [
    "EXIT_AUDIT_FAILED",
    "EXIT_ERROR",
    "EXIT_INCOMPATIBLE",
    "EXIT_NOT_RUNNING",
    "EXIT_OK",
    "UsageError",
    "build_parser",
    "main",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``statekeeper`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            if not getattr(args, "passes_on", False):
                parser.error(f"unrecognized arguments: {' '.join(unknown)}")
            args.options = unknown  # a command that passes them on (generate: to the generator)
    except UsageError as exc:
        return _fail(str(exc), EXIT_ERROR, as_json="--json" in argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        # A command group given without its subcommand (e.g. `statekeeper broker`).
        args.parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return handler(args)
    except (StatekeeperError, UsageError) as exc:
        return _fail(str(exc), EXIT_ERROR, as_json=getattr(args, "json", False))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `statekeeper ... | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _fail(message: str, code: int, *, as_json: bool) -> int:
    """Report an error as one line, ``statekeeper: error: ...`` on stderr; with ``--json``
    also as one JSON object ``{"error": ..., "code": ...}`` on stdout. Returns ``code``."""
    line = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    if as_json:
        print(json.dumps({"error": line, "code": code}), flush=True)
    print(f"statekeeper: error: {line}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser; a command group registers itself with its ``add_<group>``."""
    parser = Parser(
        prog="statekeeper",
        description="Kafka-Streams-grade state stores for PySpark, operated from Airflow.",
    )
    parser.add_argument("--version", action="version", version=f"statekeeper {__version__}")
    parser.set_defaults(parser=parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    add_broker(commands)
    add_app(commands)
    add_generate(commands)
    add_audit(commands)
    add_stores(commands)
    add_snapshot(commands)
    add_restore(commands)
    add_drill(commands)
    add_platform(commands)
    add_cluster(commands)
    add_spec(commands)
    add_upgrade(commands)
    add_backfill(commands)
    return parser
