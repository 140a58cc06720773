"""What every command module of the ``statekeeper`` command shares: exit codes, the one-line
argument parser, the options every app command takes (``--app``, ``--set``,
``--bootstrap``), argument types, and how ``--app`` becomes settings and a spec."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

# The same name as statekeeper.app.spec_discovery.SPECS_DIR_ENV, not imported: that module
# imports yaml (~0.2 s), and --help must start fast.
SPECS_DIR_ENV = "STATEKEEPER_SPECS_DIR"

EXIT_OK = 0
EXIT_ERROR = 2  # a StatekeeperError: bad config, broker unreachable, ...
EXIT_NOT_RUNNING = 3  # `broker status` when no broker runs (LSB convention)

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A bad command line (argparse's errors, as one line)."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), raised to :func:`main`."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        command = self.prog.removeprefix("statekeeper").strip()
        raise UsageError(f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)")


def subcommand(
    group: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    handler: Handler | None = None,
) -> argparse.ArgumentParser:
    sub = group.add_parser(name, help=help_text, description=help_text)
    sub.set_defaults(parser=sub)
    if handler is not None:
        sub.set_defaults(handler=handler)
        sub.add_argument("--json", action="store_true", help="print machine-readable JSON")
    return sub


def emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    print(json.dumps(payload, sort_keys=True, default=str) if args.json else text)


def int_in(low: int, high: int | None = None, *, zero: str | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``low..high`` (``zero``: what 0 means, when allowed)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value == 0 and zero is not None:
            return value
        if value < low or (high is not None and value > high):
            span = f"{low}-{high}" if high is not None else f">= {low}"
            extra = f" (0: {zero})" if zero is not None else ""
            raise argparse.ArgumentTypeError(f"must be {span}{extra}, got {value}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse type: a duration in seconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    return value


PORT = int_in(1, 65535)
PORT_OR_FREE = int_in(1, 65535, zero="a free port")


def timeout_option(parser: argparse.ArgumentParser, default: float, help_text: str) -> None:
    """``--timeout-s`` (and ``--timeout``, its old name, hidden)."""
    parser.add_argument(
        "--timeout-s", type=seconds, default=default, help=f"{help_text} ({default:g})"
    )
    parser.add_argument("--timeout", dest="timeout_s", type=seconds, help=argparse.SUPPRESS)


def run_dir_option(
    parser: argparse.ArgumentParser, default: Path | None, help_text: str, *old: str
) -> None:
    """``--run-dir``: where a background service keeps pid files, logs and its state file
    (its old names ``old`` stay as hidden aliases)."""
    parser.add_argument("--run-dir", type=Path, default=default, help=help_text)
    for name in old:
        parser.add_argument(name, dest="run_dir", type=Path, help=argparse.SUPPRESS)


def app_options(
    parser: argparse.ArgumentParser, *, required: bool = True, app_help: str | None = None
) -> None:
    """``--app``, ``--set`` and ``--bootstrap``: what every command acting on an app takes."""
    parser.add_argument(
        "--app",
        required=required,
        metavar="SPEC",
        help=app_help
        or "the app: its spec file (.yaml/.toml) or its application id, found in "
        f"${SPECS_DIR_ENV} (default: the repo's spark_apps/)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a setting (repeatable; values parsed as JSON when they can be), e.g. "
        "--set max_records_per_batch=50000; wins over the spec and STATEKEEPER_* env vars",
    )
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT[,...]",
        help="Kafka bootstrap servers (overrides the bootstrap_servers setting)",
    )


def command_line_overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings the command line overrides, and the option each came from."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for pair in getattr(args, "set", None) or []:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--set expects NAME=VALUE, got {pair!r}")
        try:
            values[name] = json.loads(text)
        except ValueError:
            values[name] = text
        sources[name] = f"from --set {pair}"
    flags = {
        "bootstrap_servers": ("bootstrap", "--bootstrap"),
        "state_dir": ("state_dir", "--state-dir"),
        "snapshot_url": ("url", "--url"),
    }
    for field, (dest, flag) in flags.items():
        value = getattr(args, dest, None)
        if value is not None:
            values[field] = Path(value) if field == "state_dir" else value
            sources[field] = f"from {flag} {value}"
    return values, sources


def app_target(args: argparse.Namespace, need_spec: str | None = None) -> tuple[Any, Any]:
    """(settings, app spec) of ``--app``: a spec file, or an application id whose spec is in
    the specs folder; without a spec (None) only if the command (``need_spec`` names it)
    can act on a bare application id. Settings: defaults < spec < env < the command line."""
    from statekeeper.app.spec import load_app_spec
    from statekeeper.app.spec_discovery import find_spec, specs_dir
    from statekeeper.errors import ConfigError
    from statekeeper.settings import settings_from

    values, sources = command_line_overrides(args)

    def source_of(field: str) -> tuple[str, str] | None:
        return (field, sources[field]) if field in sources else None

    path = find_spec(args.app)
    if path is None:
        if need_spec is not None:
            raise ConfigError(
                f"{need_spec} needs the app spec: {args.app!r} is not a spec file, and no "
                f"spec in {specs_dir()} (${SPECS_DIR_ENV}) has that application_id"
            )
        return settings_from({"application_id": args.app, **values}, source_of), None
    spec = load_app_spec(path)
    return spec.settings_with(values, source_of), spec


def check_task_and_store(args: argparse.Namespace, topology: Any) -> None:
    """``--task``/``--store`` name tasks and stores of the topology (before any broker)."""
    from statekeeper.ops.restore import check_selection

    check_selection(topology, getattr(args, "task", None), getattr(args, "store", None))


def snapshot_target(args: argparse.Namespace, need_spec: str | None = None) -> tuple[Any, Any]:
    """(settings, app spec or None) for ``--app``: a spec file, or an application id (its
    spec when the specs folder has it) unless the command named by ``need_spec`` needs the
    spec; ``--task``/``--store`` are checked against the spec's topology."""
    settings, spec = app_target(args, need_spec=need_spec)
    if spec is not None and (getattr(args, "task", None) or getattr(args, "store", None)):
        check_task_and_store(args, spec.build_topology())
    return settings, spec


def snapshot_storage(settings: Any, create: bool = False) -> Any:
    from statekeeper.snapshots import storage_for

    return storage_for(settings, create=create)


def existing_snapshot_storage(
    args: argparse.Namespace, settings: Any, empty: dict[str, Any]
) -> Any | None:
    """The app's snapshot storage, or None after saying "no snapshots yet" (an empty catalog
    is no error: a new app has none until its first snapshot interval)."""
    from statekeeper.snapshots.manifest import NoSnapshotsYetError

    try:
        return snapshot_storage(settings)
    except NoSnapshotsYetError as exc:
        emit(args, {"application_id": settings.application_id, **empty, "note": str(exc)}, str(exc))
        return None
