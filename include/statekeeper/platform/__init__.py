"""The embedded platform (``make up``): the broker and Airflow on 127.0.0.1 under one root
folder, started, checked and stopped by PID files. See :mod:`statekeeper.platform.control`."""

from statekeeper.platform.control import PlatformError, down, status, up
from statekeeper.platform.layout import PlatformConfig

__all__ = ["PlatformConfig", "PlatformError", "down", "status", "up"]
