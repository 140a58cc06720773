"""Serdes: roundtrips, clear SerdeErrors on bad input, and lookup by name."""

from __future__ import annotations

import pytest

from statekeeper.errors import StatekeeperError
from statekeeper.stores.serdes import (
    SERDES,
    BytesSerde,
    IntSerde,
    JsonSerde,
    SerdeError,
    StringSerde,
    deserialize_all,
    serde_for,
    serialize_all,
)


@pytest.mark.parametrize("value", [b"", b"abc", b"\x00\xff" * 10])
def test_bytes_roundtrip(value):
    serde = BytesSerde()
    assert serde.deserialize(serde.serialize(value)) == value


@pytest.mark.parametrize("value", [bytearray(b"xy"), memoryview(b"xy")])
def test_bytes_serde_accepts_bytes_like_and_returns_bytes(value):
    data = BytesSerde().serialize(value)
    assert data == b"xy" and type(data) is bytes


@pytest.mark.parametrize("value", ["", "hello", "ünïcødé ✓", "\x00"])
def test_string_roundtrip(value):
    serde = StringSerde()
    data = serde.serialize(value)
    assert data == value.encode("utf-8")
    assert serde.deserialize(data) == value


@pytest.mark.parametrize("value", [0, 1, -1, 42, 2**63 - 1, -(2**63)])
def test_int_roundtrip(value):
    serde = IntSerde()
    data = serde.serialize(value)
    assert len(data) == 8
    assert serde.deserialize(data) == value


def test_int_serde_is_big_endian_so_non_negative_ints_sort_by_bytes():
    serde = IntSerde()
    values = [0, 1, 255, 256, 10**6, 2**40, 2**63 - 1]
    assert sorted(values, key=serde.serialize) == values
    assert serde.serialize(1) == b"\x00" * 7 + b"\x01"


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -3, 1.5, "s", [], [1, "a", None], {}, {"b": [1, {"c": None}], "a": 1.25}],
)
def test_json_roundtrip(value):
    serde = JsonSerde()
    assert serde.deserialize(serde.serialize(value)) == value


def test_json_is_compact_with_sorted_keys_so_equal_values_have_equal_bytes():
    serde = JsonSerde()
    assert serde.serialize({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'
    assert serde.serialize({"a": 1, "b": 2}) == serde.serialize({"b": 2, "a": 1})


def test_serde_error_is_a_statekeeper_error():
    assert issubclass(SerdeError, StatekeeperError)


@pytest.mark.parametrize("value", ["text", 1, None, [b"x"]])
def test_bytes_serde_rejects_non_bytes(value):
    with pytest.raises(SerdeError, match="BytesSerde expects bytes"):
        BytesSerde().serialize(value)


@pytest.mark.parametrize("value", [b"bytes", 1, None])
def test_string_serde_rejects_non_str(value):
    with pytest.raises(SerdeError, match=f"StringSerde expects str, got {type(value).__name__}"):
        StringSerde().serialize(value)


def test_string_serde_rejects_invalid_utf8():
    with pytest.raises(SerdeError, match="not valid UTF-8") as info:
        StringSerde().deserialize(b"\xff\xfeabc")
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


@pytest.mark.parametrize("value", ["1", 1.0, None, True, False])
def test_int_serde_rejects_non_int_and_bool(value):
    with pytest.raises(SerdeError, match=f"IntSerde expects int, got {type(value).__name__}"):
        IntSerde().serialize(value)


@pytest.mark.parametrize("data", [b"", b"\x01", b"\x00" * 7, b"\x00" * 9])
def test_int_serde_rejects_wrong_length(data):
    with pytest.raises(SerdeError, match=f"IntSerde expects 8 bytes, got {len(data)}"):
        IntSerde().deserialize(data)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1])
def test_int_serde_rejects_out_of_range_int_with_serde_error(value):
    with pytest.raises(SerdeError):
        IntSerde().serialize(value)


@pytest.mark.parametrize("data", [b"", b"{", b"{'a': 1}", b"nope", b"\xff\xfe"])
def test_json_serde_rejects_bad_json(data):
    with pytest.raises(SerdeError, match="not valid JSON"):
        JsonSerde().deserialize(data)


@pytest.mark.parametrize("value", [{1, 2}, object(), b"bytes", {"a": 1, 2: "mixed keys"}])
def test_json_serde_rejects_unserialisable_values(value):
    with pytest.raises(SerdeError, match="not JSON-serialisable"):
        JsonSerde().serialize(value)


def test_json_serde_rejects_circular_values():
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(SerdeError, match="not JSON-serialisable"):
        JsonSerde().serialize(loop)


@pytest.mark.parametrize(
    ("name", "cls"),
    [("bytes", BytesSerde), ("str", StringSerde), ("int", IntSerde), ("json", JsonSerde)],
)
def test_serde_for_resolves_names(name, cls):
    assert isinstance(serde_for(name), cls)


def test_serde_for_returns_a_fresh_instance_per_call():
    assert serde_for("json") is not serde_for("json")


def test_serde_for_passes_serde_objects_through():
    serde = IntSerde()
    assert serde_for(serde) is serde


@pytest.mark.parametrize("name", ["string", "", "BYTES", "avro"])
def test_serde_for_unknown_name_lists_the_choices(name):
    with pytest.raises(SerdeError, match=f"unknown serde {name!r}") as info:
        serde_for(name)
    assert str(sorted(SERDES)) in str(info.value)


# -- whole-column (de)serialisation: same results and same errors as one value at a time --

_COLUMNS = {
    "bytes": [b"a", b"", bytearray(b"xy"), b"z"],
    "str": ["a", "", "ünï", "z"],
    "int": [0, -1, 2**63 - 1, -(2**63), 42],
    "json": [{"b": 1, "a": [1, 2]}, None, "s", 3.5],
}
_BAD = {
    "bytes": ([b"a", "text"], "BytesSerde expects bytes"),
    "str": (["a", b"raw"], "StringSerde expects str"),
    "int": ([1, True], "IntSerde expects int"),
    "json": ([1, {1, 2}], "not JSON-serialisable"),
}
_BAD_BYTES = {
    "str": ([b"ok", b"\xff"], "not valid UTF-8"),
    "int": ([b"\x00" * 8, b"\x01"], "IntSerde expects 8 bytes"),
    "json": ([b"1", b"{"], "not valid JSON"),
}


class _PlainSerde:
    """A user serde without the *_many methods."""

    def serialize(self, value: int) -> bytes:
        return str(value).encode()

    def deserialize(self, data: bytes) -> int:
        return int(data)


@pytest.mark.parametrize("name", sorted(_COLUMNS))
def test_whole_columns_equal_value_by_value(name):
    serde = serde_for(name)
    values = _COLUMNS[name]
    data = serialize_all(serde, values)
    assert data == [serde.serialize(v) for v in values]
    assert deserialize_all(serde, data) == [serde.deserialize(d) for d in data]
    assert serialize_all(serde, []) == [] and deserialize_all(serde, []) == []


def test_out_of_range_int_in_a_column_raises_like_one_value():
    with pytest.raises(SerdeError, match="out of range"):
        serialize_all(IntSerde(), [1, 2**63])


@pytest.mark.parametrize("name", sorted(_BAD))
def test_a_bad_value_in_a_column_raises_the_single_value_error(name):
    values, message = _BAD[name]
    with pytest.raises(SerdeError, match=message):
        serialize_all(serde_for(name), values)


@pytest.mark.parametrize("name", sorted(_BAD_BYTES))
def test_bad_bytes_in_a_column_raise_the_single_value_error(name):
    data, message = _BAD_BYTES[name]
    with pytest.raises(SerdeError, match=message):
        deserialize_all(serde_for(name), data)


def test_serdes_without_column_methods_are_called_per_value():
    assert serialize_all(_PlainSerde(), [1, 22]) == [b"1", b"22"]
    assert deserialize_all(_PlainSerde(), [b"1", b"22"]) == [1, 22]


def test_json_bulk_and_one_by_one_agree_with_the_json_module():
    import json

    values = [1, "\u00e9t\u00e9", {"b": [1.5, None, True], "a": {"z": 1, "y": "\n"}}, [], None]
    serde = JsonSerde()
    expected = [json.dumps(v, separators=(",", ":"), sort_keys=True).encode() for v in values]
    assert serde.serialize_many(values) == expected
    assert [serde.serialize(v) for v in values] == expected
    assert serde.deserialize_many(expected) == values
    assert [serde.deserialize(d) for d in expected] == values


def test_json_deserialize_takes_what_json_loads_takes():
    serde = JsonSerde()
    assert serde.deserialize(b"\xef\xbb\xbf" + b'{"a":1}') == {"a": 1}  # a UTF-8 BOM
    assert serde.deserialize('{"a":1}'.encode("utf-16")) == {"a": 1}
    assert serde.deserialize_many([b"1", '"x"'.encode("utf-16")]) == [1, "x"]
    with pytest.raises(SerdeError, match="not valid JSON"):
        serde.deserialize_many([b"1", b"{"])
