"""Airflow integration, laid out as a provider: ``hooks/`` resolve an app spec into settings,
topology and snapshot storage; ``operators/`` snapshot, drill and audit an app; ``specs``
finds the apps a DAG folder drives and names their Assets.

Nothing here holds logic of its own: every operator calls :mod:`statekeeper.ops`. The
library is imported inside ``execute`` so DAG files that import these classes parse fast
and never load pyspark or great_expectations. ``import statekeeper`` never imports this
package (it needs Airflow installed).
"""

from statekeeper.errors import require_extra

require_extra("airflow", "airflow", "statekeeper.airflow (operators, hooks, sensors, the plugin)")
