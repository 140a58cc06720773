"""Changelog record formats: topic names and the commit marker (docs/fencing.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from statekeeper.errors import ChangelogCorruptError
from statekeeper.stores.change_logging import RESERVED_KEY_PREFIX

# Compacted topics reject null keys, so markers use a reserved key no store may write.
MARKER_KEY = RESERVED_KEY_PREFIX + b"commit"


def changelog_topic(application_id: str, store: str) -> str:
    """``<application_id>-<store>-changelog``, as in Kafka Streams."""
    return f"{application_id}-{store}-changelog"


@dataclass(frozen=True)
class CommitMarker:
    """Ends one task batch on one changelog partition: everything before it is committed."""

    batch_id: int
    task_id: str
    store: str
    source_offsets: dict[str, int] = field(default_factory=dict)
    #: The writer's task epoch (changelog.fencing); 0: written without fencing.
    epoch: int = 0

    def encode(self) -> bytes:
        raw = asdict(self)
        if not self.epoch:
            del raw["epoch"]  # byte-identical to markers written before fencing
        return json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes | None, *, where: str) -> CommitMarker:
        try:
            raw = json.loads(data or b"")
            return cls(
                batch_id=int(raw["batch_id"]),
                task_id=str(raw["task_id"]),
                store=str(raw["store"]),
                source_offsets={str(k): int(v) for k, v in raw["source_offsets"].items()},
                epoch=int(raw.get("epoch", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ChangelogCorruptError(
                f"undecodable commit marker at {where}: {exc}; value={(data or b'')[:64]!r}"
            ) from exc
