"""``statekeeper generate``: produce an app's input with the generator its spec names
(``generator: file.py:function``), imported by path (sys.path is left alone)."""

from __future__ import annotations

import argparse
import sys

from statekeeper.cli.common import EXIT_ERROR, EXIT_OK, app_options, app_target


def add_generate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help_text = (
        "produce input for an app with the generator its spec names (generator:); the "
        "options not listed below go to the generator"
    )
    # Not `subcommand()`: --help also prints the generator's options, so it is ours to handle.
    generate = commands.add_parser(
        "generate",
        help=help_text,
        description=help_text,
        add_help=False,
        usage="statekeeper generate --app SPEC [--set NAME=VALUE] [--bootstrap HOST:PORT] "
        "[--json] [the generator's options ...]",
    )
    # The generator's options are passed on as given (main() collects the unknown ones into
    # `options`): none may be taken for an abbreviation of ours.
    generate.allow_abbrev = False
    generate.set_defaults(parser=generate, handler=_cmd_generate, options=[], passes_on=True)
    generate.add_argument(
        "-h",
        "--help",
        action="store_true",
        help="show this help and, with --app, the generator's options",
    )
    app_options(generate, required=False)
    generate.add_argument(
        "--json", action="store_true", help="print machine-readable JSON (the generator's summary)"
    )


def _cmd_generate(args: argparse.Namespace) -> int:
    """Run the spec's generator with the options it was given, the bootstrap servers from the
    app's settings (defaults < spec < env < --bootstrap/--set) and --json; its exit code."""
    if args.help:
        args.parser.print_help()
        if args.app is None:
            return EXIT_OK
        print(flush=True)
    elif args.app is None:
        args.parser.error("the following arguments are required: --app")
    settings, spec = app_target(args, need_spec="generate")
    generator = spec.app_function("generator")
    if args.help:
        options = ["--help"]
    else:
        options = ["--bootstrap", settings.bootstrap_servers, *args.options]
        options += ["--json"] if args.json else []
    try:
        return int(generator(options) or EXIT_OK)
    except SystemExit as exc:  # the generator's own parser: --help, a bad option
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or EXIT_OK)
        print(exc.code, file=sys.stderr)
        return EXIT_ERROR
