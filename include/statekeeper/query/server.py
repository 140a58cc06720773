"""The executor's interactive-query server (Kafka Streams IQ with KIP-535 stale reads).

One per executor (an executor-services component: ``reconcile``, ``report``, ``close``), bound
to ``settings.query_host:query_port`` (port 0: a free one; :meth:`QueryServer.report` gives the
bound port for the driver to publish in the assignment's executors). It reads the task
stores held on this executor through read-only views (:mod:`statekeeper.query.copies`): the
last commit of an active task, or a standby's copy with its lag. Reads take no task lock and
never block processing. uvicorn serves it (:mod:`statekeeper.query.http_server`). A point
get whose copy is current is answered on the event loop; every other GET (scans, a copy
that must catch up first, a standby's lag from the broker) runs :meth:`QueryServer.answer`
in a worker thread, so the loop never waits on a catch-up, a disk scan or the broker.

Routes (GET; JSON answers; keys as described in :mod:`statekeeper.query.codec`)::

    /stores                                  the stores, their serdes, the tasks held here
    /stores/{store}/get?key=K                one key (key_b64= for raw bytes)
    /stores/{store}/range?from=&to=          keys from..to (inclusive, serialized order;
                                             from_b64/to_b64; either bound may be absent)
    /stores/{store}/prefix?prefix=           keys whose serialized form starts with prefix
                                             (prefix_b64= for raw bytes)
    /stores/{store}/window?key=K&from_ms=&to_ms=   windows of one key starting in the range
    /stores/{store}/count                    approximate entries (RocksDB's estimate)
    /metadata/{store}?key=K                  KeyQueryMetadata: partition, task, active and
                                             standby hosts' query URLs
    /metadata/{store}                        the same for every task of the store

``range``, ``prefix`` and ``window`` return pages: ``page_size`` (default 100, at most
``settings.query_max_page_size``) and, when more entries follow, ``next_page_token``; pass it
back as ``page_token`` with the same other parameters. Pages are read one at a time, so a
commit between two pages shows in the later one (each page carries its copies' batch ids).
``range``, ``prefix`` and ``count`` cover every task of the store held here (they do not
fan out to other executors; ``hosts`` lists where the store's active tasks are).

Which copy answers, and the status codes:

- this executor runs the key's task (per the assignment) and the task directory has a
  committed copy: ``200`` with ``"source": "active", "lag": 0``;
- this executor keeps a standby of the task: ``200`` with ``"source": "standby", "lag": N``
  (N changelog records behind: from ``standby_lag`` when the standby component reports the
  task, else the changelog's end vs the copy's marker offset (:mod:`statekeeper.query.lag`);
  null when neither is known); with ``fresh=true`` a standby answers ``503`` with the
  metadata and the lag;
- the task is this executor's but has no committed copy yet (the active is restoring or
  down, or the standby has not built its copy): ``503`` with the metadata;
- this executor holds nothing of the key's task: ``421 Misdirected Request`` with the
  metadata (``active.query_url`` is where to ask; :class:`~statekeeper.query.client.QueryClient`
  follows it once);
- ``400`` bad input (a key the serde cannot encode or decode, a bad number, a page size over
  the limit, a foreign page token, a route that does not fit the store's kind or an
  in-memory store), ``404`` unknown store or route, ``413`` a key over
  ``settings.query_max_key_bytes``, ``503`` no assignment or no topology yet.

Every answer from a copy carries its ``batch_id``, ``changelog_offset`` and
``source_offsets`` (the commit it shows) and ``task``.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from statekeeper.changelog.records import changelog_topic
from statekeeper.cluster.executor import ExecutorIdentity
from statekeeper.placement.assignment import Assignment
from statekeeper.processing.topology import task_id as make_task_id
from statekeeper.query.codec import (
    BadQueryError,
    b64decode,
    b64encode,
    decode_token,
    decoded,
    encode_bound,
    encode_key,
    encode_prefix,
    encode_token,
    parse_bool,
    parse_int,
)
from statekeeper.query.copies import (
    CopyReader,
    CopyUnavailableError,
    ReadWouldWaitError,
    StoreCopy,
)
from statekeeper.query.http_server import ThreadedHttpServer
from statekeeper.query.lag import ChangelogLag
from statekeeper.query.locate import (
    KeyQueryMetadata,
    StoreEntry,
    TopologyLike,
    host_of,
    key_metadata,
    store_catalog,
    subtopology_partitions,
    task_metadata,
)
from statekeeper.query.supplied_copies import SuppliedStoreCopy
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.task_id import TaskId
from statekeeper.stores.serdes import serde_for

log = logging.getLogger("statekeeper.query")
#: A task's store as a query reads it: RocksDB through a secondary, a custom engine through
#: its supplier's views.
AnyCopy = StoreCopy | SuppliedStoreCopy

DEFAULT_PAGE_SIZE = 100
MAX_WINDOW_TIME = 2**63 - 1
#: ``standby_lag(task_id)``: changelog records a standby copy of the task on this executor
#: is behind (the standby component's report), None when the component does not (or no
#: longer) update that task.
StandbyLag = Callable[[str], "int | None"]


@dataclass(frozen=True)
class _Held:
    """A task's copy this executor can answer from."""

    task: str
    source: str  # "active" | "standby"
    lag: int | None
    copy: AnyCopy

    def describe(self, reader: CopyReader) -> dict[str, Any]:
        return {"task": self.task, "source": self.source, "lag": self.lag, **reader.state.as_dict()}


class _Unavailable(Exception):
    """The task is this executor's, but it has no committed copy to answer from."""


class QueryServer:
    """The query server (see the module docstring). ``topology``: anything with
    ``subtopologies`` (each with an ``id``) and ``store_specs(subtopology_id)``, e.g. the
    app's compiled Topology; without it store routes answer 503 until
    :meth:`set_topology`. ``standby_lag``: see :data:`StandbyLag`."""

    def __init__(
        self,
        settings: StatekeeperSettings,
        state_dir: Path,
        executor: ExecutorIdentity,
        topology: TopologyLike | None = None,
        standby_lag: StandbyLag | None = None,
    ) -> None:
        if settings.query_port is None:
            raise ValueError("settings.query_port is unset: no query server is wanted")
        self.settings = settings
        self.state_dir = Path(state_dir)
        self.executor = executor
        self.standby_lag = standby_lag
        self._catalog: dict[str, StoreEntry] | None = None
        if topology is not None:
            self.set_topology(topology)
        self._assignment: Assignment | None = None
        # Task counts per subtopology of the assignment they were counted in.
        self._partition_counts: tuple[Assignment, dict[int, int]] | None = None
        self._copies: dict[tuple[str, str], AnyCopy] = {}
        self._copies_lock = threading.Lock()
        self._scratch = Path(tempfile.mkdtemp(prefix="statekeeper-query-"))
        self._changelog_lag = ChangelogLag(
            settings.bootstrap_servers, timeout_s=min(2.0, settings.broker_timeout_s)
        )
        self.requests = 0
        self.answered_on_loop = 0
        self.errors = 0
        self._closed_catch_ups = 0  # of views closed since (their counts live on here)
        self._closed_reopens = 0
        self._http = ThreadedHttpServer(
            _asgi_app(self), settings.query_host, settings.query_port, "statekeeper-query-server"
        )
        bound_host, self.port = self._http.host, self._http.port
        # A wildcard bind is no address to call: other executors use the executor's host.
        self.host = executor.host if bound_host in ("0.0.0.0", "::", "") else bound_host
        log.info("query server of executor %s on %s", executor.executor_id, self.url)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- executor-services component -------------------------------------------------------

    def set_topology(self, topology: TopologyLike) -> None:
        self._catalog = store_catalog(topology)

    def reconcile(self, assignment: Assignment) -> None:
        """Take the driver's new assignment; views of tasks no longer held here close."""
        self._assignment = assignment
        me = self.executor.executor_id
        held = {t for t, p in assignment.tasks.items() if p.active == me or me in p.standbys}
        with self._copies_lock:
            gone = [k for k in self._copies if k[0] not in held]
            closing = [self._copies.pop(k) for k in gone]
            for copy in closing:
                self._closed_catch_ups += copy.catch_ups
                self._closed_reopens += copy.reopens
        for copy in closing:
            copy.close()

    def report(self) -> dict[str, Any]:
        """``{"host", "port", "url", "requests", "answered_on_loop", "errors", "views",
        "view_catch_ups", "view_reopens", "assignment_version", "topology"}``: ``host``/``port``
        are what the driver publishes; ``answered_on_loop`` counts the answers given on the
        event loop (the rest went to a thread); the views' catch-ups and reopens count since
        the server started (what following the tasks' writes costs)."""
        assignment = self._assignment
        with self._copies_lock:
            views = len(self._copies)
            catch_ups = self._closed_catch_ups + sum(c.catch_ups for c in self._copies.values())
            reopens = self._closed_reopens + sum(c.reopens for c in self._copies.values())
        return {
            "host": self.host,
            "port": self.port,
            "url": self.url,
            "requests": self.requests,
            "answered_on_loop": self.answered_on_loop,
            "errors": self.errors,
            "views": views,
            "view_catch_ups": catch_ups,
            "view_reopens": reopens,
            "assignment_version": assignment.version if assignment else None,
            "topology": self._catalog is not None,
        }

    def close(self) -> None:
        self._http.close()
        with self._copies_lock:
            copies = list(self._copies.values())
            self._copies.clear()
        for copy in copies:
            copy.close()
        self._changelog_lag.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    # -- what this executor holds ----------------------------------------------------------

    def _require(self) -> tuple[Assignment, dict[str, StoreEntry]]:
        if self._catalog is None:
            raise BadQueryError("the query server has no topology yet", status=503)
        if self._assignment is None:
            raise BadQueryError("the query server has no assignment yet", status=503)
        return self._assignment, self._catalog

    def _partitions(self, assignment: Assignment, subtopology: int) -> int:
        """:func:`subtopology_partitions`, counted once per assignment (every get needs it)."""
        cached = self._partition_counts
        if cached is None or cached[0] is not assignment:
            cached = self._partition_counts = (assignment, {})
        counts = cached[1]
        count = counts.get(subtopology)
        if count is None:
            count = counts[subtopology] = subtopology_partitions(assignment, subtopology)
        return count

    def _entry(self, store: str) -> StoreEntry:
        _, catalog = self._require()
        entry = catalog.get(store)
        if entry is None:
            raise BadQueryError(
                f"no store {store!r}; stores: {sorted(catalog)}", status=404, store=store
            )
        if not entry.queryable and entry.spec.persistent:
            raise BadQueryError(
                f"store {store!r} is a custom {entry.spec.engine} store whose supplier has no "
                "open_read_only(): it cannot be read outside its task (docs/custom-stores.md)"
            )
        if not entry.queryable:
            raise BadQueryError(
                f"store {store!r} is an in-memory store ({entry.spec.kind}): its entries live "
                "only in the task's process; only persistent stores can be queried"
            )
        return entry

    def _copy(self, task: str, entry: StoreEntry, wait: bool = True) -> AnyCopy | None:
        key = (task, entry.spec.name)
        with self._copies_lock:
            copy = self._copies.get(key)
            if copy is None:
                spec = entry.spec
                window = (spec.retention_ms, spec.window_size_ms) if spec.kind == "window" else None
                path = TaskDirectory(self.state_dir, self.settings.application_id, task)
                staleness_s = self.settings.query_max_staleness_ms / 1000
                if spec.supplier is not None:  # a custom engine: its supplier's views
                    copy = SuppliedStoreCopy(spec, path.store_path(spec.name), staleness_s)
                else:
                    copy = StoreCopy(
                        spec.name,
                        path.store_path(spec.name),
                        self._scratch / task,
                        window,  # type: ignore[arg-type]
                        max_staleness_s=staleness_s,
                    )
                self._copies[key] = copy
        try:
            copy.refresh(wait)
        except CopyUnavailableError as exc:
            log.debug("query: %s", exc)
            return None
        return copy if copy.state.committed else None

    def _held(
        self, assignment: Assignment, task: str, entry: StoreEntry, wait: bool = True
    ) -> _Held | None:
        """This executor's copy of ``task`` to answer from; None when the task is not this
        executor's; raises :class:`_Unavailable` when it is but has no committed copy
        (``wait=False``: :class:`ReadWouldWaitError` when the answer needs a wait)."""
        me = self.executor.executor_id
        active = assignment.active_of(task) == me
        if not active and me not in assignment.standbys_of(task):
            return None
        copy = self._copy(task, entry, wait)
        if copy is None:
            raise _Unavailable(
                f"task {task} is {'active' if active else 'a standby'} on executor {me} but "
                "has no committed copy of store "
                f"{entry.spec.name!r} yet ({'restoring or down' if active else 'not built yet'})"
            )
        lag = self.standby_lag(task) if self.standby_lag is not None else None
        if active and lag is None:
            return _Held(task, "active", 0, copy)
        # A standby, or an active whose standby still updates the copy (promotion pending).
        if lag is None and entry.spec.logging_enabled:
            if not wait:
                raise ReadWouldWaitError("the standby's lag is the broker's to tell")
            lag = self._changelog_lag.lag(
                changelog_topic(self.settings.application_id, entry.spec.name),
                TaskId.parse(task).partition,
                copy.state.changelog_offset,
            )
        return _Held(task, "standby", lag, copy)

    def _key_route(
        self, store: str, params: dict[str, str], wait: bool = True
    ) -> tuple[StoreEntry, bytes, KeyQueryMetadata, _Held]:
        """The store, key, metadata and copy a key-based request is answered from (raises
        the 421/503 answers of the module docstring)."""
        entry = self._entry(store)
        assignment, _ = self._require()
        key = encode_key(
            serde_for(entry.spec.key_serde),
            params.get("key"),
            params.get("key_b64"),
            self.settings.query_max_key_bytes,
        )
        fresh = parse_bool(params, "fresh")
        meta = key_metadata(assignment, entry, key, self._partitions(assignment, entry.subtopology))
        if meta is None:
            raise BadQueryError(
                f"the assignment has no task of subtopology {entry.subtopology} yet", status=503
            )
        try:
            held = self._held(assignment, meta.task, entry, wait)
        except _Unavailable as exc:
            raise BadQueryError(str(exc), status=503, metadata=meta.as_dict()) from None
        if held is None:
            raise BadQueryError(
                f"executor {self.executor.executor_id} holds no copy of task {meta.task}; ask "
                "the active host in metadata",
                status=421,
                metadata=meta.as_dict(),
            )
        if fresh and held.source != "active":
            raise BadQueryError(
                f"fresh=true: executor {self.executor.executor_id} holds only a standby copy "
                f"of task {meta.task} (lag {held.lag})",
                status=503,
                metadata=meta.as_dict(),
                lag=held.lag,
            )
        return entry, key, meta, held

    def _local_tasks(
        self, entry: StoreEntry, fresh: bool
    ) -> tuple[list[_Held], list[dict[str, Any]]]:
        """Every copy of the store's tasks held here (standbys unless ``fresh``), and the
        tasks here that cannot answer (with why)."""
        assignment, _ = self._require()
        held: list[_Held] = []
        missing: list[dict[str, Any]] = []
        for partition in range(self._partitions(assignment, entry.subtopology)):
            task = make_task_id(entry.subtopology, partition)
            try:
                h = self._held(assignment, task, entry)
            except _Unavailable as exc:
                missing.append({"task": task, "reason": str(exc)})
                continue
            if h is None:
                continue
            if fresh and h.source != "active":
                missing.append({"task": task, "reason": f"standby (lag {h.lag}); fresh=true"})
                continue
            held.append(h)
        return held, missing

    def _hosts(self, entry: StoreEntry) -> list[str]:
        assignment, _ = self._require()
        urls = set()
        for partition in range(self._partitions(assignment, entry.subtopology)):
            active = assignment.active_of(make_task_id(entry.subtopology, partition))
            host = host_of(assignment, active)
            if host and host["query_url"]:
                urls.add(host["query_url"])
        return sorted(urls)

    # -- routes ----------------------------------------------------------------------------

    def answer(
        self, path: str, query: str, *, wait: bool = True
    ) -> tuple[HTTPStatus, dict[str, Any]]:
        """One GET: its status and JSON body (an answer, never a dropped connection).

        ``wait=False`` (the event loop): answers only a point get from a current copy and
        raises :class:`ReadWouldWaitError` for anything that may block; ask again with
        ``wait=True`` from a thread."""
        started = time.perf_counter()
        params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        body: dict[str, Any]
        try:
            status, body = HTTPStatus.OK, self.route(path, params, wait)
        except ReadWouldWaitError:
            raise
        except BadQueryError as exc:
            status = HTTPStatus(exc.status)
            body = {"error": str(exc), "status": exc.status, **exc.details}
        except CopyUnavailableError as exc:  # closed by a new assignment mid-request
            status = HTTPStatus.SERVICE_UNAVAILABLE
            body = {"error": f"{exc}; ask again", "status": 503}
        except Exception as exc:
            log.exception("query %s?%s failed", path, query)
            self.errors += 1
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            body = {"error": f"{type(exc).__name__}: {exc}", "status": 500}
        self.requests += 1
        if not wait:
            self.answered_on_loop += 1
        body["executor"] = self.executor.executor_id
        body["took_ms"] = round((time.perf_counter() - started) * 1e3, 3)
        return status, body

    def route(self, path: str, params: dict[str, str], wait: bool = True) -> dict[str, Any]:
        """Answer one GET (raises :class:`BadQueryError` for every non-200 answer;
        ``wait=False``: :class:`ReadWouldWaitError` for all but a point get that needs no
        wait)."""
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        if not wait:
            if len(parts) == 3 and parts[0] == "stores" and parts[2] == "get":
                return self.get(parts[1], params, wait=False)
            raise ReadWouldWaitError(f"{path} may read long: answered from a thread")
        if parts == ["stores"]:
            return self.list_stores()
        if len(parts) == 3 and parts[0] == "stores":
            handler = {
                "get": self.get,
                "range": self.range,
                "prefix": self.prefix,
                "window": self.window,
                "count": self.count,
            }.get(parts[2])
            if handler is not None:
                return handler(parts[1], params)
        if len(parts) == 2 and parts[0] == "metadata":
            return self.metadata(parts[1], params)
        raise BadQueryError(
            f"no route {path!r}; routes: /stores, /stores/{{store}}/"
            "get|range|prefix|window|count, /metadata/{store}",
            status=404,
        )

    def list_stores(self) -> dict[str, Any]:
        assignment, catalog = self._require()
        me = self.executor.executor_id
        stores = []
        for _, entry in sorted(catalog.items()):
            doc = entry.describe()
            tasks = []
            for partition in range(self._partitions(assignment, entry.subtopology)):
                task = make_task_id(entry.subtopology, partition)
                if assignment.active_of(task) == me:
                    tasks.append({"task": task, "role": "active"})
                elif me in assignment.standbys_of(task):
                    tasks.append({"task": task, "role": "standby"})
            doc["tasks_here"] = tasks
            stores.append(doc)
        return {
            "executor": me,
            "assignment_version": assignment.version,
            "stores": stores,
        }

    def get(self, store: str, params: dict[str, str], wait: bool = True) -> dict[str, Any]:
        entry, key, meta, held = self._key_route(store, params, wait)
        if entry.spec.kind == "window":
            raise BadQueryError(f"store {store!r} is a window store: use /stores/{store}/window")
        value_serde = serde_for(entry.spec.value_serde)
        with held.copy.reading(wait) as reader:
            raw = reader.kv.get(key)
            answer = {
                "store": store,
                "partition": meta.partition,
                **held.describe(reader),
                **decoded(serde_for(entry.spec.key_serde), key, "key"),
                "found": raw is not None,
            }
        if raw is None:
            answer["value"] = None
        else:
            answer.update(decoded(value_serde, raw, "value"))
        return answer

    def _page_size(self, params: dict[str, str]) -> int:
        limit = self.settings.query_max_page_size
        size = parse_int(params, "page_size", min(DEFAULT_PAGE_SIZE, limit))
        assert size is not None
        if size < 1 or size > limit:
            raise BadQueryError(f"page_size={size}: give 1..{limit} (setting query_max_page_size)")
        return size

    def _kv_entry(self, store: str) -> StoreEntry:
        entry = self._entry(store)
        if entry.spec.kind == "window":
            raise BadQueryError(f"store {store!r} is a window store: use /stores/{store}/window")
        return entry

    def range(self, store: str, params: dict[str, str]) -> dict[str, Any]:
        entry = self._kv_entry(store)
        serde = serde_for(entry.spec.key_serde)
        limit = self.settings.query_max_key_bytes
        lo = encode_bound(serde, params.get("from"), params.get("from_b64"), "from", limit)
        hi = encode_bound(serde, params.get("to"), params.get("to_b64"), "to", limit)
        if lo is not None and hi is not None and lo > hi:
            raise BadQueryError("from is after to (in the keys' serialized order)")
        return self._scan(entry, "range", params, lo, lambda k: hi is None or k <= hi)

    def prefix(self, store: str, params: dict[str, str]) -> dict[str, Any]:
        entry = self._kv_entry(store)
        wanted = encode_prefix(
            params.get("prefix"), params.get("prefix_b64"), self.settings.query_max_key_bytes
        )
        return self._scan(entry, "prefix", params, wanted, lambda k: k.startswith(wanted))

    def _scan(
        self,
        entry: StoreEntry,
        kind: str,
        params: dict[str, str],
        start: bytes | None,
        within: Callable[[bytes], bool],
    ) -> dict[str, Any]:
        """One page of keys from ``start`` on while ``within(key)``, merged over the tasks
        held here, in serialized key order."""
        name = entry.spec.name
        size = self._page_size(params)
        fresh = parse_bool(params, "fresh")
        exclusive = False
        token = params.get("page_token")
        if token:
            after = b64decode(str(decode_token(token, name, kind).get("after", "")), "page_token")
            if start is None or after >= start:
                start, exclusive = after, True
        held, missing = self._local_tasks(entry, fresh)
        found: list[tuple[bytes, bytes, str]] = []
        tasks = []
        for h in held:
            with h.copy.reading() as reader:
                tasks.append(h.describe(reader))
                # page_size + 1 per task: enough to fill the page and to know if more follow.
                for key, value in _take(reader.kv.after(start, exclusive), size + 1):
                    if not within(key):
                        break
                    found.append((key, value, h.task))
        page = heapq.nsmallest(size + 1, found)
        more = len(page) > size
        page = page[:size]
        key_serde = serde_for(entry.spec.key_serde)
        value_serde = serde_for(entry.spec.value_serde)
        answer: dict[str, Any] = {
            "store": name,
            "entries": [
                {**decoded(key_serde, k, "key"), **decoded(value_serde, v, "value"), "task": t}
                for k, v, t in page
            ],
            "tasks": tasks,
            "unavailable": missing,
            "hosts": self._hosts(entry),
            "next_page_token": encode_token(
                {"store": name, "kind": kind, "after": b64encode(page[-1][0])}
            )
            if more
            else None,
        }
        return answer

    def window(self, store: str, params: dict[str, str]) -> dict[str, Any]:
        entry = self._entry(store)
        if entry.spec.kind != "window":
            raise BadQueryError(
                f"store {store!r} is a {entry.spec.kind} store: use get, range or prefix"
            )
        time_from = parse_int(params, "from_ms", 0)
        time_to = parse_int(params, "to_ms", MAX_WINDOW_TIME)
        assert time_from is not None and time_to is not None
        if time_from < 0 or time_to < 0:
            raise BadQueryError("from_ms and to_ms must be >= 0")
        if time_from > time_to:
            raise BadQueryError(f"from_ms={time_from} is after to_ms={time_to}")
        if time_to > MAX_WINDOW_TIME:
            raise BadQueryError(f"to_ms must be <= {MAX_WINDOW_TIME}")
        size = self._page_size(params)
        _, key, meta, held = self._key_route(store, params)
        token = params.get("page_token")
        if token:
            after = decode_token(token, store, "window").get("after_ms")
            if not isinstance(after, int):
                raise BadQueryError("page_token is not a token this server handed out")
            time_from = max(time_from, after + 1)
        value_serde = serde_for(entry.spec.value_serde)
        with held.copy.reading() as reader:
            assert reader.window is not None
            windows = list(_take(reader.window.fetch_range(key, time_from, time_to), size + 1))
            answer: dict[str, Any] = {
                "store": store,
                "partition": meta.partition,
                **held.describe(reader),
                **decoded(serde_for(entry.spec.key_serde), key, "key"),
            }
        more = len(windows) > size
        windows = windows[:size]
        answer["windows"] = [
            {
                "start_ms": start,
                "end_ms": start + (entry.spec.window_size_ms or 0),
                **decoded(value_serde, value, "value"),
            }
            for start, value in windows
        ]
        answer["next_page_token"] = (
            encode_token({"store": store, "kind": "window", "after_ms": windows[-1][0]})
            if more
            else None
        )
        return answer

    def count(self, store: str, params: dict[str, str]) -> dict[str, Any]:
        entry = self._entry(store)
        held, missing = self._local_tasks(entry, parse_bool(params, "fresh"))
        total = 0
        tasks = []
        for h in held:
            with h.copy.reading() as reader:
                n = reader.kv.approximate_num_entries()
                if reader.window is not None:
                    n = max(0, n - 1)  # the window store's stream-time bookkeeping entry
                total += n
                tasks.append({**h.describe(reader), "count": n})
        return {
            "store": store,
            "count": total,
            "approximate": True,
            "tasks": tasks,
            "unavailable": missing,
            "hosts": self._hosts(entry),
        }

    def metadata(self, store: str, params: dict[str, str]) -> dict[str, Any]:
        assignment, catalog = self._require()
        entry = catalog.get(store)
        if entry is None:
            raise BadQueryError(f"no store {store!r}; stores: {sorted(catalog)}", status=404)
        if params.get("key") is None and params.get("key_b64") is None:
            partitions = self._partitions(assignment, entry.subtopology)
            return {
                "store": store,
                "tasks": [
                    task_metadata(assignment, store, entry.subtopology, p).as_dict()
                    for p in range(partitions)
                ],
            }
        key = encode_key(
            serde_for(entry.spec.key_serde),
            params.get("key"),
            params.get("key_b64"),
            self.settings.query_max_key_bytes,
        )
        meta = key_metadata(assignment, entry, key, self._partitions(assignment, entry.subtopology))
        if meta is None:
            raise BadQueryError(
                f"the assignment has no task of subtopology {entry.subtopology} yet", status=503
            )
        return meta.as_dict()


def _take(items: Iterator[Any], n: int) -> Iterator[Any]:
    for i, item in enumerate(items):
        if i >= n:
            return
        yield item


def _asgi_app(server: QueryServer) -> Any:
    """The ASGI application uvicorn serves. A GET is first answered on the event loop with
    ``wait=False`` (a point get from a current copy: no thread hop, ~0.1 ms less CPU per get);
    what would block goes to :meth:`QueryServer.answer` in a worker thread."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "GET":
            status = HTTPStatus.METHOD_NOT_ALLOWED
            body: dict[str, Any] = {"error": "only GET is served", "status": int(status)}
        else:
            # The path as sent (still percent-encoded: route() decodes each part); ASGI
            # keeps the query string apart.
            path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
            query = scope.get("query_string", b"").decode("latin-1")
            try:
                status, body = server.answer(path, query, wait=False)
            except ReadWouldWaitError:
                status, body = await asyncio.to_thread(server.answer, path, query)
        data = json.dumps(body).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": int(status), "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app
