"""The interactive-query server over real RocksDB task stores and real HTTP on loopback.

Stores are written with the store classes (``build_store``: the same on-disk layout and
commit WriteBatch a task writes) into each executor's own state directory; the servers read
them through secondary views while they stay open for writing.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spark_apps.word_count_sqlite.sqlite_store import SQLiteStoreSupplier
from statekeeper.cluster.executor import ExecutorIdentity
from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.placement.assignment import Assignment, ExecutorEndpoint, TaskPlacement
from statekeeper.processing.topology import Subtopology, Topology
from statekeeper.query.client import QueryClient, QueryFailedError
from statekeeper.query.copies import ReadWouldWaitError
from statekeeper.query.server import QueryServer
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.task_id import TaskId
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores, StoreSpec, build_store

APP = "iq"
COUNTS = Stores.persistent("counts").with_serdes("str", "int")
CLICKS = Stores.window("clicks", size_ms=1_000, retention_ms=600_000).with_serdes("str", "int")
BY_ID = Stores.persistent("by-id").with_serdes("int", "json")
RAW = Stores.persistent("raw").with_serdes("bytes", "bytes")
MEMORY = Stores.in_memory("mem").with_serdes("str", "int")
# The same stores in a custom engine (docs/custom-stores.md): read through the supplier's views.
SQL_COUNTS = Stores.custom("sql-counts", SQLiteStoreSupplier()).with_serdes("str", "int")
SQL_CLICKS = Stores.window(
    "sql-clicks", size_ms=1_000, retention_ms=600_000, supplier=SQLiteStoreSupplier()
).with_serdes("str", "int")
WRITTEN = [COUNTS, CLICKS, BY_ID, RAW, SQL_COUNTS, SQL_CLICKS]
SPECS = [*WRITTEN, MEMORY]
TOPOLOGY = Topology(
    {}, {s.name: s for s in SPECS}, {}, [Subtopology(0, [], [], [], [s.name for s in SPECS])]
)
PARTITIONS = 2
USERS = [f"user-{i:03d}" for i in range(250)]
PAGE_LIMIT = 50
KEY_LIMIT = 64


def partition_of(key: bytes) -> int:
    return partition_for_key(key, PARTITIONS)


def write_task(state_dir: Path, task: str, batch: int, value_offset: int = 0) -> None:
    """Commit every store of ``task`` (the keys of its partition) as ``batch``."""
    partition = TaskId.parse(task).partition
    meta = StoreMetadata(100 + batch, batch, {"in:0": batch})
    for spec in WRITTEN:
        store = build_store(spec, TaskDirectory(state_dir, APP, task).store_path(spec.name), None)
        try:
            for i, user in enumerate(USERS):
                if spec is BY_ID:
                    if partition_of(BY_ID_SERDE_KEY(i)) == partition:
                        store.put(i, {"user": user, "v": i + value_offset})
                elif spec is RAW:
                    raw = b"\xff\x00" + bytes([i % 256])
                    if partition_of(raw) == partition:
                        store.put(raw, b"v" + raw)
                elif partition_of(user.encode()) == partition:
                    if spec in (CLICKS, SQL_CLICKS):
                        for start in (0, 1_000, 2_000, 3_000):
                            store.put(user, i + start + value_offset, start)
                    else:
                        store.put(user, i + value_offset)
            store.commit(meta)
        finally:
            store.close()


def BY_ID_SERDE_KEY(i: int) -> bytes:  # noqa: N802 - reads as the key of BY_ID
    return i.to_bytes(8, "big", signed=True)


@dataclass
class Cluster:
    """Three executors' query servers; executor 3 holds no task."""

    servers: dict[str, QueryServer]
    state_dirs: dict[str, Path]
    lags: dict[str, dict[str, int]] = field(default_factory=dict)

    def url(self, executor: str) -> str:
        return self.servers[executor].url

    def client(self, executor: str) -> QueryClient:
        return QueryClient(self.url(executor))

    def assign(self, tasks: dict[str, TaskPlacement], version: int = 1) -> Assignment:
        assignment = Assignment(
            APP,
            version,
            tasks,
            {e: ExecutorEndpoint(e, "127.0.0.1", s.port) for e, s in self.servers.items()},
        )
        for server in self.servers.values():
            server.reconcile(assignment)
        return assignment


def settings_for(state_dir: Path, **overrides: Any) -> StatekeeperSettings:
    return StatekeeperSettings(
        state_dir=state_dir,
        application_id=APP,
        query_port=0,
        query_max_page_size=PAGE_LIMIT,
        query_max_key_bytes=KEY_LIMIT,
        # No broker here: a standby lag the component does not report is asked of the
        # changelog's end, which fails fast and answers null.
        bootstrap_servers="127.0.0.1:9",
        broker_timeout_s=1.0,
        **overrides,
    )


DEFAULT_PLACEMENT = {
    "0_0": TaskPlacement("1", ("2",)),
    "0_1": TaskPlacement("2", ("1",)),
}


def _running_cluster(base: Path) -> Iterator[Cluster]:
    dirs = {e: base / f"executor-{e}" for e in ("1", "2", "3")}
    # Actives at batch 5; standbys' copies at batch 4 with older values.
    write_task(dirs["1"], "0_0", 5)
    write_task(dirs["2"], "0_0", 4, value_offset=-1000)
    write_task(dirs["2"], "0_1", 5)
    write_task(dirs["1"], "0_1", 4, value_offset=-1000)
    lags: dict[str, dict[str, int]] = {"1": {"0_1": 7}, "2": {"0_0": 3}, "3": {}}
    servers = {
        e: QueryServer(
            settings_for(d), d, ExecutorIdentity(e, "127.0.0.1", 0), TOPOLOGY, lags[e].get
        )
        for e, d in dirs.items()
    }
    c = Cluster(servers, dirs, lags)
    c.assign(dict(DEFAULT_PLACEMENT))
    try:
        yield c
    finally:
        for server in servers.values():
            server.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster a test may change (assignment, lags, stores)."""
    yield from _running_cluster(tmp_path)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster for tests that only read."""
    yield from _running_cluster(tmp_path_factory.mktemp("shared"))


def task_of(user: str) -> str:
    return f"0_{partition_of(user.encode())}"


def users_of(task: str) -> list[str]:
    return [u for u in USERS if task_of(u) == task]


# -- point gets ------------------------------------------------------------------------------


def test_get_answers_from_the_active_copy_with_its_commit(shared: Cluster) -> None:
    user = users_of("0_0")[3]
    body = shared.client("1").get("counts", user)
    assert body["source"] == "active" and body["lag"] == 0
    assert body["task"] == "0_0" and body["partition"] == 0 and body["executor"] == "1"
    assert body["found"] and body["key"] == user and body["value"] == USERS.index(user)
    assert body["batch_id"] == 5 and body["changelog_offset"] == 105
    assert body["source_offsets"] == {"in:0": 5}
    nobody = next(f"nobody-{i}" for i in range(100) if task_of(f"nobody-{i}") == "0_0")
    missing = shared.client("1").get("counts", nobody)
    assert missing["found"] is False and missing["value"] is None and missing["task"] == "0_0"


def test_other_serdes_int_json_and_bytes_keys(shared: Cluster) -> None:
    client = shared.client("1")
    for i in range(8):
        answer = client.get("by-id", i)
        active = answer["source"] == "active"
        assert answer["task"] == f"0_{partition_of(BY_ID_SERDE_KEY(i))}"
        assert answer["key"] == i
        assert answer["value"] == {"user": USERS[i], "v": i if active else i - 1000}
    raw = b"\xff\x00\x07"
    key_b64 = base64.urlsafe_b64encode(raw).decode()
    body = client.get("raw", key_b64=key_b64)
    assert body["key_b64"] == key_b64
    assert base64.urlsafe_b64decode(body["value_b64"]) == b"v" + raw


def test_a_standby_answers_with_its_lag_and_fresh_refuses_it(cluster: Cluster) -> None:
    user = users_of("0_1")[0]
    body = cluster.client("1").get("counts", user)  # executor 1 keeps 0_1's standby
    assert body["source"] == "standby" and body["lag"] == 7
    assert body["batch_id"] == 4 and body["value"] == USERS.index(user) - 1000

    refused = cluster.client("1").get_answer("counts", user, fresh=True)
    assert refused.status == 503 and refused.url == cluster.url("1")
    assert refused.body["lag"] == 7
    assert refused.body["metadata"]["task"] == "0_1"
    assert refused.body["metadata"]["active"]["query_url"] == cluster.url("2")
    with pytest.raises(QueryFailedError) as failed:
        cluster.client("1").get("counts", user, fresh=True)
    assert failed.value.status == 503 and "fresh=true" in str(failed.value)

    # The lag is unknown when the standby component does not report the task.
    cluster.lags["1"].clear()
    assert cluster.client("1").get("counts", user)["lag"] is None


def test_a_host_without_the_task_answers_421_and_the_client_follows_it(shared: Cluster) -> None:
    user = users_of("0_1")[2]
    client = shared.client("3")
    raw = client.request("/stores/counts/get", {"key": user})
    assert raw.status == 421
    assert raw.body["metadata"]["active"] == {
        "executor": "2",
        "host": "127.0.0.1",
        "query_url": shared.url("2"),
    }
    assert [s["executor"] for s in raw.body["metadata"]["standbys"]] == ["1"]

    followed = client.get_answer("counts", user)
    assert followed.status == 200 and followed.url == shared.url("2")
    assert followed.body["source"] == "active" and followed.body["value"] == USERS.index(user)


def test_active_without_a_committed_copy_answers_503_with_the_metadata(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Executor 3 becomes 0_0's active: it has no copy yet (restoring).
    cluster.assign({**DEFAULT_PLACEMENT, "0_0": TaskPlacement("3", ("2",))}, version=2)
    user = users_of("0_0")[0]
    answer = cluster.client("3").get_answer("counts", user)
    assert answer.status == 503
    assert "no committed copy" in answer.body["error"]
    assert answer.body["metadata"]["active"]["executor"] == "3"
    # Once the task committed there, the same server answers from it.
    write_task(cluster.state_dirs["3"], "0_0", 6)
    body = cluster.client("3").get("counts", user)
    assert body["source"] == "active" and body["batch_id"] == 6


def test_an_active_whose_standby_still_updates_the_copy_answers_as_a_standby(
    cluster: Cluster,
) -> None:
    # Promotion pending: executor 2 is now 0_0's active but its standby still reports a lag.
    cluster.assign({"0_0": TaskPlacement("2", ("1",)), "0_1": TaskPlacement("2", ())}, 3)
    user = users_of("0_0")[0]
    body = cluster.client("2").get("counts", user)
    assert body["source"] == "standby" and body["lag"] == 3
    cluster.lags["2"].clear()  # promoted: the standby component let the task go
    assert cluster.client("2").get("counts", user)["source"] == "active"


def test_a_task_moved_away_closes_its_view_and_answers_421(cluster: Cluster) -> None:
    user = users_of("0_0")[0]
    client = cluster.client("1")
    assert client.get("counts", user)["executor"] == "1"
    before = cluster.servers["1"].report()
    assert before["views"] >= 1 and before["view_reopens"] >= 1  # each view's first open
    cluster.assign({"0_0": TaskPlacement("2"), "0_1": TaskPlacement("2")}, version=4)
    after = cluster.servers["1"].report()
    assert after["views"] == 0
    # A closed view's counts stay in the server's totals.
    assert (after["view_reopens"], after["view_catch_ups"]) == (
        before["view_reopens"],
        before["view_catch_ups"],
    )
    assert client.request("/stores/counts/get", {"key": user}).status == 421
    followed = client.get("counts", user)  # executor 2's copy (its standby copy, batch 4)
    assert followed["executor"] == "2" and followed["batch_id"] == 4


# -- scans -----------------------------------------------------------------------------------


def test_range_and_prefix_page_through_every_local_key_once(shared: Cluster) -> None:
    client = shared.client("1")
    expected = {u: USERS.index(u) for u in users_of("0_0")}
    expected.update({u: USERS.index(u) - 1000 for u in users_of("0_1")})  # standby copy

    entries = client.scan("counts", "range", page_size=7)
    assert [e["key"] for e in entries] == sorted(USERS)
    assert {e["key"]: e["value"] for e in entries} == expected
    assert {e["task"] for e in entries} == {"0_0", "0_1"}

    bounded = client.scan("counts", "range", page_size=9, **{"from": "user-010", "to": "user-042"})
    assert [e["key"] for e in bounded] == [f"user-{i:03d}" for i in range(10, 43)]

    prefixed = client.scan("counts", "prefix", prefix="user-1", page_size=PAGE_LIMIT)
    assert [e["key"] for e in prefixed] == [f"user-{i:03d}" for i in range(100, 200)]

    first = client.request("/stores/counts/prefix", {"prefix": "user-2", "page_size": 20}).body
    assert len(first["entries"]) == 20 and first["next_page_token"]
    assert {t["task"]: t["source"] for t in first["tasks"]} == {"0_0": "active", "0_1": "standby"}
    assert first["hosts"] == sorted([shared.url("1"), shared.url("2")])

    fresh = client.scan("counts", "range", page_size=PAGE_LIMIT, fresh="true")
    assert {e["key"] for e in fresh} == set(users_of("0_0"))


def test_window_fetch_by_key_and_time_range_with_pages(shared: Cluster) -> None:
    user = users_of("0_0")[1]
    i = USERS.index(user)
    client = shared.client("1")
    body = client.window("clicks", user, from_ms=1_000, to_ms=2_500)
    assert [(w["start_ms"], w["end_ms"], w["value"]) for w in body["windows"]] == [
        (1_000, 2_000, i + 1_000),
        (2_000, 3_000, i + 2_000),
    ]
    assert body["source"] == "active" and body["batch_id"] == 5 and body["next_page_token"] is None

    page = client.window("clicks", user, page_size=3)
    assert [w["start_ms"] for w in page["windows"]] == [0, 1_000, 2_000]
    rest = client.window("clicks", user, page_size=3, page_token=page["next_page_token"])
    assert [w["start_ms"] for w in rest["windows"]] == [3_000] and rest["next_page_token"] is None

    # Another executor's task: followed once, like a point get.
    other = users_of("0_1")[0]
    assert shared.client("3").window("clicks", other)["executor"] == "2"


def test_count_is_rocksdb_estimate_over_the_local_tasks(shared: Cluster) -> None:
    body = shared.client("1").request("/stores/counts/count").body
    assert body["approximate"] is True
    assert {t["task"]: t["count"] for t in body["tasks"]} == {
        "0_0": len(users_of("0_0")),
        "0_1": len(users_of("0_1")),
    }
    assert body["count"] == len(USERS)
    windows = shared.client("1").request("/stores/clicks/count", {"fresh": "true"}).body
    assert windows["count"] == 4 * len(users_of("0_0"))


def test_metadata_names_partition_task_and_hosts(shared: Cluster) -> None:
    client = shared.client("3")
    for user in USERS[:20]:
        meta = client.metadata("counts", user)
        partition = partition_of(user.encode())
        assert meta["partition"] == partition and meta["task"] == f"0_{partition}"
        active = "1" if partition == 0 else "2"
        assert meta["active"]["query_url"] == shared.url(active)
        standby = "2" if active == "1" else "1"
        assert meta["standbys"] == [
            {"executor": standby, "host": "127.0.0.1", "query_url": shared.url(standby)}
        ]
    every = client.metadata("counts")
    assert [t["task"] for t in every["tasks"]] == ["0_0", "0_1"]
    stores = client.request("/stores").body["stores"]
    assert {s["name"]: s["queryable"] for s in stores} == {
        "by-id": True,
        "clicks": True,
        "counts": True,
        "mem": False,
        "raw": True,
        "sql-clicks": True,
        "sql-counts": True,
    }
    one = {s["name"]: s for s in shared.client("1").request("/stores").body["stores"]}
    assert one["counts"]["tasks_here"] == [
        {"task": "0_0", "role": "active"},
        {"task": "0_1", "role": "standby"},
    ]


# -- bad input -------------------------------------------------------------------------------

BAD_REQUESTS = [
    ("/stores/nope/get", {"key": "a"}, 404, "no store 'nope'"),
    ("/stores/counts/nope", {}, 404, "no route"),
    ("/elsewhere", {}, 404, "no route"),
    ("/metadata/nope", {"key": "a"}, 404, "no store 'nope'"),
    ("/stores/counts/get", {"key": "k" * (KEY_LIMIT + 1)}, 413, "at most 64"),
    ("/stores/counts/get", {}, 400, "exactly one of key= and key_b64="),
    ("/stores/counts/get", {"key": "a", "key_b64": "YQ=="}, 400, "exactly one"),
    ("/stores/by-id/get", {"key": "abc"}, 400, "give a decimal integer"),
    ("/stores/by-id/get", {"key": str(2**70)}, 400, "out of range"),
    ("/stores/by-id/get", {"key_b64": "AAE="}, 400, "does not decode"),
    ("/stores/counts/get", {"key_b64": "not base64!"}, 400, "not valid base64"),
    ("/stores/counts/get", {"key_b64": base64.b64encode(b"\xff\xfe").decode()}, 400, "UTF-8"),
    ("/stores/counts/get", {"key": "a", "fresh": "maybe"}, 400, "use true or false"),
    ("/stores/counts/range", {"page_size": str(PAGE_LIMIT + 1)}, 400, "page_size=51"),
    ("/stores/counts/range", {"page_size": "0"}, 400, "page_size=0"),
    ("/stores/counts/range", {"page_size": "ten"}, 400, "is not an integer"),
    ("/stores/counts/range", {"from": "b", "to": "a"}, 400, "from is after to"),
    ("/stores/counts/range", {"page_token": "garbage"}, 400, "page_token"),
    ("/stores/counts/prefix", {}, 400, "exactly one of prefix="),
    ("/stores/clicks/window", {"key": "a", "from_ms": "x"}, 400, "from_ms='x'"),
    ("/stores/clicks/window", {"key": "a", "from_ms": "9", "to_ms": "3"}, 400, "is after"),
    ("/stores/clicks/window", {"key": "a", "from_ms": "-1"}, 400, ">= 0"),
    ("/stores/clicks/get", {"key": "a"}, 400, "window store"),
    ("/stores/clicks/range", {}, 400, "window store"),
    ("/stores/counts/window", {"key": "a"}, 400, "use get, range or prefix"),
    ("/stores/mem/get", {"key": "a"}, 400, "in-memory store"),
]


@pytest.mark.parametrize(("path", "params", "status", "message"), BAD_REQUESTS)
def test_bad_input_gets_a_clear_4xx(
    shared: Cluster, path: str, params: dict[str, str], status: int, message: str
) -> None:
    answer = shared.client("1").request(path, params)
    assert answer.status == status, answer.body
    assert message in answer.body["error"], answer.body


def test_a_page_token_of_another_query_is_refused(shared: Cluster) -> None:
    client = shared.client("1")
    token = client.request("/stores/counts/prefix", {"prefix": "user", "page_size": 2}).body[
        "next_page_token"
    ]
    answer = client.request("/stores/by-id/range", {"page_token": token})
    assert answer.status == 400 and "another query" in answer.body["error"]


def test_before_the_first_assignment_store_routes_answer_503(tmp_path: Path) -> None:
    server = QueryServer(
        settings_for(tmp_path), tmp_path, ExecutorIdentity("1", "127.0.0.1", 0), TOPOLOGY
    )
    bare = QueryServer(settings_for(tmp_path), tmp_path, ExecutorIdentity("2", "127.0.0.1", 0))
    try:
        answer = QueryClient(server.url).request("/stores/counts/get", {"key": "a"})
        assert answer.status == 503 and "no assignment" in answer.body["error"]
        answer = QueryClient(bare.url).request("/stores")
        assert answer.status == 503 and "no topology" in answer.body["error"]
        report = server.report()
        assert report["host"] == "127.0.0.1" and report["port"] == server.port > 0
        assert report["url"] == server.url and report["assignment_version"] is None
    finally:
        server.close()
        bare.close()


# -- following the writer --------------------------------------------------------------------


def test_a_wiped_and_rebuilt_store_is_reopened(cluster: Cluster) -> None:
    user = users_of("0_0")[0]
    client = cluster.client("1")
    assert client.get("counts", user)["batch_id"] == 5
    store_dir = TaskDirectory(cluster.state_dirs["1"], APP, "0_0").store_path("counts")
    store = build_store(COUNTS, store_dir, None)
    try:
        store.wipe()  # what a corrupt copy or a restore from scratch does
        store.put(user, 42)
        store.commit(StoreMetadata(900, 9, {}))
    finally:
        store.close()
    body = client.get("counts", user)
    assert body["batch_id"] == 9 and body["value"] == 42


def test_a_reopened_primary_is_followed(cluster: Cluster) -> None:
    """The task closes and opens its store again (a new WAL and MANIFEST) and commits."""
    user = users_of("0_0")[0]
    client = cluster.client("1")
    assert client.get("counts", user)["batch_id"] == 5
    for batch in (6, 7):
        write_task(cluster.state_dirs["1"], "0_0", batch, value_offset=batch)
        body = client.get("counts", user)
        assert body["batch_id"] == batch and body["value"] == USERS.index(user) + batch
    window = client.window("clicks", user, from_ms=3_000, to_ms=3_000)
    assert window["batch_id"] == 7 and window["windows"][0]["value"] == USERS.index(user) + 3_007


def test_the_event_loop_answers_only_point_gets_from_current_copies(cluster: Cluster) -> None:
    """``answer(wait=False)`` (how uvicorn's loop asks first) answers a point get from a
    current copy exactly as a thread would, and refuses what could block: a copy the writer
    moved past, a scan, a standby lag only the broker knows."""
    server = cluster.servers["1"]
    user = users_of("0_0")[0]
    path, query = "/stores/counts/get", f"key={user}"
    server.answer(path, query)  # opens the view
    requests = server.requests

    def same(status_body: tuple[Any, dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
        status, body = status_body
        return status, {k: v for k, v in body.items() if k != "took_ms"}

    on_loop = server.report()["answered_on_loop"]
    assert same(server.answer(path, query, wait=False)) == same(server.answer(path, query))
    assert server.requests == requests + 2
    assert server.report()["answered_on_loop"] == on_loop + 1
    for route, q in (("/stores/counts/range", ""), ("/stores", ""), ("/metadata/counts", "")):
        with pytest.raises(ReadWouldWaitError):
            server.answer(route, q, wait=False)
    assert server.requests == requests + 2  # a refused answer is not counted

    write_task(cluster.state_dirs["1"], "0_0", 6, value_offset=6)
    with pytest.raises(ReadWouldWaitError):
        server.answer(path, query, wait=False)
    catch_ups = server.report()["view_catch_ups"] + server.report()["view_reopens"]
    status, body = server.answer(path, query)  # the thread's answer catches up
    assert body["batch_id"] == 6 and body["value"] == USERS.index(user) + 6
    assert server.report()["view_catch_ups"] + server.report()["view_reopens"] > catch_ups
    assert server.answer(path, query, wait=False)[1]["batch_id"] == 6
    assert cluster.client("1").get("counts", user)["batch_id"] == 6

    # A standby copy whose lag the standby component does not report: the broker's to tell.
    standby_user = users_of("0_1")[0]
    standby_query = f"key={standby_user}"
    server.answer(path, standby_query)  # opens the standby's view
    _, body = server.answer(path, standby_query, wait=False)  # the component reports 7
    assert (body["source"], body["lag"], body["batch_id"]) == ("standby", 7, 4)
    cluster.lags["1"].pop("0_1")
    with pytest.raises(ReadWouldWaitError):
        server.answer(path, standby_query, wait=False)
    assert cluster.client("1").get("counts", standby_user)["source"] == "standby"


def _spec_path(state_dir: Path, task: str, spec: StoreSpec) -> Path:
    return TaskDirectory(state_dir, APP, task).store_path(spec.name)


def test_queries_during_commits_in_another_process_never_see_half_a_batch(
    tmp_path: Path,
) -> None:
    """A writer process commits a batch every ~5 ms (every key = the batch id); query
    threads read point gets and range pages meanwhile. Every answer shows one whole commit,
    nothing errors, batches seen only move forward, and the writer is not slowed to a crawl."""
    keys = 400
    spec = Stores.persistent("counts").with_serdes("str", "int")
    topology = Topology({}, {"counts": spec}, {}, [Subtopology(0, [], [], [], ["counts"])])
    path = _spec_path(tmp_path, "0_0", spec)
    writer = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("commit_loop.py")),
            str(path),
            str(keys),
            "4",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    server = None
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        server = QueryServer(
            settings_for(tmp_path), tmp_path, ExecutorIdentity("1", "127.0.0.1", 0), topology
        )
        server.reconcile(
            Assignment(
                APP,
                1,
                {"0_0": TaskPlacement("1")},
                {"1": ExecutorEndpoint("1", "127.0.0.1", server.port)},
            )
        )
        problems: list[str] = []
        seen: list[set[int]] = []
        slowest: list[float] = []

        def reader(n: int) -> None:
            client = QueryClient(server.url)
            batches: set[int] = set()
            last = -1
            worst = 0.0
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and writer.poll() is None:
                started = time.perf_counter()
                if n % 2:
                    answer = client.get_answer("counts", f"user-{n * 37 % keys:05d}")
                    if answer.status != 200:
                        problems.append(f"get {answer.status}: {answer.body}")
                        continue
                    b = answer.body
                    batch, values = b["batch_id"], {b["value"]} if b["found"] else set()
                else:
                    answer = client.request("/stores/counts/range", {"page_size": PAGE_LIMIT})
                    if answer.status != 200:
                        problems.append(f"range {answer.status}: {answer.body}")
                        continue
                    b = answer.body
                    batch = b["tasks"][0]["batch_id"] if b["tasks"] else None
                    values = {e["value"] for e in b["entries"]}
                worst = max(worst, time.perf_counter() - started)
                if batch is None:
                    continue
                if values and values != {batch}:
                    problems.append(f"batch {batch} answered values {sorted(values)[:5]}")
                if batch < last:
                    problems.append(f"batch went back from {last} to {batch}")
                last = batch
                batches.add(batch)
            seen.append(batches)
            slowest.append(worst)

        threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        out, _ = writer.communicate(timeout=20)
        committed = int(out.split()[-1])
    finally:
        if writer.poll() is None:
            writer.kill()
        if server is not None:
            server.close()
    assert writer.returncode == 0
    assert not problems, problems[:5]
    assert all(len(s) > 10 for s in seen), [len(s) for s in seen]  # they followed the writer
    assert committed > 100, committed  # ~4 s at ~5 ms per batch: the writer was not held up
    assert max(slowest) < 1.0, slowest


def test_custom_stores_answer_from_active_and_standby_copies_and_follow_commits(
    cluster: Cluster,
) -> None:
    """A custom engine's stores (SQLite, spark_apps/word_count_sqlite) answer like RocksDB's:
    through the supplier's read-only views, from the active and from a standby, each answer
    with its commit, and a new commit is followed (a new view)."""
    client = cluster.client("1")
    user, standby_user = users_of("0_0")[2], users_of("0_1")[1]
    body = client.get("sql-counts", user)
    assert (body["source"], body["batch_id"], body["changelog_offset"]) == ("active", 5, 105)
    assert body["value"] == USERS.index(user) and body["source_offsets"] == {"in:0": 5}
    standby = client.get("sql-counts", standby_user)  # executor 1 keeps 0_1's standby
    assert (standby["source"], standby["lag"], standby["batch_id"]) == ("standby", 7, 4)
    assert standby["value"] == USERS.index(standby_user) - 1000
    listed = {s["name"]: s for s in client.request("/stores").body["stores"]}
    assert listed["sql-counts"]["engine"] == "sqlite" and listed["sql-counts"]["queryable"]

    window = client.window("sql-clicks", user, from_ms=1_000, to_ms=2_500)
    i = USERS.index(user)
    assert [(w["start_ms"], w["value"]) for w in window["windows"]] == [
        (1_000, i + 1_000),
        (2_000, i + 2_000),
    ]
    entries = client.scan("sql-counts", "range", page_size=7)
    assert [e["key"] for e in entries] == sorted(USERS)  # active 0_0 and standby 0_1
    prefixed = client.scan("sql-counts", "prefix", prefix="user-1", page_size=PAGE_LIMIT)
    assert [e["key"] for e in prefixed] == [f"user-{i:03d}" for i in range(100, 200)]

    write_task(cluster.state_dirs["1"], "0_0", 6, value_offset=6)
    body = client.get("sql-counts", user)
    assert body["batch_id"] == 6 and body["value"] == USERS.index(user) + 6
    assert cluster.servers["1"].report()["view_reopens"] >= 2
