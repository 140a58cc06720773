"""Building join nodes: stream-table (lookup) and table-table (both sides + merge).

Joined inputs must end up in one subtopology (they share stores), so their source topics
must be co-partitioned; ``Topology.copartition_groups`` lists them for the runner to check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statekeeper.processing.dsl.materialized import Materialized, materialized_or_default
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.processors.joins import Joiner, StreamTableJoinOp, TableTableJoinOp
from statekeeper.processing.processors.table import TableOp

if TYPE_CHECKING:
    from statekeeper.processing.dsl.kstream import KStream
    from statekeeper.processing.dsl.ktable import KTable


def _check_joiner(joiner: Joiner) -> None:
    if not callable(joiner):
        raise TopologyError(f"a join needs a joiner(left_value, right_value), got {joiner!r}")


def stream_table_join(
    stream: KStream, table: KTable, joiner: Joiner, *, left: bool, name: str | None
) -> KStream:
    from statekeeper.processing.dsl.kstream import KStream

    _check_joiner(joiner)
    stream._check_not_windowed("join")
    if stream._builder is not table._builder:
        raise TopologyError("join(): the stream and the table come from different builders")
    if stream._key_changed:
        raise TopologyError(
            "join(): the stream's key was changed upstream, so it is not partitioned like the "
            "table; call .repartition() on the stream before joining"
        )
    store = table.ensure_materialized()
    op = StreamTableJoinOp(store, joiner, left)
    node = stream._builder._add_processor(op.kind, op, [stream._node], [store], name)
    return KStream(stream._builder, node, stream._key_serde, None)


def table_table_join(
    this: KTable,
    other: KTable,
    joiner: Joiner,
    *,
    left: bool,
    materialized: Materialized | str | None,
    name: str | None,
) -> KTable:
    from statekeeper.processing.dsl.ktable import KTable

    _check_joiner(joiner)
    b = this._builder
    if other._builder is not b:
        raise TopologyError("join(): the tables come from different builders")
    this_store, other_store = this.ensure_materialized(), other.ensure_materialized()
    this_op = TableTableJoinOp(other_store, joiner, this_is_left=True, left=left)
    other_op = TableTableJoinOp(this_store, joiner, this_is_left=False, left=left)
    this_node = b._add_processor(this_op.kind, this_op, [this._node], [other_store], None)
    other_node = b._add_processor(other_op.kind, other_op, [other._node], [this_store], None)
    merge = TableOp("to_stream", None)
    merge.kind = "KTABLE-MERGE"
    store = None
    value_serde = None
    if materialized is not None:
        m = materialized_or_default(materialized)
        spec = m.key_value_spec(
            m.name or b._store_name("KTABLE-MERGE"),
            this._key_serde or b.default_key_serde,
            b.default_value_serde,
        )
        b._add_store(spec)
        merge.store = store = spec.name
        value_serde = spec.value_serde
    merge_node = b._add_processor(
        merge.kind, merge, [this_node, other_node], [store] if store else [], name
    )
    return KTable(b, merge_node, this._key_serde, value_serde, store=store)
