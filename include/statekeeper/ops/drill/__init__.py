"""Restore drills (``statekeeper drill --app SPEC``): prove that recovered state is correct.

A drill restores every store of every task of an app into a sandbox directory
(:mod:`.sandbox`; the time until all are usable is the RTO) without touching the live state
or the live app, which may be running, then checks each store:

a. integrity (:mod:`.integrity`): snapshot manifests and checksums, fallbacks, markers;
b. consistency (:mod:`.consistency`): key by key against the live store at the same commit
   (app stopped), or against the snapshot plus changelog (app running);
c. truth (:mod:`.recompute`): the app's own topology re-run in batch over the source
   ranges up to the restored marker's source offsets, diffed with the restored state;
d. data quality (:mod:`.quality`): a Great Expectations suite per store, with Data Docs;
and with ``--spark`` (:mod:`.spark_check`) the shipped apps' PySpark SQL recomputations
(``spark_apps/<app>/drill_model.py``) on the stores they map onto.

It writes ``record.json``, ``report.html`` (:mod:`.report_html`, with the RTO trend) and
``data_docs/`` to the report directory (default ``<state_dir>/.drills/<app>/<drill id>``),
and a row to ``<state_dir>/.drills/history.sqlite`` (:mod:`.history`); RPO figures come
from :mod:`.rpo`.
"""

from statekeeper.ops.drill.drill import default_report_dir, run_drill
from statekeeper.ops.drill.history import DrillHistory, history_path
from statekeeper.ops.drill.record import CheckResult, DrillRecord, StoreDrill

__all__ = [
    "CheckResult",
    "DrillHistory",
    "DrillRecord",
    "StoreDrill",
    "default_report_dir",
    "history_path",
    "run_drill",
]
