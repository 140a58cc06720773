"""``statekeeper stores list|inspect``: an app's local state, read-only."""

from __future__ import annotations

import argparse
from typing import Any

from statekeeper.cli.common import (
    EXIT_OK,
    app_options,
    app_target,
    emit,
    int_in,
    subcommand,
)


def add_stores(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stores = subcommand(commands, "stores", "see an app's local state (read-only)")
    sub = stores.add_subparsers(title="store commands", metavar="ACTION")
    listing = subcommand(
        sub,
        "list",
        "every store and each task's local copy (entries approximate)",
        _cmd_stores_list,
    )
    inspect = subcommand(sub, "inspect", "print entries of one store", _cmd_stores_inspect)
    for parser in (listing, inspect):
        app_options(parser)
        parser.add_argument("--state-dir", help="state root (default: the spec's settings)")
    inspect.add_argument("--store", required=True, help="store name")
    which = inspect.add_mutually_exclusive_group()
    which.add_argument("--key", help="one key, as text (serialized with the store's key serde)")
    which.add_argument("--prefix", help="keys starting with this text")
    inspect.add_argument(
        "--limit", type=int_in(1), default=100, help="most entries shown, >= 1 (100)"
    )


def _store_app(args: argparse.Namespace) -> tuple[Any, Any]:
    settings, spec = app_target(args, need_spec="stores")
    return settings, spec.build_topology()


def _cmd_stores_list(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from statekeeper.ops.stores.local_stores import list_local_stores

    settings, topology = _store_app(args)
    copies = list_local_stores(settings, topology)
    lines = [f"{settings.application_id}: {len(copies)} local store copies in {settings.state_dir}"]
    for c in copies:
        entries = "in memory only" if not c.on_disk else f"~{c.approx_entries} entries (approx)"
        if c.on_disk and c.approx_entries is None:
            entries = "entries unknown (its engine has no read-only view)"
        kind = f"{c.kind}:{c.engine}" if c.kind == "custom" else c.kind
        lines.append(f"  {c.store:24} {kind:7} task {c.task:6} {entries}, {c.bytes_on_disk} B")
    payload = {"application_id": settings.application_id, "stores": [asdict(c) for c in copies]}
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _cmd_stores_inspect(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from statekeeper.ops.stores.store_inspector import inspect_store

    settings, topology = _store_app(args)
    entries = inspect_store(
        settings, topology, args.store, key=args.key, prefix=args.prefix, limit=args.limit
    )
    lines = [
        f"  [{e.task}] {e.key!r}"
        + (f" @{e.window_start}" if e.window_start is not None else "")
        + f" = {e.value!r}"
        for e in entries
    ]
    lines.append(f"{len(entries)} entries of {args.store!r}")
    payload = {"store": args.store, "entries": [asdict(e) for e in entries]}
    emit(args, payload, "\n".join(lines))
    return EXIT_OK
