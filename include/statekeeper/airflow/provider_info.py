"""statekeeper as an Airflow provider: what ``airflow providers list`` and the providers
manager read through the ``apache_airflow_provider`` entry point (pyproject.toml).

Module paths only: nothing here imports Airflow or the classes it names, so discovering
providers stays cheap. The version is the installed distribution's, as Airflow shows it.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

INTEGRATION = "statekeeper"
PLUGIN_CLASS = "statekeeper.airflow.plugin.airflow_plugin.StatekeeperPlugin"


def get_provider_info() -> dict[str, Any]:
    """The provider metadata, in the shape of Airflow's ``provider_info.schema.json``."""
    return {
        "package-name": "statekeeper",
        "name": "statekeeper",
        "description": (
            "Kafka-Streams-grade state stores for Python on PySpark: operators to supervise, "
            "snapshot, drill and audit statekeeper apps, and the State stores page."
        ),
        "versions": [version("statekeeper")],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "statekeeper.airflow.hooks.app",
                    "statekeeper.airflow.hooks.spark_app",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "statekeeper.airflow.operators.audit",
                    "statekeeper.airflow.operators.drill",
                    "statekeeper.airflow.operators.snapshot",
                    "statekeeper.airflow.supervision.operator",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["statekeeper.airflow.sensors.app_running"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["statekeeper.airflow.triggers.app_health"],
            }
        ],
        # The hooks define no connection type of their own (StatekeeperSparkAppHook uses the
        # Spark provider's "spark" connection), so there is no "connection-types" entry.
        "extra-links": ["statekeeper.airflow.plugin.links.DrillReportLink"],
        "plugins": [{"name": "statekeeper", "plugin-class": PLUGIN_CLASS}],
    }
