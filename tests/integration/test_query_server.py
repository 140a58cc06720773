"""The query server over a task run by the real state layer (broker, changelogs, commit
protocol): answers follow the task's commits, carry the commit's changelog offset, and a
copy wiped and rebuilt from the changelog (a restore from scratch) is picked up."""

from __future__ import annotations

import shutil
import threading
import time

from statekeeper.changelog.records import changelog_topic
from statekeeper.cluster.executor import ExecutorIdentity
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.placement.assignment import Assignment, ExecutorEndpoint, TaskPlacement
from statekeeper.processing.topology import Subtopology, Topology
from statekeeper.query.client import QueryClient
from statekeeper.query.server import QueryServer
from statekeeper.settings import load_settings
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores.builders import Stores

SPEC = Stores.persistent("counts").with_serdes("str", "int")
TOPOLOGY = Topology({}, {"counts": SPEC}, {}, [Subtopology(0, [], [], [], ["counts"])])
KEYS = [f"k{i:04d}" for i in range(300)]


def test_answers_follow_the_tasks_commits_and_its_restores(broker, tmp_path, topic_name):
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=topic_name,
        query_port=0,
    )
    env = StateEnvironment(settings)
    env.ensure_changelogs([SPEC], 1)
    server = QueryServer(
        settings, settings.state_dir, ExecutorIdentity("1", "127.0.0.1", 0), TOPOLOGY
    )
    server.reconcile(
        Assignment(
            topic_name,
            1,
            {"0_0": TaskPlacement("1")},
            {"1": ExecutorEndpoint("1", "127.0.0.1", server.port)},
        )
    )
    client = QueryClient(server.url)
    try:
        task = env.task("0_0", 0, [SPEC])
        task.open()
        try:
            assert client.get_answer("counts", "k0001").status == 503  # no commit yet
            problems: list[str] = []
            batches_seen: set[int] = set()
            done = threading.Event()

            def query() -> None:
                while not done.is_set():
                    body = client.request("/stores/counts/range", {"page_size": 1000}).body
                    tasks = body.get("tasks") or []
                    if not tasks:
                        continue  # before the first commit
                    batch = tasks[0]["batch_id"]
                    values = {e["value"] for e in body["entries"]}
                    if values != {batch} or len(body["entries"]) != len(KEYS):
                        problems.append(f"batch {batch}: {len(body['entries'])} keys {values}")
                    batches_seen.add(batch)

            reader = threading.Thread(target=query)
            reader.start()
            try:
                for batch in range(1, 16):
                    store = task.store("counts")
                    store.put_all([(k, batch) for k in KEYS])
                    task.commit(batch, {"in:0": batch})
                    time.sleep(0.02)
            finally:
                done.set()
                reader.join(timeout=10)
            assert not problems, problems[:3]
            assert len(batches_seen) >= 3, batches_seen

            body = client.get("counts", "k0007")
            assert body["value"] == 15 and body["batch_id"] == 15 and body["source"] == "active"
            # The commit marker's offset: the changelog's last record.
            ends = log_end_offsets(
                consumer_config(broker.bootstrap_servers),
                [(changelog_topic(topic_name, "counts"), 0)],
            )
            assert body["changelog_offset"] == next(iter(ends.values())) - 1

            # As a standby no component reports on, the lag is the changelog's records after
            # the copy's marker: here an attempt's records that no marker closed yet.
            server.reconcile(
                Assignment(
                    topic_name,
                    2,
                    {"0_0": TaskPlacement("2", ("1",))},
                    {"1": ExecutorEndpoint("1", "127.0.0.1", server.port)},
                )
            )
            for key in KEYS[:5]:
                env.writer.send(changelog_topic(topic_name, "counts"), 0, key.encode(), b"x")
            env.writer.flush(10)
            body = client.get("counts", "k0007")
            assert body["source"] == "standby" and body["lag"] == 5 and body["value"] == 15
            assert client.get_answer("counts", "k0007", fresh=True).status == 503
        finally:
            task.close()

        # Lost local state: the next open restores the store from the changelog alone.
        shutil.rmtree(TaskDirectory(settings.state_dir, topic_name, "0_0").store_path("counts"))
        assert client.get_answer("counts", "k0007").status == 503
        with env.task("0_0", 0, [SPEC]):
            body = client.get("counts", "k0007")
            assert body["value"] == 15 and body["batch_id"] == 15
    finally:
        server.close()
        env.close()
