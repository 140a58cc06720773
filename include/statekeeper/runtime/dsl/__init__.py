"""The streams DSL: StreamsBuilder → KStream / KTable / KGroupedStream → Topology."""

from statekeeper.runtime.dsl.grouped import Grouped, KGroupedStream
from statekeeper.runtime.dsl.kstream import KStream
from statekeeper.runtime.dsl.ktable import KTable
from statekeeper.runtime.dsl.materialized import Materialized
from statekeeper.runtime.dsl.streams_builder import StreamsBuilder
from statekeeper.runtime.dsl.suppress import Suppressed
from statekeeper.runtime.dsl.windowed import TimeWindowedKStream

__all__ = [
    "Grouped",
    "KGroupedStream",
    "KStream",
    "KTable",
    "Materialized",
    "StreamsBuilder",
    "Suppressed",
    "TimeWindowedKStream",
]
