"""Serializers for store keys and values: bytes, str, int, JSON."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from statekeeper.errors import StatekeeperError

T = TypeVar("T")


class SerdeError(StatekeeperError):
    """Bytes that the configured serde cannot decode (or a value it cannot encode)."""


class Serde(Protocol[T]):
    """Turns values of one type into bytes and back. A custom serde may carry a ``name``
    (a str): manifests and topology fingerprints record it (:func:`serde_name`)."""

    def serialize(self, value: T) -> bytes: ...

    def deserialize(self, data: bytes) -> T: ...


class BytesSerde:
    """Identity serde for raw bytes."""

    def serialize(self, value: bytes) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise SerdeError(f"BytesSerde expects bytes, got {type(value).__name__}")
        return bytes(value)

    def deserialize(self, data: bytes) -> bytes:
        return data

    def serialize_many(self, values: list[bytes]) -> list[bytes]:
        if _only(values, bytes):
            return list(values)
        return list(map(self.serialize, values))

    def deserialize_many(self, data: list[bytes]) -> list[bytes]:
        return data


class StringSerde:
    """UTF-8 strings."""

    def serialize(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise SerdeError(f"StringSerde expects str, got {type(value).__name__}")
        return value.encode()

    def deserialize(self, data: bytes) -> str:
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise SerdeError(f"not valid UTF-8: {data[:32]!r}") from exc

    def serialize_many(self, values: list[str]) -> list[bytes]:
        if _only(values, str):
            try:
                return list(map(str.encode, values))
            except UnicodeEncodeError:
                pass  # a lone surrogate: raise as serialize() does
        return list(map(self.serialize, values))

    def deserialize_many(self, data: list[bytes]) -> list[str]:
        try:
            return list(map(bytes.decode, data))
        except (UnicodeDecodeError, TypeError):
            return list(map(self.deserialize, data))


class IntSerde:
    """Signed 64-bit big-endian ints; byte order keeps non-negative ints sorted in scans."""

    _fmt = struct.Struct(">q")

    def serialize(self, value: int) -> bytes:
        if not isinstance(value, int) or isinstance(value, bool):
            raise SerdeError(f"IntSerde expects int, got {type(value).__name__}")
        try:
            return self._fmt.pack(value)
        except struct.error:
            raise SerdeError(
                f"IntSerde holds signed 64-bit ints; {value} is out of range"
            ) from None

    def deserialize(self, data: bytes) -> int:
        if len(data) != 8:
            raise SerdeError(f"IntSerde expects 8 bytes, got {len(data)}: {data[:16]!r}")
        return self._fmt.unpack(data)[0]

    def serialize_many(self, values: list[int]) -> list[bytes]:
        if _only(values, int):  # type() is exact: bool is not let through
            try:
                return list(map(self._fmt.pack, values))
            except struct.error:
                pass  # out of range: raise as serialize() does
        return list(map(self.serialize, values))

    def deserialize_many(self, data: list[bytes]) -> list[int]:
        if _only(data, bytes) and set(map(len, data)) <= {8}:
            return [v for (v,) in self._fmt.iter_unpack(b"".join(data))]
        return list(map(self.deserialize, data))


#: One encoder for every JSON value: ``json.dumps`` with options builds a new one per call.
_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


def _c_encoder() -> Callable[[Any], str] | None:
    """``_JSON.encode`` without its per-call set-up: the C encoder built once (None where
    Python has no C accelerator). No circular-reference markers: a cycle raises
    RecursionError, as deep nesting does."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    encoder = make(
        None, _JSON.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True
    )
    return lambda value: "".join(encoder(value, 0))


_ENCODE = _c_encoder() or _JSON.encode
#: ``json.loads`` of bytes first sniffs the encoding; what JsonSerde writes is UTF-8.
_JSON_DECODE = json.JSONDecoder().decode


class JsonSerde:
    """Compact JSON with sorted keys, so equal values always have equal bytes."""

    def serialize(self, value: Any) -> bytes:
        try:
            return _ENCODE(value).encode()
        except (TypeError, ValueError, RecursionError) as exc:
            raise SerdeError(f"value is not JSON-serialisable: {exc}") from exc

    def serialize_many(self, values: list[Any]) -> list[bytes]:
        encode = _ENCODE
        try:
            return [encode(v).encode() for v in values]
        except (TypeError, ValueError, RecursionError) as exc:
            raise SerdeError(f"value is not JSON-serialisable: {exc}") from exc

    def deserialize(self, data: bytes) -> Any:
        try:
            return _JSON_DECODE(data.decode())
        except (ValueError, AttributeError):  # json.loads takes a BOM or UTF-16/32 too
            try:
                return json.loads(data)
            except ValueError as exc:
                raise SerdeError(f"not valid JSON: {data[:32]!r}") from exc

    def deserialize_many(self, data: list[bytes]) -> list[Any]:
        decode = _JSON_DECODE
        try:
            return [decode(d.decode()) for d in data]
        except (ValueError, AttributeError):
            return list(map(self.deserialize, data))


def serialize_all(serde: Serde[Any], values: list[Any]) -> list[bytes]:
    """``[serde.serialize(v) for v in values]``, whole-list fast when the serde has
    ``serialize_many`` (the built-in ones); raises the same SerdeError for a bad value."""
    many = getattr(serde, "serialize_many", None)
    return many(values) if many is not None else list(map(serde.serialize, values))


def deserialize_all(serde: Serde[Any], data: list[bytes]) -> list[Any]:
    """``[serde.deserialize(d) for d in data]``, like :func:`serialize_all`."""
    many = getattr(serde, "deserialize_many", None)
    return many(data) if many is not None else list(map(serde.deserialize, data))


def _only(items: list[Any], kind: type) -> bool:
    """Every item is exactly of type ``kind`` (one C-level pass)."""
    return set(map(type, items)) <= {kind}


SERDES: dict[str, type] = {
    "bytes": BytesSerde,
    "str": StringSerde,
    "int": IntSerde,
    "json": JsonSerde,
}


def serde_name(name_or_serde: str | Serde[Any]) -> str:
    """A serde's stable name, as manifests and topology fingerprints record it: the name it
    was given by ("json"), a built-in serde object's registered name (``JsonSerde()`` is
    "json"), a custom serde's ``name`` attribute when it has a string one, else its class's
    qualified name (``mymodule.MsgpackSerde``)."""
    if isinstance(name_or_serde, str):
        return name_or_serde
    for name, kind in SERDES.items():
        if type(name_or_serde) is kind:
            return name
    own = getattr(name_or_serde, "name", None)
    if isinstance(own, str) and own:
        return own
    kind = type(name_or_serde)
    return f"{kind.__module__}.{kind.__qualname__}"


def serde_for(name_or_serde: str | Serde[Any]) -> Serde[Any]:
    """Resolve a serde given by name ("bytes", "str", "int", "json") or pass one through."""
    if isinstance(name_or_serde, str):
        try:
            return SERDES[name_or_serde]()
        except KeyError:
            raise SerdeError(
                f"unknown serde {name_or_serde!r}; choose one of {sorted(SERDES)}"
            ) from None
    return name_or_serde
