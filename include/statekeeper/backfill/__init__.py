"""Backfill: an app's own topology run over its sources' history, then the stream goes on
(``statekeeper backfill``, docs/changing-apps.md#backfilling-from-history).

Modules: :mod:`bounds` (``--from`` and ``--until`` parsed and resolved, pure),
:mod:`timestamps` (``--from TIMESTAMP_MS``: the first offset at or after it, checked against
the records), :mod:`start` (where the backfill's query starts, from what the app has done
before), :mod:`run` (the bounded run of
:class:`~statekeeper.app.statekeeper_app.StatekeeperApp` under the app's own application id
and Spark checkpoint), :mod:`report` (progress lines and the final report).

It sits above the app (it runs one) and below the command line; it imports the runtime's
floors, ``app``, ``spark`` (offset JSON and Spark's checkpoint files), ``versions`` and
``ops`` (is the app running).
"""

from statekeeper.backfill.bounds import FromSpec, UntilSpec, parse_from, parse_until
from statekeeper.backfill.report import BackfillReport
from statekeeper.backfill.run import PreparedBackfill, prepare_backfill, run_backfill

__all__ = [
    "BackfillReport",
    "FromSpec",
    "PreparedBackfill",
    "UntilSpec",
    "parse_from",
    "parse_until",
    "prepare_backfill",
    "run_backfill",
]
