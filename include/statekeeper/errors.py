"""Exceptions raised by statekeeper; every message says what to do next."""


class StatekeeperError(Exception):
    """Base class for all statekeeper errors."""


class ConfigError(StatekeeperError):
    """Bad or inconsistent configuration, detected at start."""


class BrokerUnavailableError(StatekeeperError):
    """The Kafka broker could not be reached within the configured timeout."""


class ChangelogTopicError(StatekeeperError):
    """A changelog topic is missing or its layout/config disagrees with the store."""


class ChangelogCorruptError(StatekeeperError):
    """A changelog record cannot be decoded; restoration stops rather than lose data."""


class TaskLockedError(StatekeeperError):
    """Another process holds the task directory lock."""


class StoreClosedError(StatekeeperError):
    """An operation was attempted on a closed store."""


class InvalidStoreConfigError(ConfigError):
    """A store builder was given an impossible configuration (e.g. retention < size + grace)."""


class StoreContractError(InvalidStoreConfigError):
    """A custom store's supplier breaks the store contract (docs/custom-stores.md); the
    message names the method and what it did."""


class ProduceError(StatekeeperError):
    """A changelog or output record was not acknowledged by the broker."""


class StoreCorruptError(StatekeeperError):
    """Local store files cannot be opened or read; the store is wiped and restored."""


class ChangelogTrimmedError(ChangelogTopicError):
    """A full replay is impossible: records below the changelog's log start were deleted
    (DeleteRecords, ``audit --trim``), so only a snapshot can bring the store back."""


class MissingExtraError(ConfigError, ImportError):
    """An optional dependency is not installed; the message names the ``statekeeper[...]``
    extra that brings it. An ImportError too, for code that falls back on one."""


def require_extra(extra: str, module: str, needed_by: str) -> None:
    """Raise :class:`MissingExtraError` unless ``module`` can be imported (it is not)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(
            f"{needed_by} needs {module}, which is not installed: "
            f"install statekeeper[{extra}] (pip install 'statekeeper[{extra}]')",
            name=module,
        )
