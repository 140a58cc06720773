"""Keys in, keys and values out: how query parameters become store bytes and back to JSON.

A key is given as text (``key=``) and encoded with the store's key serde: ``str`` keys as
they are, ``int`` keys as a decimal integer, ``json`` keys as a JSON document (``key="a"``
for the JSON string ``a``), ``bytes`` keys as UTF-8. ``key_b64=`` gives the serialized key
itself (URL-safe or standard base64), for any serde and for bytes that are not UTF-8; it
must still decode with the key serde. Prefixes (``prefix=`` as UTF-8 text, or
``prefix_b64=``) match the serialized key's first bytes. In answers, keys and values
deserialized by a ``bytes`` serde (or by none) appear base64-encoded as ``key_b64`` /
``value_b64``; every other one appears as JSON under ``key`` / ``value``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from statekeeper.stores.serdes import (
    BytesSerde,
    IntSerde,
    JsonSerde,
    Serde,
    SerdeError,
    StringSerde,
)


class BadQueryError(Exception):
    """A request the server cannot answer as asked (HTTP ``status``, default 400)."""

    def __init__(self, message: str, status: int = 400, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.details = details


def b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


def b64decode(text: str, what: str) -> bytes:
    """Standard or URL-safe base64, padding optional."""
    cleaned = text.strip().replace("-", "+").replace("_", "/")
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        raise BadQueryError(f"{what} is not valid base64: {text[:64]!r}") from None


def encode_key(serde: Serde[Any], text: str | None, b64: str | None, max_bytes: int) -> bytes:
    """The serialized key a request names (see the module docstring)."""
    if (text is None) == (b64 is None):
        raise BadQueryError("give exactly one of key= and key_b64=")
    if b64 is not None:
        if len(b64) > (max_bytes * 4) // 3 + 8:
            raise BadQueryError(f"key is longer than {max_bytes} bytes", status=413)
        raw = b64decode(b64, "key_b64")
        _check_length(raw, max_bytes)
        try:
            serde.deserialize(raw)
        except SerdeError as exc:
            raise BadQueryError(
                f"key_b64 does not decode with the store's key serde: {exc}"
            ) from None
        return raw
    assert text is not None
    if len(text) > max_bytes * 4:  # longer than any UTF-8 encoding that fits
        raise BadQueryError(f"key is longer than {max_bytes} bytes", status=413)
    raw = _serialize_text(serde, text, "key")
    _check_length(raw, max_bytes)
    return raw


def encode_prefix(text: str | None, b64: str | None, max_bytes: int) -> bytes:
    """The serialized-key prefix a request names (``prefix=`` UTF-8 text, ``prefix_b64=``)."""
    if (text is None) == (b64 is None):
        raise BadQueryError("give exactly one of prefix= and prefix_b64=")
    raw = text.encode() if text is not None else b64decode(b64 or "", "prefix_b64")
    _check_length(raw, max_bytes)
    return raw


def encode_bound(serde: Serde[Any], text: str | None, b64: str | None, name: str, max_bytes: int):
    """A range bound (``from``/``to`` or ``from_b64``/``to_b64``); None when absent."""
    if text is not None and b64 is not None:
        raise BadQueryError(f"give {name}= or {name}_b64=, not both")
    if text is None and b64 is None:
        return None
    if b64 is not None:
        raw = b64decode(b64, f"{name}_b64")
    else:
        assert text is not None
        raw = _serialize_text(serde, text, name)
    _check_length(raw, max_bytes)
    return raw


def _check_length(raw: bytes, max_bytes: int) -> None:
    if len(raw) > max_bytes:
        raise BadQueryError(
            f"key is {len(raw)} bytes; the server accepts at most {max_bytes} "
            "(setting query_max_key_bytes)",
            status=413,
        )


def _serialize_text(serde: Serde[Any], text: str, name: str) -> bytes:
    value: Any
    if isinstance(serde, StringSerde):
        value = text
    elif isinstance(serde, IntSerde):
        try:
            value = int(text, 10)
        except ValueError:
            raise BadQueryError(
                f"{name}={text[:64]!r}: the store's keys are int; give a decimal integer"
            ) from None
    elif isinstance(serde, JsonSerde):
        try:
            value = json.loads(text)
        except ValueError:
            raise BadQueryError(
                f"{name}={text[:64]!r}: the store's keys are JSON; give a JSON document "
                '(a string key is quoted: "a")'
            ) from None
    elif isinstance(serde, BytesSerde):
        value = text.encode()
    else:
        value = text  # a custom serde: it decides whether text will do
    try:
        return serde.serialize(value)
    except SerdeError as exc:
        raise BadQueryError(
            f"{name}={text[:64]!r} cannot be encoded with the store's serde: {exc}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a custom serde may raise anything
        raise BadQueryError(
            f"{name}={text[:64]!r} cannot be encoded with the store's serde: {exc}"
        ) from None


def decoded(serde: Serde[Any], raw: bytes, field: str) -> dict[str, Any]:
    """``{field: value}`` (JSON-able) or ``{field_b64: ...}`` for bytes (see module doc)."""
    if isinstance(serde, BytesSerde):
        return {f"{field}_b64": b64encode(raw)}
    try:
        value = serde.deserialize(raw)
    except Exception as exc:  # noqa: BLE001 - bytes the serde cannot read: show them raw
        return {f"{field}_b64": b64encode(raw), f"{field}_error": str(exc)}
    if isinstance(value, bytes | bytearray):
        return {f"{field}_b64": b64encode(bytes(value))}
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return {f"{field}_b64": b64encode(raw)}
    return {field: value}


def parse_int(params: dict[str, str], name: str, default: int | None = None) -> int | None:
    """An integer parameter (400 naming it when it is not one)."""
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text, 10)
    except ValueError:
        raise BadQueryError(f"{name}={text[:64]!r} is not an integer") from None


def parse_bool(params: dict[str, str], name: str) -> bool:
    text = params.get(name)
    if text is None:
        return False
    lowered = text.lower()
    if lowered in ("", "1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise BadQueryError(f"{name}={text[:16]!r}: use true or false")


def encode_token(doc: dict[str, Any]) -> str:
    """An opaque next-page token."""
    return b64encode(json.dumps(doc, separators=(",", ":"), sort_keys=True).encode())


def decode_token(token: str, store: str, kind: str) -> dict[str, Any]:
    """The document in a page token this server handed out for ``store`` and ``kind``."""
    try:
        doc = json.loads(b64decode(token, "page_token"))
    except (ValueError, BadQueryError):
        raise BadQueryError("page_token is not a token this server handed out") from None
    if not isinstance(doc, dict) or doc.get("store") != store or doc.get("kind") != kind:
        raise BadQueryError(
            f"page_token belongs to another query (give it back to the same {kind} of {store})"
        )
    return doc
