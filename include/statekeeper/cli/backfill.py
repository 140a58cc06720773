"""``statekeeper backfill``: run an app's own topology over its sources' history on Spark,
then let the stream (``statekeeper app run``) continue where it stopped."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from statekeeper.cli.common import EXIT_OK, app_options, app_target, emit, int_in, subcommand

DOCS = "docs/changing-apps.md#backfilling-from-history"
DOCS_DATASET = "docs/changing-apps.md#backfilling-from-a-dataset"


def add_backfill(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = subcommand(
        commands,
        "backfill",
        "run the app's topology over its sources' retained history on Spark (blocks); the "
        "stream then continues where it stopped",
        _cmd_backfill,
    )
    app_options(run)
    run.add_argument(
        "--from",
        dest="from_",
        metavar="earliest|TIMESTAMP_MS",
        help="where a fresh app starts: the log start (earliest, the default) or the first "
        "record at or after a timestamp (epoch ms; a fresh app only). An app that has run "
        "continues from its checkpoint",
    )
    run.add_argument(
        "--until",
        metavar="now|OFFSETS_JSON",
        help="where the backfill stops and the stream takes over: now (the log ends at start, "
        'the default) or {"topic": {"0": 1200, ...}} (-1: now; an unnamed topic: now)',
    )
    run.add_argument(
        "--snapshot",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="snapshot every stateful task at the end (default: yes)",
    )
    run.add_argument(
        "--max-records-per-batch",
        type=int_in(1),
        metavar="N",
        help="source records per micro-batch (default: the app's setting, at least 2000000)",
    )
    run.add_argument(
        "--input",
        metavar="PATH",
        help="a fresh app's state from a dataset of historical source records instead of the "
        "topics (Parquet or newline-delimited JSON: key, value[, topic, partition, offset, "
        f"timestamp]; {DOCS_DATASET}); the stream then takes over after it",
    )
    run.add_argument(
        "--local",
        action="store_true",
        help="with --input: fill the tasks one after the other in this process, without Spark",
    )
    run.add_argument(
        "--store",
        metavar="STORE",
        help="fill only this store, one the app has not written yet (a new one after a "
        "migration), from its inputs' log start to where each task committed; no Spark, the "
        "other stores untouched (--from and --until do not apply)",
    )


def _cmd_backfill(args: argparse.Namespace) -> int:
    from statekeeper.backfill.bounds import parse_from, parse_until
    from statekeeper.errors import ConfigError

    settings, spec = app_target(args, need_spec="backfill")
    if args.local and not args.input:
        raise ConfigError("backfill --local: only with --input (a topic backfill runs on Spark)")
    if args.input:
        if args.store or args.from_ is not None or args.until is not None:
            raise ConfigError(
                "backfill --input: --store, --from and --until do not apply (the dataset is "
                f"the history; the stream takes over after it; {DOCS_DATASET})"
            )
        return _fill_from_dataset(args, settings, spec)
    if args.store:
        return _fill_store(args, settings, spec)
    from_spec = parse_from(args.from_)
    topology = spec.build_topology()
    until_spec = parse_until(args.until, topology.source_topics(settings.application_id))

    import logging

    from statekeeper.app.child_process import die_with_parent
    from statekeeper.app.launcher import configure_logging
    from statekeeper.backfill.run import prepare_backfill, run_backfill

    die_with_parent()  # a no-op unless a parent asked (a test's child process)

    prepared = prepare_backfill(
        spec, settings, from_spec, until_spec, max_records_per_batch=args.max_records_per_batch
    )
    configure_logging(logging.WARNING)  # the progress lines say what happens

    def progress(line: str) -> None:
        print(f"backfill {settings.application_id}: {line}", file=sys.stderr, flush=True)

    progress(prepared.plan.note)
    report = run_backfill(prepared, snapshot=args.snapshot, progress=progress)
    emit(args, report.to_dict(), report.text())
    return EXIT_OK


def _fill_store(args: argparse.Namespace, settings: Any, spec: Any) -> int:
    from statekeeper.backfill.store_fill import fill_store
    from statekeeper.errors import ConfigError
    from statekeeper.ops.snapshot_app import running_app_status_url

    if args.from_ is not None or args.until is not None:
        raise ConfigError(
            f"backfill --store {args.store}: --from and --until do not apply (a store is "
            f"filled from the log start to where each task committed; {DOCS})"
        )
    url = running_app_status_url(settings)
    if url is not None:
        raise ConfigError(
            f"app {settings.application_id} is running ({url}): stop it before a backfill"
        )

    def progress(task: Any) -> None:
        line = task.note or f"{task.entries} entries from {task.records} records"
        print(f"backfill {args.store}: task {task.task_id}: {line}", file=sys.stderr, flush=True)

    report = fill_store(
        settings, spec.build_topology(), args.store, snapshot=args.snapshot, progress=progress
    )
    emit(args, report.to_dict(), report.text())
    return EXIT_OK


def _fill_from_dataset(args: argparse.Namespace, settings: Any, spec: Any) -> int:
    import contextlib
    from pathlib import Path

    from statekeeper.backfill.dataset_run import prepare_dataset_backfill, run_dataset_backfill

    if args.max_records_per_batch is not None:
        from statekeeper.errors import ConfigError

        raise ConfigError("backfill --input: --max-records-per-batch does not apply")

    def progress(task: Any) -> None:
        line = task.note or f"{task.records:,} records in {task.seconds:.1f} s"
        print(f"backfill {settings.application_id}: task {task.task_id}: {line}", file=sys.stderr)

    with contextlib.ExitStack() as stack:
        spark = None
        if not args.local:
            from statekeeper.spark.session_env import batch_session

            spark, made_here = batch_session(settings.spark_master, "statekeeper-backfill")
            if made_here:
                stack.callback(spark.stop)
        prepared = prepare_dataset_backfill(
            spec, settings, Path(args.input), spark=spark, snapshot=args.snapshot
        )
        for note in prepared.notes:
            print(f"backfill {settings.application_id}: {note}", file=sys.stderr)
        report = run_dataset_backfill(prepared, progress)
    emit(args, report.to_dict(), report.text())
    return EXIT_OK
