"""``statekeeper upgrade plan``: what running a new version of an app on its state means;
``statekeeper upgrade migrate``: the old version's state turned into the new one's;
``statekeeper upgrade cutover|rollback|history``: switching between the versions
(docs/changing-apps.md)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
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
    _migration_options(migrate)

    cut = subcommand(
        sub,
        "cutover",
        "switch from --from (the old version) to --app (the new one, another application "
        "id): refusals first, then the old version marked superseded and stopped (with "
        "--stop-old; it must be stopped otherwise), its state migrated (as upgrade migrate), "
        "the migrated state read back and verified, the new version marked active (start "
        "it: it takes over where the old one stopped); exit code 1 when the state cannot be "
        "migrated as declared, 2 when a step failed (the old version stays active)",
        _cmd_upgrade_cutover,
    )
    _migration_options(cut)
    cut.add_argument(
        "--stop-old",
        action="store_true",
        help="stop the old version if it runs (SIGTERM to its driver: it commits and stops)",
    )
    cut.add_argument(
        "--stop-timeout-s",
        type=seconds,
        default=120.0,
        help="how long a graceful stop may take before kill -9 (120)",
    )
    cut.add_argument(
        "--no-verify",
        action="store_true",
        help="skip reading the migrated state back (faster; nothing then proves it)",
    )
    cut.add_argument(
        "--shadow",
        action="store_true",
        help="--app already runs on state migrated from --from (a shadow run, compared with "
        "upgrade diff): stop the old version and record the cut-over, migrating nothing",
    )

    diff = subcommand(
        sub,
        "diff",
        "compare a shadow run: --app (started on state migrated from --from and running "
        "beside it) against --from, once both processed the same input: per key of every "
        "store, then of every output topic (the latest value per key), equal, "
        "expected-different (the new spec's migrations.<store>.compare, outputs.<topic>) or "
        "unexpected; exit code 1 when a key is unexpected, state or output, or the versions "
        "are not at the same input (what is behind is printed)",
        _cmd_upgrade_diff,
    )
    _versions_options(diff)
    diff.add_argument(
        "--no-outputs",
        action="store_true",
        help="compare the states only (the output topics are not read)",
    )

    back = subcommand(
        sub,
        "rollback",
        "make the version --app was cut over from active again (its state was only read: it "
        "resumes where it stopped) and --app superseded",
        _cmd_upgrade_rollback,
    )
    app_options(back, app_help="the new version's spec file or application id")
    back.add_argument(
        "--stop-new",
        action="store_true",
        help="stop --app if it runs (SIGTERM to its driver)",
    )
    back.add_argument(
        "--stop-timeout-s",
        type=seconds,
        default=120.0,
        help="how long a graceful stop may take before kill -9 (120)",
    )

    history = subcommand(
        sub,
        "history",
        "the app's cut-overs and rollbacks, oldest first, and whether it is active",
        _cmd_upgrade_history,
    )
    app_options(history, app_help="a spec file or application id")


def _migration_options(parser: argparse.ArgumentParser) -> None:
    _versions_options(parser)
    parser.add_argument(
        "--local",
        action="store_true",
        help="migrate the tasks one after the other in this process, without Spark",
    )
    parser.add_argument(
        "--no-snapshot",
        action="store_true",
        help="do not snapshot the migrated tasks (the new changelogs hold the state anyway)",
    )


def _versions_options(parser: argparse.ArgumentParser) -> None:
    app_options(parser, app_help="the new version's spec file (.yaml/.toml) or application id")
    parser.add_argument(
        "--from",
        dest="old",
        required=True,
        metavar="OLD_SPEC",
        help="the old version's spec file or application id (its spec is needed: its "
        "topology decodes the state); --set and --bootstrap apply to it too",
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
        prepare_migration,
        run_migration,
    )

    new_settings, new_spec = app_target(args, need_spec="upgrade migrate")
    old_settings, old_spec = app_target(_old_target(args), need_spec="upgrade migrate --from")

    progress = _progress(args)
    try:  # every refusal comes before Spark starts or any state is read
        prepared = prepare_migration(
            old_spec, new_spec, old_settings, new_settings, snapshot=not args.no_snapshot
        )
    except MigrationRefused as exc:
        return _fail(str(exc), EXIT_INCOMPATIBLE, as_json=args.json)
    with _spark_context(args, new_settings) as spark_context:
        report = run_migration(prepared, spark_context=spark_context, progress=progress)
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


@contextlib.contextmanager
def _spark_context(args: argparse.Namespace, settings: Any) -> Iterator[Any]:
    """The SparkContext the migration runs on (None with --local); a session made here is
    stopped after, an active one is left running."""
    if args.local:
        yield None
        return
    from statekeeper.spark.session_env import batch_session

    spark, made_here = batch_session(settings.spark_master, "statekeeper-migrate")
    try:
        yield spark.sparkContext
    finally:
        if made_here:
            spark.stop()


def _progress(args: argparse.Namespace) -> Any:
    def progress(task: Any) -> None:
        if not args.json:
            print(_task_line(task), file=sys.stderr, flush=True)

    return progress


def _cmd_upgrade_cutover(args: argparse.Namespace) -> int:
    from statekeeper.cli import _fail
    from statekeeper.migration import MigrationRefused
    from statekeeper.upgrade import cutover

    new_settings, new_spec = app_target(args, need_spec="upgrade cutover")
    old_settings, old_spec = app_target(_old_target(args), need_spec="upgrade cutover --from")
    try:
        with _spark_context(args, new_settings) as spark_context:
            report = cutover(
                old_spec,
                new_spec,
                old_settings,
                new_settings,
                stop_old=args.stop_old,
                stop_timeout_s=args.stop_timeout_s,
                verify=not args.no_verify,
                spark_context=spark_context,
                progress=_progress(args),
                snapshot=not args.no_snapshot,
                shadow=args.shadow,
            )
    except MigrationRefused as exc:
        return _fail(str(exc), EXIT_INCOMPATIBLE, as_json=args.json)
    if args.shadow:
        text = (
            f"{report.from_app} -> {report.to_app}: cut over (shadow run; old version: "
            f"{report.old_stop}); {report.to_app} runs on"
        )
        emit(args, report.as_dict(), text)
        return EXIT_OK
    migration = report.migration
    lines = [
        f"{report.from_app} -> {report.to_app}: cut over in {report.seconds:.1f} s "
        f"(old version: {report.old_stop})",
        f"migrated {sum(t.migrated for t in migration.tasks)} of {len(migration.tasks)} "
        "task(s)" + (" on Spark" if migration.on_spark else " locally"),
    ]
    if report.verify is not None:
        totals = report.verify.totals()
        lines.append(
            f"verified: {totals['equal']} key(s) equal, {totals['expected_different']} "
            f"changed by the migration, {totals['unexpected']} unexpected, "
            f"{totals['tasks']} task(s) at the old commit"
        )
    if migration.takeover is not None:
        lines.append(
            f"start {report.to_app} now: it takes over at batch {migration.takeover.batch_base}"
        )
    lines += [f"note: {note}" for note in migration.notes]
    emit(args, report.as_dict(), "\n".join(lines))
    return EXIT_OK


def _cmd_upgrade_diff(args: argparse.Namespace) -> int:
    from statekeeper.upgrade.diff import diff_versions

    new_settings, new_spec = app_target(args, need_spec="upgrade diff")
    old_settings, old_spec = app_target(_old_target(args), need_spec="upgrade diff --from")
    report = diff_versions(
        old_spec, new_spec, old_settings, new_settings, outputs=not args.no_outputs
    )
    totals = report.compared.totals()
    lines = [
        f"{report.old_application_id} vs {report.new_application_id}: "
        + ("aligned (both at the log ends)" if report.aligned else "NOT aligned"),
        f"state: {totals['equal']} key(s) equal, {totals['expected_different']} "
        f"expected-different, {totals['unexpected']} unexpected over {totals['tasks']} task(s)",
        *(f"behind: {b}" for b in report.behind),
        *(
            f"task {t.task_id} store {name}: {example}"
            for t in report.compared.tasks
            for name, d in t.stores.items()
            for example in d.examples
        ),
    ]
    if report.outputs is not None:
        for topic in report.outputs.topics:
            lines.append(
                f"output {topic.old_topic} -> {topic.new_topic} ({topic.rule}): {topic.equal} "
                f"key(s) equal, {topic.expected_different} expected-different, "
                f"{topic.unexpected} unexpected"
            )
            lines += [f"output {topic.new_topic}: {example}" for example in topic.examples]
        lines += [f"note: {note}" for note in report.outputs.notes]
    elif not args.no_outputs:
        lines.append("outputs: not compared (the versions are not aligned)")
    emit(args, report.as_dict(), "\n".join(lines))
    return EXIT_OK if report.ok else EXIT_INCOMPATIBLE


def _cmd_upgrade_rollback(args: argparse.Namespace) -> int:
    from statekeeper.upgrade import rollback

    settings, _spec = app_target(args, need_spec="upgrade rollback")
    event = rollback(settings, stop_new=args.stop_new, stop_timeout_s=args.stop_timeout_s)
    text = (
        f"{event.from_app} rolled back to {event.to_app} ({event.details['new_stop']}): "
        f"start {event.to_app}; it resumes where it stopped"
    )
    emit(args, event.to_json(), text)
    return EXIT_OK


def _cmd_upgrade_history(args: argparse.Namespace) -> int:
    from statekeeper.versions.history import active_override, read_history
    from statekeeper.versions.recorded import state_root

    settings, _spec = app_target(args)
    root = state_root(settings.state_dir, settings.application_id)
    events = read_history(root)
    found = active_override(root, settings.application_id)
    active = None if found is None else found[0]
    lines = [
        f"{e.kind} {e.from_app} -> {e.to_app}: {e.stage} at {_when(e.at)}"
        + (f" ({e.details['error']})" if "error" in e.details else "")
        for e in events
    ] or [f"{settings.application_id}: no cut-over or rollback recorded"]
    if active is not None:
        lines.append(f"{settings.application_id} is {'active' if active else 'superseded'}")
    emit(
        args,
        {
            "application_id": settings.application_id,
            "active": active,
            "events": [e.to_json() for e in events],
        },
        "\n".join(lines),
    )
    return EXIT_OK


def _when(at: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


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
