"""The Airflow services of the embedded platform: what each runs and on which port.

Never ``airflow standalone`` (it binds log servers to 0.0.0.0): the four components run on
their own, the api-server on 127.0.0.1 and the scheduler and triggerer without their log
servers. The embedded broker is the platform's fifth service, managed by
:mod:`statekeeper.kafka.embedded` (its own PID files under ``broker/``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from statekeeper.platform.layout import PlatformConfig

BROKER = "broker"


@dataclass(frozen=True)
class Service:
    """One Airflow component: its name, command line and the port it listens on (if any)."""

    name: str
    argv: tuple[str, ...]
    port: int | None = None


def airflow_binary() -> str:
    """The ``airflow`` command installed beside this interpreter."""
    return str(Path(sys.executable).with_name("airflow"))


def airflow_services(config: PlatformConfig) -> list[Service]:
    """The Airflow components, in start order (`down` stops them in reverse, scheduler
    first so it launches nothing while the rest stops)."""
    airflow = airflow_binary()
    return [
        Service(
            "api-server",
            (airflow, "api-server", "--host", "127.0.0.1", "--port", str(config.airflow_port)),
            config.airflow_port,
        ),
        Service("dag-processor", (airflow, "dag-processor")),
        Service("triggerer", (airflow, "triggerer", "--skip-serve-logs")),
        Service("scheduler", (airflow, "scheduler", "--skip-serve-logs")),
    ]
