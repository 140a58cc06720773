"""Dead-letter routing (R4, docs/invariants.md): records that cannot be processed go to
``<app>-dlq`` with their original key and value, the dedupe headers and two error headers;
the task keeps running.

``sk.error.type`` is one of :data:`DESERIALIZATION` (a source serde failed), :data:`NULL_KEY`
(a keyless record reached an aggregation, join or repartition), :data:`INVALID_RECORD`
(a processor raised :class:`~statekeeper.processing.errors.InvalidRecordError`) or
:data:`PROCESSING` (any other exception raised by user code); ``sk.error.message`` is
``"<ExceptionClass>: <message>"``.
"""

from __future__ import annotations

from statekeeper.errors import StatekeeperError
from statekeeper.processing.errors import InvalidRecordError, NullKeyError
from statekeeper.stores.serdes import SerdeError

ERROR_TYPE = "sk.error.type"
ERROR_MESSAGE = "sk.error.message"

DESERIALIZATION = "deserialization"
NULL_KEY = "null-key"
INVALID_RECORD = "invalid-record"
PROCESSING = "processing"

_MAX_MESSAGE = 1000


def dlq_topic(application_id: str) -> str:
    """``<application_id>-dlq``."""
    return f"{application_id}-dlq"


def is_fatal(exc: BaseException) -> bool:
    """Infrastructure failures (store, broker, commit) fail the batch instead of the DLQ."""
    if not isinstance(exc, Exception):
        return True
    return isinstance(exc, StatekeeperError) and not isinstance(exc, SerdeError)


def classify(exc: BaseException) -> str:
    """The ``sk.error.type`` of a processing failure."""
    if isinstance(exc, NullKeyError):
        return NULL_KEY
    if isinstance(exc, InvalidRecordError):
        return INVALID_RECORD
    return PROCESSING


def error_headers(error_type: str, exc: BaseException | str) -> list[tuple[str, bytes]]:
    """The two error headers of a DLQ record."""
    message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return [
        (ERROR_TYPE, error_type.encode()),
        (ERROR_MESSAGE, message[:_MAX_MESSAGE].encode("utf-8", "replace")),
    ]
