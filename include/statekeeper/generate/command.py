"""The command line every data generator shares: options, producing, the summary.

An app's generator adds its own options to :func:`generator_parser`, builds its records and
hands them to :func:`produce_command`, which produces them, prints the summary (text or
``--json``) and turns a :class:`~statekeeper.errors.StatekeeperError` into one line on
stderr and exit code 2, as the ``statekeeper`` command does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable

from statekeeper.errors import StatekeeperError
from statekeeper.generate.records import GeneratedRecord

EXIT_OK = 0
EXIT_ERROR = 2  # the statekeeper command's code for a StatekeeperError


def share(text: str) -> float:
    """argparse type: a fraction between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


def malformed_share(text: str) -> float:
    """argparse type: a fraction in [0, 1) (some records must be valid)."""
    value = share(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def generator_parser(
    prog: str, description: str, *, topic: str, malformed: float
) -> argparse.ArgumentParser:
    """A parser with the options every generator takes; the caller adds its own."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--bootstrap",
        help="Kafka bootstrap servers (default: STATEKEEPER_BOOTSTRAP_SERVERS or 127.0.0.1:9092)",
    )
    parser.add_argument("--topic", default=topic, help=f"input topic (default: {topic})")
    parser.add_argument(
        "--partitions",
        type=positive_int,
        default=4,
        help="partitions of the topic; created if missing (default: 4)",
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    parser.add_argument(
        "--malformed-share",
        type=malformed_share,
        default=malformed,
        help=f"share of malformed records (default: {malformed})",
    )
    parser.add_argument(
        "--start-ms",
        type=int,
        help="event time of the first record, epoch ms (default: chosen so the data ends "
        "about now); pass it with --seed to reproduce a run exactly",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="broker timeout, seconds (default: 60)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    return parser


def start_ms(args: argparse.Namespace, span_ms: int) -> int:
    """``--start-ms``, else a whole second ``span_ms`` before now (the data ends about now)."""
    if args.start_ms is not None:
        return int(args.start_ms)
    return (int(time.time() * 1000) - span_ms) // 1000 * 1000


def produce_command(
    args: argparse.Namespace,
    generator: str,
    records: Iterable[GeneratedRecord],
    total: int | None,
    first_ms: int,
) -> int:
    """Produce ``records`` as the parsed options say, print the summary; the exit code."""
    from statekeeper.generate.producer import produce

    try:
        summary = produce(
            _bootstrap(args),
            args.topic,
            records,
            partitions=args.partitions,
            total=total,
            progress=not args.json and not args.no_progress and sys.stderr.isatty(),
            timeout_s=args.timeout,
        )
    except StatekeeperError as exc:
        print(f"statekeeper: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        payload = {"generator": generator, "seed": args.seed, "start_ms": first_ms}
        payload.update(summary.as_dict())
        print(json.dumps(payload, sort_keys=True, default=str))
    else:
        print(f"{summary.describe()}\nreproduce with --seed {args.seed} --start-ms {first_ms}")
    return EXIT_OK


def _bootstrap(args: argparse.Namespace) -> str:
    if args.bootstrap:
        return str(args.bootstrap)
    from statekeeper.settings import load_settings

    return load_settings().bootstrap_servers
