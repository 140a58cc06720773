"""ProcessIdentity (pid + start ticks + boot id) against the real /proc: this test's own
process and ``sleep`` children started and ended here; and the records that hold one read
their JSON, the files older versions wrote included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from statekeeper.airflow.supervision.process import AppProcessIdentity
from statekeeper.cluster.local_cluster import ProcessInfo, WorkerInfo
from statekeeper.kafka.embedded import BrokerState
from statekeeper.platform.processes import ProcessRecord
from statekeeper.process_identity import NO_START, Liveness, ProcessIdentity
from statekeeper.procfs import boot_id, start_ticks

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A ``sleep`` child, ended (and reaped) after the test whatever it did."""
    child = subprocess.Popen(["sleep", "60"])
    yield child
    child.kill()
    child.wait()


@pytest.fixture
def me() -> ProcessIdentity:
    return ProcessIdentity.of(os.getpid())


def test_this_process_is_alive(me: ProcessIdentity) -> None:
    assert (me.pid, me.start_ticks, me.boot_id) == (os.getpid(), start_ticks(me.pid), boot_id())
    assert me.local and me.alive() and me.liveness() is Liveness.RUNNING
    assert me.group_may_be_signalled()


def test_a_started_and_exited_child_is_not_alive(sleeper: subprocess.Popen[bytes]) -> None:
    child = ProcessIdentity.of(sleeper.pid)
    assert child.alive()
    sleeper.kill()
    os.waitid(os.P_PID, sleeper.pid, os.WEXITED | os.WNOWAIT)  # exited, a zombie until reaped
    assert child.liveness() is Liveness.ZOMBIE and not child.alive()
    assert child.group_may_be_signalled()  # the pid is still its own
    sleeper.wait()
    assert child.liveness() is Liveness.EXITED and not child.alive()
    assert ProcessIdentity.of(sleeper.pid).start_ticks == NO_START


def test_the_same_pid_with_other_start_ticks_is_another_process(me: ProcessIdentity) -> None:
    earlier = replace(me, start_ticks=me.start_ticks - 1)
    assert earlier.liveness() is Liveness.PID_REUSED and not earlier.alive()
    assert not earlier.group_may_be_signalled()  # the pid's group is not the recorded one's


def test_a_process_of_another_boot_is_not_alive(me: ProcessIdentity) -> None:
    elsewhere = replace(me, boot_id="another-boot")
    assert not elsewhere.local and not elsewhere.alive()
    assert elsewhere.liveness() is Liveness.OTHER_BOOT and not elsewhere.group_may_be_signalled()


def test_json_round_trip_ignores_other_keys(me: ProcessIdentity) -> None:
    doc = me.to_json()
    assert doc == {"pid": me.pid, "start_ticks": me.start_ticks, "boot_id": me.boot_id}
    assert ProcessIdentity.from_json(json.loads(json.dumps(doc))) == me
    assert ProcessIdentity.from_json({**doc, "name": "svc", "port": 8080}) == me


def test_an_old_flat_record_without_boot_id_is_of_this_boot(me: ProcessIdentity) -> None:
    old = {"name": "svc", "pid": me.pid, "start_ticks": me.start_ticks, "log": "svc.log"}
    assert ProcessIdentity.from_json(old) == me and ProcessIdentity.from_json(old).alive()


# -- the records holding an identity -----------------------------------------------------------


def test_a_pid_file_is_flat_and_an_old_one_still_reads(tmp_path: Path, me: ProcessIdentity) -> None:
    record = ProcessRecord("svc", me, ["airflow", "api-server"], "svc.log", 1.5, port=8080)
    record.write(tmp_path / "svc.json")
    written = json.loads((tmp_path / "svc.json").read_text())
    assert written["pid"] == me.pid and written["boot_id"] == me.boot_id
    assert "process" not in written and ProcessRecord.read(tmp_path / "svc.json") == record
    old = {k: v for k, v in written.items() if k != "boot_id"} | {"obsolete": 1}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert ProcessRecord.read(tmp_path / "old.json") == record
    assert record.pid == me.pid and record.alive()


def test_cluster_records_read_the_old_entries(me: ProcessIdentity) -> None:
    old_master = {"name": "master", "pid": me.pid, "start_ticks": me.start_ticks, "log": "m.log"}
    master = ProcessInfo.from_json({**old_master, "webui_port": 8080})
    assert master == ProcessInfo("master", me, "m.log", 8080) and master.alive()
    worker = WorkerInfo("worker-0", me, "w.log", 8081, index=0, work_dir="w", state_dir="s")
    assert WorkerInfo.from_json(worker.to_json()) == worker
    assert worker.to_json()["index"] == 0 and worker.to_json()["start_ticks"] == me.start_ticks


def test_an_app_launch_keeps_its_flat_json(sleeper: subprocess.Popen[bytes]) -> None:
    launch = AppProcessIdentity.of_launched("wc", sleeper.pid, 1.0, "log", "status.json", ["x"])
    doc = launch.to_json()
    assert (doc["pid"], doc["start_ticks"]) == (sleeper.pid, start_ticks(sleeper.pid))
    assert AppProcessIdentity.from_json(doc) == launch and launch.alive()[0] is True
    os.kill(sleeper.pid, signal.SIGKILL)
    sleeper.wait()
    assert launch.alive() == (False, f"pid {sleeper.pid} exited")


def _broker_state(tansu: ProcessIdentity, s3: ProcessIdentity | None) -> BrokerState:
    return BrokerState(
        9092, "127.0.0.1:9092", "s3", "s3://tansu/", tansu, 1.0, "/run", "/data", s3, 9000
    )


def test_broker_json_round_trip(me: ProcessIdentity, sleeper: subprocess.Popen[bytes]) -> None:
    state = _broker_state(me, ProcessIdentity.of(sleeper.pid))
    doc = json.loads(json.dumps(state.to_dict()))
    assert doc["tansu"] == me.to_json() and doc["s3"]["pid"] == sleeper.pid
    assert BrokerState.from_dict(doc) == state
    assert (state.tansu_pid, state.s3_pid) == (me.pid, sleeper.pid)


def test_an_old_broker_json_names_bare_pids(sleeper: subprocess.Popen[bytes]) -> None:
    """Before identities, broker.json held ``tansu_pid``/``s3_pid`` and a pid counted as the
    broker's while its command line named the program: a pid running something else is not."""
    named = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "tansu"])
    try:
        # Until the child has exec'd, its command line is still this process's.
        deadline = time.monotonic() + 10
        while b"tansu" not in Path(f"/proc/{named.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the child never exec'd"
            time.sleep(0.01)
        old = _broker_state(ProcessIdentity.of(1), None).to_dict()
        del old["tansu"], old["s3"]
        old |= {"tansu_pid": named.pid, "s3_pid": sleeper.pid}
        state = BrokerState.from_dict(old)
        assert state.tansu == ProcessIdentity.of(named.pid) and state.tansu.alive()
        assert state.s3 is not None and state.s3.pid == sleeper.pid
        assert state.s3.start_ticks == NO_START and not state.s3.alive()  # not localbucket
    finally:
        named.kill()
        named.wait()
