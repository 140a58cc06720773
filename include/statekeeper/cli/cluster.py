"""``statekeeper cluster start|stop|status``: a Spark standalone cluster on 127.0.0.1."""

from __future__ import annotations

import argparse
from pathlib import Path

from statekeeper.cli.common import (
    EXIT_ERROR,
    EXIT_NOT_RUNNING,
    EXIT_OK,
    emit,
    int_in,
    run_dir_option,
    subcommand,
    timeout_option,
)


def add_cluster(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = subcommand(commands, "cluster", "a Spark standalone cluster on 127.0.0.1")
    actions = cluster.add_subparsers(title="actions", metavar="ACTION")
    for name, text, handler in (
        ("start", "start a master and workers in the background", _cmd_cluster_start),
        ("stop", "stop every process of the cluster recorded in --dir", _cmd_cluster_stop),
        ("status", "what runs (exit code 3 when not every worker is up)", _cmd_cluster_status),
    ):
        sub = subcommand(actions, name, text, handler)
        run_dir_option(
            sub, Path("var/cluster"), "logs, work dirs, cluster.json (var/cluster)", "--dir"
        )
        if name == "start":
            sub.add_argument("--workers", type=int_in(1), default=2, help="number of workers")
            sub.add_argument("--cores", type=int_in(1), default=1, help="cores per worker")
            sub.add_argument("--memory", default="2g", help="memory per worker (e.g. 2g)")
            timeout_option(sub, 90.0, "seconds to come up")


def _cmd_cluster_start(args: argparse.Namespace) -> int:
    from statekeeper.cluster.local_cluster import ClusterConfig, LocalSparkCluster

    config = ClusterConfig(
        base_dir=args.run_dir,
        workers=args.workers,
        cores_per_worker=args.cores,
        memory_per_worker=args.memory,
        start_timeout_s=args.timeout_s,
    )
    status = LocalSparkCluster(config).start().status()
    emit(
        args,
        status,
        f"Spark master {status['master_url']} (web UI {status['master_webui_url']}), "
        f"{status['alive_workers']} workers; logs in {status['logs']}\n"
        f"run an app on it: statekeeper app run --app SPEC --set "
        f"spark_master={status['master_url']}\n"
        f"stop it: statekeeper cluster stop --run-dir {args.run_dir}",
    )
    return EXIT_OK


def _cmd_cluster_stop(args: argparse.Namespace) -> int:
    from statekeeper.cluster.local_cluster import STATE_FILE, LocalSparkCluster

    if not (args.run_dir / STATE_FILE).is_file():
        emit(
            args,
            {"base_dir": str(args.run_dir), "stopped": [], "killed": [], "left": []},
            f"no cluster recorded in {args.run_dir}",
        )
        return EXIT_OK
    cluster = LocalSparkCluster.attach(args.run_dir)
    found = cluster.processes()
    killed = cluster.stop()
    left = cluster.processes()
    result = {"base_dir": str(cluster.base_dir), "stopped": found, "killed": killed, "left": left}
    text = f"cluster in {cluster.base_dir} stopped ({len(found)} processes)"
    emit(args, result, text + (f"; STILL RUNNING: {left}" if left else ""))
    return EXIT_ERROR if left else EXIT_OK


def _cmd_cluster_status(args: argparse.Namespace) -> int:
    from statekeeper.cluster.local_cluster import STATE_FILE, LocalSparkCluster

    if not (args.run_dir / STATE_FILE).is_file():
        emit(
            args, {"base_dir": str(args.run_dir), "running": False}, f"no cluster in {args.run_dir}"
        )
        return EXIT_NOT_RUNNING
    status = LocalSparkCluster.attach(args.run_dir).status()
    if status["running"]:
        text = (
            f"Spark master {status['master_url']} (web UI {status['master_webui_url']}), "
            f"{status['alive_workers']}/{len(status['workers'])} workers alive"
        )
    else:
        text = (
            f"cluster in {status['base_dir']} is not running (master alive: "
            f"{status['master_alive']}, workers alive: {status['alive_workers']}/"
            f"{len(status['workers'])})"
        )
    emit(args, status, text)
    return EXIT_OK if status["running"] else EXIT_NOT_RUNNING
