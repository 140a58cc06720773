"""``statekeeper drill``: restore every store into a sandbox and prove it right."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from statekeeper.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    app_options,
    emit,
    snapshot_storage,
    snapshot_target,
    subcommand,
)
from statekeeper.errors import StatekeeperError


def add_drill(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drill = subcommand(
        commands,
        "drill",
        "restore every store into a sandbox and prove it right (exit 1 when a check fails)",
        _cmd_drill,
    )
    app_options(drill)
    drill.add_argument(
        "--report-dir",
        help="where the record, report.html and Data Docs go "
        "(default: <state_dir>/.drills/<app>/<drill id>)",
    )
    drill.add_argument(
        "--from-snapshot",
        default="latest",
        metavar="ID|latest|none",
        help="snapshot id, the newest verified one (latest, default) or none (full replay)",
    )
    drill.add_argument("--url", help="snapshot root URL (default: settings.snapshot_url)")
    drill.add_argument("--state-dir", help="state root (default: the spec's settings)")
    drill.add_argument(
        "--keep-sandbox", action="store_true", help="leave the restored sandbox in the report dir"
    )
    drill.add_argument(
        "--spark",
        action="store_true",
        help="also diff with the PySpark recomputation the spec's drill_model: names (slow: "
        "starts Spark)",
    )


def _spark_drill_models(spec: Any) -> list[Any]:
    """The PySpark recomputations ``drill --spark`` compares the stores with: what the
    function the spec's ``drill_model:`` names returns for the spec's params."""
    from statekeeper.errors import ConfigError

    try:
        spark_models = spec.app_function("drill_model")
    except ConfigError as exc:
        raise ConfigError(f"--spark: {exc}") from exc
    found = list(spark_models(spec.params))
    if not found:
        raise ConfigError(
            f"--spark: the recomputation of {spec.drill_model} does not model this app's "
            f"params {spec.params}"
        )
    return found


def _cmd_drill(args: argparse.Namespace) -> int:
    """Exit 0 when the drill passes, 1 when a check fails, 2 when it cannot finish; once the
    spec is read, an unfinished drill is recorded too (status ``error``: record.json, history
    row, report.html), so it shows in the trend."""
    import traceback

    from statekeeper.ops.drill import run_drill
    from statekeeper.ops.drill.drill import new_record, record_error
    from statekeeper.snapshots import SnapshotError
    from statekeeper.snapshots.install import NONE

    settings, spec = snapshot_target(args, need_spec="drill")
    if args.spark and spec.drill_model is None:  # a usage error, before any drill: one line
        _spark_drill_models(spec)

    def say(line: str) -> None:
        print(f"drill: {line}", file=sys.stderr, flush=True)

    record = new_record(
        settings, Path(args.report_dir) if args.report_dir else None, args.from_snapshot
    )
    error: Exception | None = None
    try:
        try:
            storage = None if args.from_snapshot == NONE else snapshot_storage(settings)
        except SnapshotError as exc:
            raise SnapshotError(
                f"{exc}; drill by full changelog replay: --from-snapshot none"
            ) from exc
        record = run_drill(
            settings,
            spec.build_topology(),
            storage,
            say=say,
            keep_sandbox=args.keep_sandbox,
            spark_models=_spark_drill_models(spec) if args.spark else None,
            record=record,
        )
    except Exception as exc:  # noqa: BLE001 - every error is recorded, then exits 2
        error = exc
        if record.error is None:  # raised before run_drill could record it
            record_error(settings, record, exc, say)
    age = "-" if record.snapshot_age_s is None else f"{record.snapshot_age_s:.1f} s"
    lines = [
        f"{record.app}: drill {record.drill_id} "
        + {"pass": "PASSED", "fail": "FAILED"}.get(record.status, "ERROR"),
        f"  RPO {record.committed_records_behind} committed record(s) behind the live head, "
        f"snapshot age {age}; {record.source_records_behind} source record(s) not yet "
        f"processed, {record.changelog_records_behind} changelog offset(s) after the restored "
        "markers",
        f"  RTO {record.rto_s:.3f} s, {record.records_replayed} records replayed, "
        f"{record.bytes_downloaded} bytes downloaded, wall {record.wall_s:.2f} s",
        f"  report {record.report_html}",
    ]
    if record.error is not None:
        lines.append(f"  ERROR {record.error}")
    for s in record.stores:
        for name, check in s.checks.items():
            if check.failed:
                keys = f" keys: {', '.join(check.examples)}" if check.examples else ""
                lines.append(f"  FAIL {s.task} {s.store} {name}: {check.detail}{keys}")
                lines += [f"      {line}" for line in check.mismatch_lines()]
    if not record.stores and record.error is None:
        lines.append("  FAIL no store was restored")
    emit(args, record.as_dict(), "\n".join(lines))
    if error is not None:
        if not isinstance(error, StatekeeperError):
            traceback.print_exception(error, file=sys.stderr)
        print(f"statekeeper: error: {record.error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK if record.passed else 1
