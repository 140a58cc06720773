"""``statekeeper spec schema|check``: the app spec's JSON Schema, and checking a spec."""

from __future__ import annotations

import argparse
import json

from statekeeper.cli.common import (
    EXIT_OK,
    app_options,
    app_target,
    emit,
    subcommand,
)


def add_spec(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spec = subcommand(commands, "spec", "app specs: their JSON Schema, and checking one")
    sub = spec.add_subparsers(title="spec commands", metavar="ACTION")
    subcommand(
        sub,
        "schema",
        "print the JSON Schema of an app spec (for editors: YAML language servers, taplo)",
        _cmd_spec_schema,
    )
    check = subcommand(
        sub,
        "check",
        "validate an app spec (every field, supervision, settings with --set and the "
        "environment) and build its topology; no broker, no Spark",
        _cmd_spec_check,
    )
    app_options(check)


def _cmd_spec_schema(args: argparse.Namespace) -> int:
    from statekeeper.app.spec import spec_json_schema

    print(json.dumps(spec_json_schema(), indent=None if args.json else 2, sort_keys=True))
    return EXIT_OK


def _cmd_spec_check(args: argparse.Namespace) -> int:
    settings, spec = app_target(args, need_spec="spec check")
    topology = spec.build_topology()
    stores = sorted(getattr(topology, "stores", None) or {})
    payload = {
        "application_id": settings.application_id,
        "spec": str(spec.spec_path),
        "ok": True,
        "stores": stores,
        "bootstrap_servers": settings.bootstrap_servers,
        "state_dir": str(settings.state_dir),
    }
    emit(
        args,
        payload,
        f"{settings.application_id}: spec OK ({len(stores)} store(s): {', '.join(stores)}; "
        f"bootstrap {settings.bootstrap_servers}, state_dir {settings.state_dir})",
    )
    return EXIT_OK
