"""Task epochs that only grow, across driver restarts (docs/fencing.md).

Placement epochs count task moves within one run of the driver; changelog fencing needs them
to grow across runs too, or a restarted driver's tasks would be fenced by the epochs of the
run before. Each run takes a *generation* — one more than the last run's, recorded in the
app's Spark checkpoint directory, and never below the wall clock in seconds (so a lost
checkpoint directory still gives a newer generation) — and its epochs start at
``generation * EPOCH_STRIDE``. A task that finds a newer epoch in its changelogs than its
own stops without writing (``StaleEpochError``): two drivers of one app cannot both write.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from statekeeper.atomic_file import replace_text

#: Epochs of one run: generation * EPOCH_STRIDE + placement epoch (moves of a task per run
#: stay far below it).
EPOCH_STRIDE = 1_000_000
GENERATION_FILE = "statekeeper-generation.json"


def next_epoch_base(checkpoint_dir: Path) -> int:
    """Take this run's generation (recorded before it is used) and return its epoch base."""
    path = checkpoint_dir / GENERATION_FILE
    previous = 0
    try:
        previous = int(json.loads(path.read_text())["generation"])
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} is unreadable ({exc}); delete it to start a new generation"
        ) from exc
    generation = max(previous + 1, int(time.time()))
    replace_text(path, json.dumps({"generation": generation}))
    return generation * EPOCH_STRIDE
