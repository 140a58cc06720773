"""``statekeeper audit changelogs``: check an app's changelog topics."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from statekeeper.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    app_options,
    app_target,
    emit,
    snapshot_storage,
    subcommand,
)

# --- audit --------------------------------------------------------------------------------

EXIT_AUDIT_FAILED = 1  # `audit changelogs`: at least one topic failed


def add_audit(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = subcommand(commands, "audit", "check an app's topics against what it needs")
    sub = audit.add_subparsers(title="audits", metavar="AUDIT")
    changelogs = subcommand(
        sub,
        "changelogs",
        "audit every changelog topic of an app: configs, contents, restore forecast "
        "(exit code 1 when a topic fails)",
        _cmd_audit_changelogs,
    )
    app_options(changelogs)
    changelogs.add_argument(
        "--fix",
        action="store_true",
        help="set cleanup.policy and retention.ms where they are wrong (and, where the broker "
        "compacts, the cleaner's dirty ratio, segment.ms and min.compaction.lag.ms), then "
        "audit again",
    )
    changelogs.add_argument(
        "--restore-rate",
        type=float,
        help="records/s for the restore forecast (default: the rate of the app's own "
        "restores in its status file, else 550000, measured on the embedded broker)",
    )
    changelogs.add_argument(
        "--no-measure", action="store_true", help="check configs only; do not read the topics"
    )
    changelogs.add_argument(
        "--spark",
        action="store_true",
        help="measure contents with a Spark batch read (statekeeper_kafka source, local[2] "
        "unless a session is active) instead of the plain read",
    )
    changelogs.add_argument(
        "--trim",
        action="store_true",
        help="delete changelog records below the oldest kept snapshot's marker (DeleteRecords; "
        "refused on brokers without it, such as the embedded one)",
    )
    changelogs.add_argument(
        "--restore-time-budget",
        type=float,
        metavar="SECONDS",
        help="compare the app's forecast restore time (newest snapshot + tail, summed over "
        "its changelogs) with this (default: the settings' restore_time_budget_s)",
    )
    changelogs.add_argument(
        "--snapshot-over-budget",
        action="store_true",
        help="snapshot the app (running: through its status endpoint; stopped: from its "
        "local state) when its forecast restore time exceeds the budget",
    )


def _cmd_audit_changelogs(args: argparse.Namespace) -> int:
    from statekeeper.ops.audit.changelog_audit import audit_changelogs
    from statekeeper.ops.audit.forecast import choose_restore_rate
    from statekeeper.ops.audit.history import AuditHistory
    from statekeeper.snapshots.manifest import SnapshotError

    settings, spec = app_target(args, need_spec="audit changelogs")
    budget = _budget_of(args, settings)
    status_file = settings.status_path()
    try:
        storage, snapshots_note = snapshot_storage(settings), None
    except SnapshotError as exc:  # no snapshots yet: forecast full replays, and say why
        storage, snapshots_note = None, str(exc)
    measurer, session = None, None
    if args.spark and not args.no_measure:
        from statekeeper.ops.audit.spark_contents import measure_changelog_spark, spark_session

        spark, made_here = spark_session(settings.spark_master)
        session = spark if made_here else None

        def measurer(bootstrap: str, topic: str, partitions: int) -> Any:
            return measure_changelog_spark(
                spark, bootstrap, topic, timeout_s=settings.broker_timeout_s
            )

    try:
        report = audit_changelogs(
            spec.build_topology(),
            settings.application_id,
            settings.bootstrap_servers,
            fix=args.fix,
            measure=not args.no_measure,
            restore_rate=choose_restore_rate(args.restore_rate, status_file),
            timeout_s=settings.broker_timeout_s,
            measurer=measurer,
            snapshots=storage,
            snapshots_note=snapshots_note,
            trim=args.trim,
        )
    finally:
        if session is not None:
            session.stop()
    AuditHistory.under(settings.state_dir).append(report.to_dict())  # the State stores page
    budget = _restore_budget(args, budget, settings, spec, report)
    payload = {**report.to_dict(), "restore_budget": budget.to_dict() if budget else None}
    lines = _audit_lines(report)
    if budget is not None:
        lines.append(
            f"  restore forecast {budget.forecast_restore_s:.3g}s vs budget {budget.budget_s}s: "
            + (f"over, snapshot {budget.snapshot}" if budget.over_budget else "within")
        )
    emit(args, payload, "\n".join(lines))
    if report.trim is not None and report.trim.refused is not None:
        print(f"statekeeper: --trim refused: {report.trim.refused}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_AUDIT_FAILED if report.verdict == "fail" else EXIT_OK


def _budget_of(args: argparse.Namespace, settings: Any) -> float | None:
    """The restore time budget: ``--restore-time-budget``, else the settings'."""
    from statekeeper.errors import ConfigError

    budget = args.restore_time_budget
    if budget is None:
        budget = settings.restore_time_budget_s
    elif budget <= 0:
        raise ConfigError(f"--restore-time-budget must be > 0 seconds, got {budget}")
    if budget is None and args.snapshot_over_budget:
        raise ConfigError(
            "--snapshot-over-budget needs a budget: --restore-time-budget SECONDS or "
            "STATEKEEPER_RESTORE_TIME_BUDGET_S"
        )
    return budget


def _restore_budget(
    args: argparse.Namespace, budget: float | None, settings: Any, spec: Any, report: Any
) -> Any:
    """The forecast vs the restore time budget (None without a budget); with
    ``--snapshot-over-budget``, the snapshot taken when over it."""
    from statekeeper.ops.audit.restore_budget import check_budget, enforce_budget

    if budget is None:
        return None
    if not args.snapshot_over_budget:
        return check_budget(report, budget)
    return enforce_budget(
        report,
        budget,
        settings,
        spec.build_topology(),
        lambda: snapshot_storage(settings, create=True),
    )


def _audit_lines(report: Any) -> list[str]:
    rate = report.rate
    lines = [
        f"{report.application_id}: {report.verdict} (broker {report.broker}; contents read "
        f"with {report.measured_with}; restore rate {rate.records_per_s:,.0f} records/s, "
        f"{rate.source}: {rate.detail})"
    ]
    if report.snapshots_note:
        lines.append(f"  snapshots: none considered ({report.snapshots_note})")
    for change in report.applied:
        lines.append(f"  fixed {change.topic}: {change.key} {change.before} -> {change.after}")
    for topic in report.topics:
        line = f"  {topic.verdict:4} {topic.topic} (store {topic.store})"
        if topic.contents is not None:
            c = topic.contents
            line += (
                f": {'~' if c.sampled else ''}{c.records} records, {c.distinct_keys} keys, "
                f"{c.tombstone_share:.1%} tombstones, {c.markers} markers, "
                f"{c.superseded_share:.1%} superseded"
            )
        lines.append(line)
        f = topic.forecast
        if f is not None:
            lines.append(
                f"       restore: full ~{f.full_restore_seconds:.3g}s ({f.full_records} records)"
                f", newest snapshot + tail ~{f.snapshot_tail_seconds:.3g}s ({f.tail_records} "
                f"records; {f.snapshot_coverage}/{len(f.partitions)} partitions have a "
                f"snapshot); a fresh snapshot would cut {f.fresh_snapshot_cut_records} "
                "records from the next restore"
            )
        lines.extend(f"       {reason}" for reason in topic.reasons())
    if report.trim is not None:
        for action in report.trim.actions:
            lines.append(
                f"  trim {action.topic}[{action.partition}]: {action.records} records below "
                f"offset {action.trim_to}"
            )
        for skip in report.trim.skipped:
            lines.append(f"  trim {skip.topic}[{skip.partition}]: skipped, {skip.reason}")
    return lines
