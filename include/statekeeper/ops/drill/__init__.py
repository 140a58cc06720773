"""Restore drills (``statekeeper drill --app SPEC``): prove that recovered state is correct.

A drill restores every store of every task of an app into a sandbox directory
(:mod:`.sandbox`; the time until all are usable is the RTO) without touching the live state
or the live app, which may be running, then checks each store:

a. integrity (:mod:`.integrity`): snapshot manifests and checksums, fallbacks, markers;
b. consistency (:mod:`.consistency`): key by key against the live store at the live store's
   own commit, read without a byte written (:mod:`statekeeper.ops.live_task`; app stopped),
   or against the snapshot plus changelog (app running); a live store whose commit does not
   match its changelog fails, and is never repaired;
c. truth (:mod:`.recompute`): the app's own topology re-run in batch over the source
   ranges up to the restored marker's source offsets, diffed with the restored state;
d. data quality (:mod:`.quality`): a Great Expectations suite per store, with Data Docs;
and with ``--spark`` (:mod:`.spark_check`) the PySpark SQL recomputations the spec's
``drill_model:`` names (``spark_apps/<app>/drill_model.py``) on the stores they map onto.

A failed check names up to 20 keys with their restored, recomputed (or expected) and live
values (:mod:`.contents`; the live store is read read-only where this machine has it).

It writes ``record.json``, ``report.html`` (:mod:`.report_html`, with the RTO trend) and
``data_docs/`` (offline: no remote assets, see :mod:`.quality`) to the report directory
(default ``<state_dir>/.drills/<app>/<drill id>``), and a row to
``<state_dir>/.drills/history.sqlite`` (:mod:`.history`). RPO figures come from :mod:`.rpo`:
committed records behind the live head first, snapshot age second. A drill that cannot finish
is recorded as ``error`` (record, history row and report) and its exception re-raised.
"""

from statekeeper.ops.drill.drill import default_report_dir, new_record, record_error, run_drill
from statekeeper.ops.drill.history import DrillHistory, history_path
from statekeeper.ops.drill.record import CheckResult, DrillRecord, StoreDrill

__all__ = [
    "CheckResult",
    "DrillHistory",
    "DrillRecord",
    "StoreDrill",
    "default_report_dir",
    "history_path",
    "new_record",
    "record_error",
    "run_drill",
]
