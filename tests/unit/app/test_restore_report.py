"""The status names how each task got its state back, whichever run opened it first.

A restarted app replays the batches its killed workers held before its query starts; those
commit-only runs open the tasks, so they carry the restores (`make demo` prints them).
"""

from __future__ import annotations

from pathlib import Path

from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.task_run import TaskRunResult

from .test_bounded_memory import _Topology

FULL = {"store": "counts", "full": True, "reason": "no local state", "records": 7}
PARTIAL = {"store": "counts", "full": False, "reason": None, "records": 1}


def _app(tmp_path: Path) -> StatekeeperApp:
    settings = StatekeeperSettings(
        bootstrap_servers="127.0.0.1:1",
        application_id="restores",
        state_dir=tmp_path / "state",
        checkpoint_dir=tmp_path / "checkpoints",
        status_port=None,
    )
    return StatekeeperApp(_Topology(), settings)


def _result(task_id: str, *, warm: bool, restored: list[dict]) -> TaskRunResult:
    return TaskRunResult(
        task_id, 3, committed=True, committed_batch_id=3, warm=warm, restored=restored
    )


def test_restores_of_the_commit_only_runs_at_start_are_reported(tmp_path: Path) -> None:
    app = _app(tmp_path)
    app._note_committed([_result("1_1", warm=False, restored=[FULL])])
    # The task's first batch then runs warm in the worker that replayed it.
    app._note_committed([_result("1_1", warm=True, restored=[])])
    assert app.board.snapshot()["tasks"]["1_1"]["restore"] == [FULL]


def test_a_later_cold_open_does_not_replace_the_first_restore(tmp_path: Path) -> None:
    app = _app(tmp_path)
    app._note_committed([_result("1_0", warm=False, restored=[FULL])])
    app._note_committed([_result("1_0", warm=False, restored=[PARTIAL])])
    assert app.board.snapshot()["tasks"]["1_0"]["restore"] == [FULL]
