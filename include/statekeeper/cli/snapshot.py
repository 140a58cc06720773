"""``statekeeper snapshot create|list|verify|prune``: snapshots of an app's stores."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from statekeeper.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    SPECS_DIR_ENV,
    app_options,
    emit,
    existing_snapshot_storage,
    int_in,
    snapshot_storage,
    snapshot_target,
    subcommand,
    timeout_option,
)


def add_snapshot(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snapshot = subcommand(
        commands, "snapshot", "snapshots of an app's stores (invariant 8, docs/invariants.md)"
    )
    sub = snapshot.add_subparsers(title="snapshot commands", metavar="ACTION")
    create = subcommand(
        sub,
        "create",
        "snapshot every task: a running app at its next commit (through its status "
        "endpoint), a stopped app from its local state",
        _cmd_snapshot_create,
    )
    listing = subcommand(
        sub,
        "list",
        "complete snapshots (those with a manifest) and unreadable manifests (exit code 1 "
        "when one is listed)",
        _cmd_snapshot_list,
    )
    verify = subcommand(
        sub,
        "verify",
        "re-hash every file of every snapshot (exit code 1 on a bad one or an unreadable "
        "manifest); --repair re-uploads damaged files from local copies",
        _cmd_snapshot_verify,
    )
    prune = subcommand(
        sub,
        "prune",
        "apply retention; always keeps the newest verified snapshot per store",
        _cmd_snapshot_prune,
    )
    for parser in (create, listing, verify, prune):
        app_options(
            parser,
            app_help="the app: its spec file (.yaml/.toml) or its application id (its spec "
            f"found in ${SPECS_DIR_ENV}; "
            + ("needed here)" if parser is create else "or none: the id alone will do)"),
        )
        parser.add_argument("--url", help="snapshot root URL (default: settings.snapshot_url)")
    for parser in (create, listing, verify):
        parser.add_argument("--task", action="append", help="only this task (repeatable)")
        parser.add_argument("--store", action="append", help="only this store (repeatable)")
    create.add_argument("--state-dir", help="state root (default: the spec's settings)")
    verify.add_argument(
        "--repair",
        action="store_true",
        help="upload again every missing or damaged shared file a local copy has (any file "
        "under the state root, or --local DIR, with the same SHA-256); lists the rest as "
        "unrepairable",
    )
    verify.add_argument(
        "--state-dir", help="--repair: the state root to search (default: the spec's settings)"
    )
    verify.add_argument(
        "--local",
        action="append",
        metavar="DIR",
        help="--repair: another folder to search for copies (repeatable)",
    )
    timeout_option(create, 300.0, "a running app: how long to wait for the upload, seconds")
    prune.add_argument("--keep", type=int_in(0), help="snapshots kept per task and store")
    prune.add_argument("--max-age-h", type=float, help="drop snapshots older than this (hours)")
    prune.add_argument(
        "--grace-h",
        type=float,
        default=1.0,
        help="unreferenced shared files and upload leftovers younger than this stay (1 h)",
    )


def _snapshot_filter(args: argparse.Namespace, manifests: list[Any]) -> list[Any]:
    """Manifests (or unreadable manifests: their task and store come from their path) of
    the ``--task`` and ``--store`` asked for."""
    return [
        m
        for m in manifests
        if (not args.task or m.task in args.task) and (not args.store or m.store in args.store)
    ]


def _unreadable_lines(unreadable: list[Any]) -> list[str]:
    return [f"  UNREADABLE {u.path} ({u.kind}): {u.reason}" for u in unreadable]


def _cmd_snapshot_create(args: argparse.Namespace) -> int:
    from statekeeper.ops.snapshot_app import running_app_status_url, snapshot_app

    settings, spec = snapshot_target(args, need_spec="snapshot create")
    status_url = running_app_status_url(settings)
    if status_url is not None:
        return _snapshot_running(args, settings, status_url)
    storage = snapshot_storage(settings, create=True)
    results = snapshot_app(
        settings, spec.build_topology(), storage, tasks=args.task, stores=args.store
    )
    total = sum(r.bytes_total for r in results)
    uploaded = sum(r.bytes_uploaded for r in results)
    payload = {
        "application_id": settings.application_id,
        "url": storage.url,
        "snapshots": [r.as_dict() for r in results],
        "bytes_total": total,
        "bytes_uploaded": uploaded,
    }
    lines = [
        f"{settings.application_id}: {len(results)} store snapshot(s) to {storage.url}; "
        f"uploaded {uploaded} of {total} bytes"
    ]
    lines += [
        f"  {r.manifest.task} {r.manifest.store}: {r.manifest.snapshot_id} "
        f"({r.manifest.key_count} keys, batch {r.manifest.batch_id}, pause {r.pause_ms:.1f} ms, "
        f"uploaded {r.bytes_uploaded}/{r.bytes_total} bytes)"
        for r in results
    ]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _snapshot_running(args: argparse.Namespace, settings: Any, status_url: str) -> int:
    from statekeeper.errors import ConfigError
    from statekeeper.ops.snapshot_app import snapshot_running_app

    if args.task or args.store:
        raise ConfigError(
            f"app {settings.application_id} is running ({status_url}): it snapshots every "
            "task and store at its next commit; --task/--store apply to a stopped app"
        )
    request = snapshot_running_app(status_url, timeout_s=args.timeout_s)
    payload = {"application_id": settings.application_id, "running": True, **request}
    lines = [
        f"{settings.application_id} (running): snapshot {request['request_id']} "
        f"{request['state']} at batch {request.get('batch_id')}"
    ]
    lines += [
        f"  {r['task']} {r['store']}: {r['snapshot_id']} (pause {r['pause_ms']} ms)"
        for r in request["snapshots"]
    ]
    lines += [f"  FAILED {e['task']} ({e['phase']}): {e['error']}" for e in request["errors"]]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK if request["state"] == "uploaded" else EXIT_ERROR


def _cmd_snapshot_list(args: argparse.Namespace) -> int:
    from statekeeper.snapshots import read_catalog

    settings, _ = snapshot_target(args)
    storage = existing_snapshot_storage(args, settings, {"snapshots": [], "unreadable": []})
    if storage is None:
        return EXIT_OK
    catalog = read_catalog(storage)
    manifests = _snapshot_filter(args, catalog.manifests)
    unreadable = _snapshot_filter(args, catalog.unreadable)
    rows = [
        {
            "snapshot_id": m.snapshot_id,
            "task": m.task,
            "store": m.store,
            "batch_id": m.batch_id,
            "key_count": m.key_count,
            "bytes": m.total_bytes,
            "created_at": m.created_at,
            "marker_offset": m.marker_offset,
            "parent": m.parent,
        }
        for m in manifests
    ]
    lines = [f"{settings.application_id}: {len(rows)} snapshot(s) in {storage.url}"]
    lines += [f"  {r['snapshot_id']}  {r['key_count']} keys  {r['bytes']} bytes" for r in rows]
    lines += _unreadable_lines(unreadable)
    payload = {
        "application_id": settings.application_id,
        "snapshots": rows,
        "unreadable": [u.as_dict() for u in unreadable],
    }
    emit(args, payload, "\n".join(lines))
    return EXIT_OK if not unreadable else 1


def _cmd_snapshot_verify(args: argparse.Namespace) -> int:
    from statekeeper.snapshots import read_catalog, repair_snapshots, verify_snapshot
    from statekeeper.snapshots.repair import default_roots

    settings, _ = snapshot_target(args)
    empty = {"ok": True, "snapshots": [], "unreadable": [], "repair": None}
    storage = existing_snapshot_storage(args, settings, empty)
    if storage is None:
        return EXIT_OK
    catalog = read_catalog(storage)
    unreadable = _snapshot_filter(args, catalog.unreadable)
    results = [verify_snapshot(storage, m) for m in _snapshot_filter(args, catalog.manifests)]
    repair = None
    if args.repair:
        roots = default_roots(settings) + [Path(p) for p in args.local or []]
        repair = repair_snapshots(storage, results, roots)
        results = repair.results
    bad = [r for r in results if not r.ok]
    lines = [
        f"{settings.application_id}: {len(results) - len(bad)} of {len(results)} "
        "snapshot(s) verified"
        + (f", {len(unreadable)} unreadable manifest(s)" if unreadable else "")
    ]
    if repair is not None:
        lines += [
            f"  REPAIRED {f['name']} ({f['sha256'][:12]}) from {f['source']}"
            for f in repair.repaired
        ]
        lines += [
            f"  UNREPAIRABLE {f['name']} ({f['sha256'][:12]}): {f['reason']}; needed by "
            + ", ".join(f["snapshots"])
            for f in repair.unrepairable
        ]
    for r in bad:
        problems = ", ".join(f"{b['name']} ({b['problem']})" for b in r.bad)
        lines.append(f"  BAD {r.manifest.snapshot_id}: {problems}")
    lines += _unreadable_lines(unreadable)
    ok = not bad and not unreadable
    payload = {
        "application_id": settings.application_id,
        "ok": ok,
        "snapshots": [r.as_dict() for r in results],
        "unreadable": [u.as_dict() for u in unreadable],
        "repair": None
        if repair is None
        else {"repaired": repair.repaired, "unrepairable": repair.unrepairable},
    }
    emit(args, payload, "\n".join(lines))
    return EXIT_OK if ok else 1


def _cmd_snapshot_prune(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from statekeeper.errors import ConfigError
    from statekeeper.snapshots import prune

    if args.keep is None and args.max_age_h is None:
        raise ConfigError("snapshot prune needs --keep N and/or --max-age-h H")
    if (args.keep is not None and args.keep < 0) or (args.max_age_h or 0) < 0:
        raise ConfigError("--keep and --max-age-h must be >= 0")
    settings, _ = snapshot_target(args)
    empty = {
        "kept": [],
        "deleted_snapshots": [],
        "deleted_shared": [],
        "deleted_leftovers": [],
        "unverified": [],
        "unreadable": [],
        "shared_kept_because": None,
    }
    storage = existing_snapshot_storage(args, settings, empty)
    if storage is None:
        return EXIT_OK
    report = prune(
        storage,
        keep=args.keep,
        max_age=None if args.max_age_h is None else timedelta(hours=args.max_age_h),
        grace=timedelta(hours=args.grace_h),
    )
    text = (
        f"{settings.application_id}: kept {len(report.kept)}, deleted "
        f"{len(report.deleted_snapshots)} snapshot(s), {len(report.deleted_shared)} shared "
        f"file(s), {len(report.deleted_leftovers)} leftover(s)"
        + (f"; failed verify: {report.unverified}" if report.unverified else "")
        + (
            f"; {len(report.unreadable)} unreadable manifest(s) kept, their files too"
            if report.unreadable
            else ""
        )
        + (
            f"; no shared file deleted: {report.shared_kept_because}"
            if report.shared_kept_because
            else ""
        )
    )
    emit(args, {"application_id": settings.application_id, **report.as_dict()}, text)
    return EXIT_OK
