"""Input for the word_count app: text lines, some keyed by a source id, a few malformed.

    python -m spark_apps.word_count.generator --bootstrap 127.0.0.1:9092 --count 100000

(or ``statekeeper generate --app word-count ...``: the spec's ``generator:`` names
:func:`main`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from statekeeper.generate import command
from statekeeper.generate.records import GeneratedRecord, check_share

from .vocabulary import sentence

DEFAULT_TOPIC = "lines"
INTERVAL_MS = 10

#: Malformed kinds; each breaks the app's one rule "value is valid UTF-8 text".
MALFORMED_KINDS = ("invalid_utf8", "null_value")

_INVALID_UTF8 = (b"\xff\xfe\xfa", b"\xc3\x28", b"\xe2\x82", b"\x80abc", b"\xf0\x28\x8c\xbc")


def word_count_lines(
    count: int,
    *,
    seed: int = 1,
    start_ms: int = 1_700_000_000_000,
    malformed_share: float = 0.01,
    keyed_share: float = 0.5,
    sources: int = 8,
    interval_ms: int = INTERVAL_MS,
) -> Iterator[GeneratedRecord]:
    """Yield ``count`` lines (malformed ones included), the same ones for the same arguments.

    Keys are null or ``source-NN`` (``keyed_share`` of the lines). Exactly
    ``round(count * malformed_share)`` records are malformed, spread at random, cycling
    through :data:`MALFORMED_KINDS`. Timestamps rise from ``start_ms`` by about
    ``interval_ms`` per line. About 1 % of valid lines are empty or punctuation only.
    """
    check_share("malformed_share", malformed_share)
    check_share("keyed_share", keyed_share)
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rng = random.Random(seed)
    malformed_at = set(rng.sample(range(count), round(count * malformed_share)))
    kinds = 0
    ts = start_ms
    draw = rng.random
    source_keys = [f"source-{n:02d}".encode() for n in range(sources)]
    for i in range(count):
        ts += int(draw() * (2 * interval_ms + 1))
        key = source_keys[int(draw() * sources)] if draw() < keyed_share else None
        if i in malformed_at:
            kind = MALFORMED_KINDS[kinds % len(MALFORMED_KINDS)]
            kinds += 1
            if kind == "null_value":
                value = None
            else:
                text = sentence(rng).encode()
                cut = rng.randrange(len(text) + 1)
                value = text[:cut] + rng.choice(_INVALID_UTF8) + text[cut:]
                if _is_utf8(value):  # the insertion completed a multi-byte character
                    value += b"\xff"
            yield GeneratedRecord(key, value, ts, malformed=kind)
            continue
        roll = draw()
        if roll < 0.005:
            line = ""
        elif roll < 0.01:
            line = rng.choice(("...", " -- ", "?!", "  "))
        else:
            line = sentence(rng)
        yield GeneratedRecord(key, line.encode(), ts)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Produce word_count lines to Kafka; the exit code."""
    parser = command.generator_parser(
        "statekeeper generate --app word-count",
        "text lines for word_count: Zipf-distributed words, keys null or a source id",
        topic=DEFAULT_TOPIC,
        malformed=0.01,
    )
    parser.add_argument(
        "--count", type=command.positive_int, default=100_000, help="records (default: 100000)"
    )
    parser.add_argument(
        "--keyed-share",
        type=command.share,
        default=0.5,
        help="share of lines keyed by a source id, the rest have null keys (default: 0.5)",
    )
    args = parser.parse_args(argv)
    first_ms = command.start_ms(args, args.count * INTERVAL_MS)
    records = word_count_lines(
        args.count,
        seed=args.seed,
        start_ms=first_ms,
        malformed_share=args.malformed_share,
        keyed_share=args.keyed_share,
        interval_ms=INTERVAL_MS,
    )
    return command.produce_command(args, "word-count", records, args.count, first_ms)


if __name__ == "__main__":
    raise SystemExit(main())
