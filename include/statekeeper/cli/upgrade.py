"""``statekeeper upgrade plan``: what running a new version of an app on its state means
(docs/changing-apps.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from statekeeper.cli.common import EXIT_OK, app_options, app_target, emit, seconds, subcommand

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
