"""The check an app makes before it processes anything: may this topology run on the state
it finds?

The state's fingerprint comes from the state root (``topology.json``, see
:mod:`statekeeper.versions.recorded`), else from wherever the state would come from (the
newest snapshot's manifest, looked up only then). When the comparison
(:func:`statekeeper.versions.compatibility.compare`) has a ``needs-migration`` store or a
``partitions-changed`` source, the start fails with :class:`IncompatibleStateError`, one
line naming each store or topic and the difference, unless ``allow_incompatible`` (the
``allow_incompatible_state`` setting) is set. Every other change is logged and the start
goes on; either way the new fingerprint is recorded in the state root.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from statekeeper.errors import ConfigError
from statekeeper.versions.compatibility import StoreChange, TopicChange, UpgradePlan, compare
from statekeeper.versions.fingerprint import FingerprintError, TopologyFingerprint
from statekeeper.versions.recorded import read_recorded, recorded_path, write_recorded

log = logging.getLogger("statekeeper.versions")

#: What to do, as every refusal says it.
ADVICE = (
    "see the differences with `statekeeper upgrade plan --app SPEC` (docs/changing-apps.md); "
    "to start anyway, set allow_incompatible_state=true (env "
    "STATEKEEPER_ALLOW_INCOMPATIBLE_STATE): the new code then reads these stores as they are"
)

#: Where else the state's fingerprint may be recorded: (where, fingerprint) or None.
RecordedElsewhere = Callable[[], "tuple[str, TopologyFingerprint] | None"]


class IncompatibleStateError(ConfigError):
    """The state an app would start on was written by a topology this one cannot read as
    it is; the message names each store or source topic and the difference."""

    def __init__(self, message: str, plan: UpgradePlan | None = None) -> None:
        super().__init__(message)
        self.plan = plan


def check_state_version(
    root: Path,
    new: TopologyFingerprint,
    *,
    allow_incompatible: bool = False,
    recorded_elsewhere: RecordedElsewhere | None = None,
) -> UpgradePlan | None:
    """Compare ``new`` with the fingerprint of the state under ``root`` (else, when the
    root has none, ``recorded_elsewhere()``'s); raise :class:`IncompatibleStateError` when
    the state needs a migration and ``allow_incompatible`` is off. Records ``new`` in
    ``root`` when the start may go on. Returns the plan, or None when nothing was recorded
    (a first start, or state from before fingerprints)."""
    app = new.application_id
    try:
        old = read_recorded(root)
        where = str(recorded_path(root))
    except FingerprintError as exc:
        if not allow_incompatible:
            raise IncompatibleStateError(
                f"app {app}: {exc}; delete the file if the state under {root} is known to be "
                f"this topology's, or {ADVICE}"
            ) from exc
        log.warning("app %s: %s; starting anyway (allow_incompatible_state)", app, exc)
        old, where = None, ""
    if old is None and recorded_elsewhere is not None:
        found = recorded_elsewhere()
        if found is not None:
            where, old = found
    if old is None:
        log.info("app %s: no topology recorded for its state; recording %s", app, new.digest[:12])
        write_recorded(root, new)
        return None
    plan = compare(old, new)
    if plan.blocking and not allow_incompatible:
        differences = "; ".join(f"{v.reason} ({v.change})" for v in plan.blocking)
        raise IncompatibleStateError(
            f"app {app}: the state ({where}) was written by a topology this one cannot read "
            f"as it is: {differences}. {ADVICE}",
            plan,
        )
    _log_plan(app, plan, where)
    write_recorded(root, new)
    return plan


def _log_plan(app: str, plan: UpgradePlan, where: str) -> None:
    if plan.old_digest == plan.new_digest and not any(
        t.change is not TopicChange.UNCHANGED for t in plan.topics
    ):
        return
    log.info(
        "app %s: topology %s -> %s (state from %s)",
        app,
        plan.old_digest[:12],
        plan.new_digest[:12],
        where,
    )
    for verdict in (*plan.stores, *plan.topics):
        if verdict.change in (StoreChange.UNCHANGED, TopicChange.UNCHANGED):
            continue
        if verdict.blocks:
            log.warning(
                "app %s: %s (%s); starting anyway (allow_incompatible_state)",
                app,
                verdict.reason,
                verdict.change,
            )
        else:
            log.info("app %s: %s (%s)", app, verdict.reason, verdict.change)
