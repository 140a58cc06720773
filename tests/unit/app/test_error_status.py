"""A status that says ERROR always says why: the error is in the same write as the state,
so a supervisor reading between two writes never sees ERROR without its error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.app.lifecycle import AppState

from .test_restore_report import _app


def test_the_error_is_written_with_the_error_state(tmp_path: Path) -> None:
    app = _app(tmp_path)
    writes: list[dict[str, Any]] = []
    update = app.board.update

    def recording(**fields: Any) -> None:
        writes.append(dict(fields))
        update(**fields)

    app.board.update = recording  # type: ignore[method-assign]
    app.machine.transition(AppState.ERROR, error="RuntimeError: boom")
    assert writes == [{"state": "ERROR", "error": "RuntimeError: boom"}]
    assert app.board.snapshot()["error"] == "RuntimeError: boom"


def test_other_states_do_not_touch_the_error(tmp_path: Path) -> None:
    app = _app(tmp_path)
    writes: list[dict[str, Any]] = []
    app.board.update = lambda **fields: writes.append(fields)  # type: ignore[method-assign]
    app.machine.transition(AppState.REBALANCING)
    assert writes == [{"state": "REBALANCING"}]
