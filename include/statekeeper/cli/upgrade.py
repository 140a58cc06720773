"""``statekeeper upgrade plan``: what running a new version of an app on its state means;
``statekeeper upgrade migrate``: the old version's state turned into the new one's
(docs/changing-apps.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from statekeeper.cli.common import (
    EXIT_OK,
    app_options,
    app_target,
    emit,
    seconds,
    subcommand,
)

#: ``upgrade plan``'s exit code when a store needs a migration or a source repartitioning.
EXIT_INCOMPATIBLE = 1


def add_upgrade(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    upgrade = subcommand(commands, "upgrade", "changing an app: versions and their state")
    sub = upgrade.add_subparsers(title="upgrade commands", metavar="ACTION")
    plan = subcommand(
        sub,
        "plan",
        "compare the topology of --app (the new version) with the one that wrote the app's "
        "state: per store unchanged, compatible, needs-migration, new or dropped, per source "
        "topic partitions-changed; exit code 1 when something needs a migration or "
        "repartitioning",
        _cmd_upgrade_plan,
    )
    app_options(plan, app_help="the new version's spec file (.yaml/.toml) or application id")
    against = plan.add_mutually_exclusive_group()
    against.add_argument(
        "--against",
        type=Path,
        metavar="PATH",
        help="the state's recorded topology: a state_dir, an app's state root or a "
        "topology.json (default: <state_dir>/<app>/topology.json of the spec's settings, "
        "else the newest snapshot's)",
    )
    against.add_argument(
        "--from-snapshot", metavar="ID", help="the topology recorded by this snapshot"
    )
    plan.add_argument("--url", help="snapshot root URL (default: settings.snapshot_url)")
    plan.add_argument(
        "--offline",
        action="store_true",
        help="do not ask the broker for the source topics' partition counts (they are "
        "then not compared)",
    )
    plan.add_argument(
        "--timeout-s",
        type=seconds,
        default=5.0,
        help="how long to wait for the broker (5); it not answering is a note, not an error",
    )

    migrate = subcommand(
        sub,
        "migrate",
        "write the state of --from (the old version) as --app's (the new version, under a new "
        "application id): each task's committed state read from its newest verified snapshot "
        "and changelog, migrated per store as the new spec's migrations: say, written to the "
        "new app's stores and changelogs and committed at the same source offsets; one Spark "
        "task per stream task (--local: one after the other, here); exit code 1 when the "
        "state cannot be migrated as declared (nothing written)",
        _cmd_upgrade_migrate,
    )
    app_options(migrate, app_help="the new version's spec file (.yaml/.toml) or application id")
    migrate.add_argument(
        "--from",
        dest="old",
        required=True,
        metavar="OLD_SPEC",
        help="the old version's spec file or application id (its spec is needed: its "
        "topology decodes the state); --set and --bootstrap apply to it too",
    )
    migrate.add_argument(
        "--local",
        action="store_true",
        help="migrate the tasks one after the other in this process, without Spark",
    )
    migrate.add_argument(
        "--no-snapshot",
        action="store_true",
        help="do not snapshot the migrated tasks (the new changelogs hold the state anyway)",
    )


def _cmd_upgrade_plan(args: argparse.Namespace) -> int:
    from statekeeper.ops.upgrade_plan import plan_upgrade
    from statekeeper.versions.plan_table import plan_text

    settings, spec = app_target(args, need_spec="upgrade plan")
    report = plan_upgrade(
        settings,
        spec.build_topology(),
        against=args.against,
        snapshot_id=args.from_snapshot,
        ask_broker=not args.offline,
        timeout_s=args.timeout_s,
    )
    text = plan_text(report.plan, report.against)
    if report.notes:
        text += "\n" + "\n".join(f"note: {note}" for note in report.notes)
    emit(args, report.as_dict(), text)
    return EXIT_OK if report.plan.compatible else EXIT_INCOMPATIBLE


def _cmd_upgrade_migrate(args: argparse.Namespace) -> int:
    from statekeeper.cli import _fail
    from statekeeper.migration import (
        MigrationRefused,
        TaskMigration,
        prepare_migration,
        run_migration,
    )

    new_settings, new_spec = app_target(args, need_spec="upgrade migrate")
    old_settings, old_spec = app_target(_old_target(args), need_spec="upgrade migrate --from")

    def progress(task: TaskMigration) -> None:
        if not args.json:
            print(_task_line(task), file=sys.stderr, flush=True)

    try:  # every refusal comes before Spark starts or any state is read
        prepared = prepare_migration(
            old_spec, new_spec, old_settings, new_settings, snapshot=not args.no_snapshot
        )
    except MigrationRefused as exc:
        return _fail(str(exc), EXIT_INCOMPATIBLE, as_json=args.json)
    spark, made_here = None, False
    if not args.local:
        from statekeeper.spark.session_env import batch_session

        spark, made_here = batch_session(new_settings.spark_master, "statekeeper-migrate")
    try:
        report = run_migration(
            prepared,
            spark_context=None if spark is None else spark.sparkContext,
            progress=progress,
        )
    finally:
        if made_here and spark is not None:
            spark.stop()
    migrated = [t for t in report.tasks if t.migrated]
    lines = [
        f"{report.old_application_id} -> {report.new_application_id}: {len(migrated)} of "
        f"{len(report.tasks)} task(s) migrated"
        + (" on Spark" if report.on_spark else " locally")
        + f" in {report.seconds:.1f} s",
        *(f"store {s.store}: {s.action} ({s.change})" for s in report.steps),
        *(f"note: {note}" for note in report.notes),
    ]
    if report.takeover is not None:
        lines.append(
            f"takeover: the new version's batches continue at {report.takeover.batch_base}; "
            f"{len(report.takeover.carried_ranges())} repartition range(s) of the old version "
            "carried (docs/changing-apps.md#starting-the-new-version-the-takeover)"
        )
    emit(args, report.as_dict(), "\n".join(lines))
    return EXIT_OK


def _old_target(args: argparse.Namespace) -> Any:
    """``args`` with ``--from`` as ``--app`` (the same --set and --bootstrap)."""
    old = argparse.Namespace(**vars(args))
    old.app = args.old
    return old


def _task_line(task: Any) -> str:
    if not task.migrated:
        return f"task {task.task_id}: {task.note}"
    stores = ", ".join(
        f"{name} {c.read} read/{c.written} written/{c.dropped} dropped"
        for name, c in sorted(task.stores.items())
    )
    return f"task {task.task_id}: batch {task.batch_id}, {stores} ({task.seconds:.1f} s)"
