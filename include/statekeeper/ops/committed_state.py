"""Has an app committed any state yet? Read from its local task directories.

Every commit rewrites ``<state_dir>/<app>/<task>/.checkpoint`` with each logged store's last
batch id (:mod:`statekeeper.state.checkpoint`); opening a task writes it too, with no batch
id while nothing was committed. So an app that never ran has no task directory, and one that
runs but whose tasks have not finished a batch yet has checkpoints without a batch id: in
both cases there is nothing to snapshot or to drill, which is not a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.settings import StatekeeperSettings
from statekeeper.state.checkpoint import read_checkpoint
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.task_id import TaskId


@dataclass
class CommittedState:
    """Per stateful task with a committed batch: its last batch id (the highest of its
    stores'); ``opened``: the stateful task directories found, committed or not."""

    app_dir: Path
    committed: dict[str, int] = field(default_factory=dict)
    opened: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.committed)

    def why_none(self) -> str:
        """Why there is no committed state, in words for a log line or a skip reason."""
        if not self.app_dir.is_dir():
            return f"the app never ran here (no state directory {self.app_dir})"
        if not self.opened:
            return f"no stateful task has opened its state under {self.app_dir} yet"
        return (
            f"none of its {len(self.opened)} stateful task(s) under {self.app_dir} has "
            f"committed a batch yet ({', '.join(self.opened)})"
        )


def committed_state(settings: StatekeeperSettings, topology: Any) -> CommittedState:
    """What the app's stateful tasks have committed, from their ``.checkpoint`` files."""
    app_dir = Path(settings.state_dir) / settings.application_id
    found = CommittedState(app_dir)
    if not app_dir.is_dir():
        return found
    stateful = {sub.id for sub in topology.subtopologies if topology.store_specs(sub.id)}
    for entry in sorted(app_dir.iterdir()):
        tid = TaskId.try_parse(entry.name)
        if not (entry.is_dir() and tid is not None and tid.subtopology in stateful):
            continue
        found.opened.append(entry.name)
        directory = TaskDirectory(settings.state_dir, settings.application_id, entry.name)
        batches = [
            int(e["batch_id"])
            for e in read_checkpoint(directory.checkpoint_file).values()
            if e.get("batch_id") is not None
        ]
        if batches:
            found.committed[entry.name] = max(batches)
    return found
