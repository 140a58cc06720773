"""The streams DSL: StreamsBuilder → KStream / KTable / KGroupedStream → Topology."""

from statekeeper.processing.dsl.grouped import Grouped, KGroupedStream
from statekeeper.processing.dsl.kstream import KStream
from statekeeper.processing.dsl.ktable import KTable
from statekeeper.processing.dsl.materialized import Materialized
from statekeeper.processing.dsl.streams_builder import StreamsBuilder
from statekeeper.processing.dsl.suppress import Suppressed
from statekeeper.processing.dsl.windowed import TimeWindowedKStream

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
