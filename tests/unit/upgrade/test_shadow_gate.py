"""The shadow upgrade's gate before the cut-over (statekeeper.upgrade.shadow.check_proof):
a passed drill and an aligned diff with the outputs compared and nothing unexpected."""

from __future__ import annotations

import pytest

from statekeeper.upgrade.cutover import UpgradeError
from statekeeper.upgrade.shadow import check_proof

DRILL = {"drill_id": "d1", "status": "pass"}
DIFF = {"aligned": True, "ok": True, "unexpected": 0, "outputs": {"ok": True}}


def test_a_passed_drill_and_a_clean_diff_let_the_cut_over_go() -> None:
    check_proof(DRILL, DIFF)


@pytest.mark.parametrize(
    ("drill", "diff", "reason"),
    [
        (None, DIFF, "no drill of the new version"),
        ({"drill_id": "d1", "status": "fail"}, DIFF, "the drill d1 did not pass"),
        (DRILL, None, "no diff of the two versions"),
        (DRILL, {**DIFF, "ok": False, "unexpected": 1}, "1 unexpected key"),
        (DRILL, {**DIFF, "ok": False, "aligned": False}, "not aligned"),
        (DRILL, {**DIFF, "outputs": None}, "the outputs were not compared"),
    ],
)
def test_anything_missing_stops_it(drill, diff, reason) -> None:
    with pytest.raises(UpgradeError, match=f"no cut-over: .*{reason}"):
        check_proof(drill, diff)
