"""A topology's fingerprint: what its state depends on, as plain JSON.

Per store: kind, serdes, logging and changelog topic, window size/grace/retention, the
subtopology it belongs to, and the config that only tunes it (caching, read cache, LRU
capacity, changelog topic configs). Per subtopology: the topics it reads. The topology's
source topics (with their partition counts, when known) and repartition topics. Everything
is sorted and holds no timestamp, so one topology always gives the same JSON and the same
:attr:`TopologyFingerprint.digest`.

The app records it in its state root at start (:mod:`statekeeper.versions.recorded`) and in
every snapshot manifest; :mod:`statekeeper.versions.compatibility` compares two of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from statekeeper.changelog.records import changelog_topic
from statekeeper.errors import ConfigError
from statekeeper.processing.task_state_store import STORE_PREFIX
from statekeeper.processing.topology import Topology
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.serdes import serde_name

#: The JSON layout's version; a reader takes any version, ignoring fields it does not know.
FORMAT_VERSION = 1


class FingerprintError(ConfigError):
    """A recorded fingerprint cannot be read (not JSON, or fields missing)."""


@dataclass(frozen=True)
class WindowFingerprint:
    """A window store's window size, grace and retention, in milliseconds."""

    size_ms: int
    grace_ms: int
    retention_ms: int


@dataclass(frozen=True)
class StoreFingerprint:
    """One store as its state depends on it. ``internal``: the per-subtopology task-state
    store (``sk-task-state-<id>``: stream time, punctuation times, dedupe positions)."""

    name: str
    kind: str  # rocksdb | memory | lru | window | custom
    key_serde: str
    value_serde: str
    logging: bool
    changelog_topic: str | None
    subtopology: int
    persistent: bool
    window: WindowFingerprint | None = None
    internal: bool = False
    capacity: int | None = None
    caching_max_bytes: int = 0
    read_cache_max_bytes: int = 0
    topic_configs: dict[str, str] = field(default_factory=dict)
    #: A custom store's engine and supplier (``StoreSupplier.describe()``); None: built in.
    engine: str | None = None


@dataclass(frozen=True)
class SubtopologyFingerprint:
    """One subtopology: its id and every topic it reads (repartition topics included)."""

    id: int
    source_topics: tuple[str, ...]
    stores: tuple[str, ...]


@dataclass(frozen=True)
class TopologyFingerprint:
    """What an app's state depends on (module docstring). ``source_partitions`` is None
    when the partition counts were not known (a topology read without a broker)."""

    application_id: str
    stores: tuple[StoreFingerprint, ...]
    subtopologies: tuple[SubtopologyFingerprint, ...]
    source_topics: tuple[str, ...]
    repartition_topics: tuple[str, ...]
    source_partitions: dict[str, int] | None = None
    format_version: int = FORMAT_VERSION

    def store(self, name: str) -> StoreFingerprint | None:
        return next((s for s in self.stores if s.name == name), None)

    def subtopology(self, subtopology_id: int) -> SubtopologyFingerprint | None:
        return next((s for s in self.subtopologies if s.id == subtopology_id), None)

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON of everything but the partition counts (they change
        with the topics, not with the app's code)."""
        body = self.to_dict()
        del body["source_partitions"], body["format_version"]
        for store in body["stores"]:  # built-in stores hash as before custom engines existed
            if store["engine"] is None:
                del store["engine"]
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def with_partitions(self, partitions: dict[str, int]) -> TopologyFingerprint:
        """This fingerprint with the partition counts of its source topics (others ignored)."""
        known = {t: int(partitions[t]) for t in self.source_topics if t in partitions}
        return dataclasses.replace(self, source_partitions=dict(sorted(known.items())))

    def to_dict(self) -> dict[str, Any]:
        """Its JSON values (lists, dicts, strings, numbers), as read back; no digest."""
        result: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return result

    def to_json(self) -> str:
        """Sorted, indented JSON with the digest (readers recompute it)."""
        return json.dumps({**self.to_dict(), "digest": self.digest}, sort_keys=True, indent=1)

    @classmethod
    def from_dict(cls, raw: Any, where: str = "topology fingerprint") -> TopologyFingerprint:
        """Read :meth:`to_dict`'s (or :meth:`to_json`'s parsed) form; unknown fields are
        ignored (a newer statekeeper may record more), missing ones raise
        :class:`FingerprintError` naming ``where``."""
        try:
            partitions = raw.get("source_partitions")
            return cls(
                application_id=str(raw["application_id"]),
                stores=tuple(_store_from(s) for s in raw["stores"]),
                subtopologies=tuple(_subtopology_from(s) for s in raw["subtopologies"]),
                source_topics=tuple(raw["source_topics"]),
                repartition_topics=tuple(raw.get("repartition_topics") or ()),
                source_partitions=None
                if partitions is None
                else {str(t): int(n) for t, n in partitions.items()},
                format_version=int(raw.get("format_version", FORMAT_VERSION)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FingerprintError(
                f"{where} cannot be read (missing or bad field: {type(exc).__name__}: {exc})"
            ) from exc

    @classmethod
    def from_json(cls, text: str, where: str = "topology fingerprint") -> TopologyFingerprint:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise FingerprintError(f"{where} is not valid JSON: {exc}") from exc
        return cls.from_dict(raw, where)


def fingerprint_of(
    topology: Topology, application_id: str, source_partitions: dict[str, int] | None = None
) -> TopologyFingerprint:
    """The fingerprint of a compiled topology run as ``application_id``; with the source
    topics' partition counts when given (only those of source topics are kept)."""
    stores: list[StoreFingerprint] = []
    subs: list[SubtopologyFingerprint] = []
    for sub in topology.subtopologies:
        specs = topology.store_specs(sub.id)
        subs.append(
            SubtopologyFingerprint(
                id=sub.id,
                source_topics=tuple(sorted(sub.source_topics(application_id))),
                stores=tuple(sorted(spec.name for spec in specs)),
            )
        )
        stores += [_store(spec, sub.id, application_id) for spec in specs]
    found = TopologyFingerprint(
        application_id=application_id,
        stores=tuple(sorted(stores, key=lambda s: s.name)),
        subtopologies=tuple(sorted(subs, key=lambda s: s.id)),
        source_topics=tuple(sorted(topology.source_topics(application_id))),
        repartition_topics=tuple(sorted(topology.internal_topics(application_id))),
    )
    return found if source_partitions is None else found.with_partitions(source_partitions)


def _store(spec: StoreSpec, subtopology: int, application_id: str) -> StoreFingerprint:
    window = None
    if spec.kind == "window":
        assert spec.window_size_ms is not None and spec.retention_ms is not None
        window = WindowFingerprint(spec.window_size_ms, spec.grace_ms, spec.retention_ms)
    return StoreFingerprint(
        name=spec.name,
        kind=spec.kind,
        key_serde=serde_name(spec.key_serde),
        value_serde=serde_name(spec.value_serde),
        logging=spec.logging_enabled,
        changelog_topic=changelog_topic(application_id, spec.name)
        if spec.logging_enabled
        else None,
        subtopology=subtopology,
        persistent=spec.persistent,
        window=window,
        internal=spec.name.startswith(STORE_PREFIX),
        capacity=spec.capacity,
        caching_max_bytes=spec.caching_max_bytes,
        read_cache_max_bytes=spec.read_cache_max_bytes if spec.kind == "rocksdb" else 0,
        topic_configs=dict(sorted(spec.topic_configs.items())),
        engine=spec.supplier.describe() if spec.supplier is not None else None,
    )


def _store_from(raw: dict[str, Any]) -> StoreFingerprint:
    window = raw.get("window")
    return StoreFingerprint(
        **{
            **_known(StoreFingerprint, raw),
            "window": WindowFingerprint(**_known(WindowFingerprint, window)) if window else None,
            "topic_configs": dict(raw.get("topic_configs") or {}),
        }
    )


def _subtopology_from(raw: dict[str, Any]) -> SubtopologyFingerprint:
    return SubtopologyFingerprint(
        id=int(raw["id"]),
        source_topics=tuple(raw["source_topics"]),
        stores=tuple(raw.get("stores") or ()),
    )


def _known(kind: type, raw: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``raw`` that are fields of the dataclass ``kind``."""
    names = {f.name for f in fields(kind)}
    return {k: v for k, v in raw.items() if k in names}
