"""Launch an app from its spec: shared by ``statekeeper app run`` and the spark_apps entry
points (``spark-submit spark_apps/word_count/app.py --spec ...``)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statekeeper.app.child_process import die_with_parent
from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.errors import ConfigError, StatekeeperError
from statekeeper.settings import StatekeeperSettings


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` settings overrides; values are parsed as JSON when they can be."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def run_app(
    spec_path: str | Path | AppSpec,
    overrides: dict[str, Any] | None = None,
    *,
    stop_when_idle: bool = False,
    settings: StatekeeperSettings | None = None,
) -> dict[str, Any]:
    """Build and run the app of ``spec_path`` (a spec file, or a loaded spec); returns its
    final status document. ``settings``: already resolved (else from the spec and
    ``overrides``)."""
    from statekeeper.app.statekeeper_app import StatekeeperApp

    spec = spec_path if isinstance(spec_path, AppSpec) else load_app_spec(spec_path)
    if settings is None:
        settings = spec.resolved_settings(**(overrides or {}))
    app = StatekeeperApp(spec.build_topology(), settings, spark_conf=spec.spark.conf)
    app.run(stop_when_idle=stop_when_idle)
    return app.board.snapshot()


def configure_logging(level: int = logging.INFO) -> None:
    """Log an app run quietly: statekeeper at ``level`` (one line per batch at INFO), every
    other Python library at WARNING.

    py4j logs each call from the JVM at INFO ("Received command c on object id p0" for every
    micro-batch), so the root logger stays at WARNING. Spark's own log level is set on the
    session (WARN).
    """
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("statekeeper").setLevel(level)


def add_run_arguments(parser: argparse.ArgumentParser, *, spec_required: bool) -> None:
    parser.add_argument("--spec", required=spec_required, help="app spec (.yaml/.toml)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. --set max_records_per_batch=50000",
    )
    parser.add_argument(
        "--stop-when-idle",
        action="store_true",
        help="stop gracefully once all input is processed (batch-style runs, tests)",
    )


def main(default_spec: Path | None = None, argv: Sequence[str] | None = None) -> int:
    """Entry point for ``spark_apps/*/app.py`` and for apps run as child processes."""
    die_with_parent()  # a no-op unless the parent asked (see statekeeper.app.child_process)
    parser = argparse.ArgumentParser(description="Run a statekeeper app on Spark")
    add_run_arguments(parser, spec_required=default_spec is None)
    args = parser.parse_args(argv)
    configure_logging()
    try:
        status = run_app(
            args.spec or default_spec, parse_overrides(args.set), stop_when_idle=args.stop_when_idle
        )
    except StatekeeperError as exc:
        print(f"statekeeper: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"state": status.get("state"), "totals": status.get("totals")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
