"""statekeeper: Kafka-Streams-grade state stores for Python, run on PySpark, operated by Airflow.

The public facade: what an app imports, in one place::

    from statekeeper import Materialized, StatekeeperApp, StreamsBuilder, load_settings

Each name loads its module on first use (PEP 562), so ``import statekeeper`` stays light and
pulls in neither pyspark nor RocksDB until an app asks for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # Settings
    "StatekeeperSettings": "statekeeper.settings",
    "load_settings": "statekeeper.settings",
    # Topologies: the DSL and the Processor API
    "StreamsBuilder": "statekeeper.processing.dsl",
    "Materialized": "statekeeper.processing.dsl",
    "Grouped": "statekeeper.processing.dsl",
    "Suppressed": "statekeeper.processing.dsl",
    "TimeWindows": "statekeeper.stores.time_windows",
    "Topology": "statekeeper.processing.topology",
    "Processor": "statekeeper.processing.processor",
    "ProcessorContext": "statekeeper.processing.processor",
    "Record": "statekeeper.processing.processor",
    "PunctuationType": "statekeeper.processing.processor",
    "InvalidRecordError": "statekeeper.processing.errors",
    # Stores used directly, without Spark
    "Stores": "statekeeper.stores.builders",
    "StateEnvironment": "statekeeper.state.environment",
    # Running an app on Spark
    "StatekeeperApp": "statekeeper.app.statekeeper_app",
    "StatekeeperError": "statekeeper.errors",
}

# A literal list, so linters and `from statekeeper import *` see the names; equal to _EXPORTS.
__all__ = [
    "Grouped",
    "InvalidRecordError",
    "Materialized",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "StateEnvironment",
    "StatekeeperApp",
    "StatekeeperError",
    "StatekeeperSettings",
    "Stores",
    "StreamsBuilder",
    "Suppressed",
    "TimeWindows",
    "Topology",
    "load_settings",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ resolves names
    from statekeeper.app.statekeeper_app import StatekeeperApp
    from statekeeper.errors import StatekeeperError
    from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder, Suppressed
    from statekeeper.processing.errors import InvalidRecordError
    from statekeeper.processing.processor import (
        Processor,
        ProcessorContext,
        PunctuationType,
        Record,
    )
    from statekeeper.processing.topology import Topology
    from statekeeper.settings import StatekeeperSettings, load_settings
    from statekeeper.state.environment import StateEnvironment
    from statekeeper.stores.builders import Stores
    from statekeeper.stores.time_windows import TimeWindows


def __getattr__(name: str) -> Any:
    """Import the module behind a public name on first access and cache the name here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'statekeeper' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
