"""Topology compilation: subtopologies, topics, store specs, describe(), pickling."""

from __future__ import annotations

import pickle

import pytest
from pyspark import cloudpickle

from spark_apps.patient_monitoring import topology as patient_monitoring
from spark_apps.word_count import topology as word_count
from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder
from statekeeper.processing.errors import TopologyError

from .harness import records


def _word_count_like():
    b = StreamsBuilder()
    threshold = 2  # captured by a closure: must survive pickling
    (
        b.stream("lines", key_serde="bytes", value_serde="str")
        .flat_map_values(lambda line: line.split())
        .group_by(lambda _k, w: w, Grouped.as_("words"))
        .count(Materialized.as_("counts"))
        .filter(lambda _w, n: n >= threshold)
        .to_stream()
        .to("frequent", value_serde="int")
    )
    return b.build()


def test_describe_reads_like_kafka_streams():
    text = _word_count_like().describe()
    assert text.splitlines()[:8] == [
        "Topologies:",
        "   Sub-topology: 0",
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [lines])",
        "      --> KSTREAM-FLATMAPVALUES-0000000001",
        "    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])",
        "      --> KSTREAM-KEY-SELECT-0000000002",
        "      <-- KSTREAM-SOURCE-0000000000",
        "    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])",
    ]
    assert "    Sink: words-repartition-sink (topic: words-repartition)" in text
    assert "   Sub-topology: 1" in text
    assert "    Source: words-repartition-source (topics: [words-repartition])" in text
    assert "    Processor: KSTREAM-AGGREGATE-0000000005 (stores: [counts])" in text
    assert "    Internal store: sk-task-state-1" in text


def test_topics_for_the_runner():
    topology = _word_count_like()
    assert topology.source_topics("wc") == ["lines"]
    assert topology.internal_topics("wc") == ["wc-words-repartition"]
    assert topology.output_topics("wc") == ["frequent"]
    assert topology.dlq_topic("wc") == "wc-dlq"
    assert topology.copartition_groups("wc") == []
    with pytest.raises(TopologyError, match="not read"):
        topology.subtopology_of("wc", "frequent")
    with pytest.raises(TopologyError, match="no subtopology 7"):
        topology.store_specs(7)


@pytest.mark.parametrize(
    "build",
    [_word_count_like, word_count.build_topology, patient_monitoring.build_topology],
    ids=["closures", "word_count", "patient_monitoring"],
)
def test_topologies_pickle_with_cloudpickle(build):
    topology = build()
    clone = pickle.loads(cloudpickle.dumps(topology))
    assert clone.describe() == topology.describe()
    assert [clone.store_specs(s.id) for s in clone.subtopologies] == [
        topology.store_specs(s.id) for s in topology.subtopologies
    ]


def test_an_unpickled_topology_runs(harness):
    clone = pickle.loads(cloudpickle.dumps(_word_count_like()))
    up = harness(clone, name="up", subtopology=0)
    up.run(records("lines", [(None, "a b a", 1)]))
    assert [s.key for s in up.emitter.to("app-words-repartition")] == [b"a", b"b", b"a"]


def test_build_is_a_snapshot():
    b = StreamsBuilder()
    stream = b.stream("in")
    first = b.build()
    stream.to("out")
    assert first.output_topics("app") == []
    assert b.build().output_topics("app") == ["out"]


@pytest.mark.parametrize(
    "mistake, message",
    [
        (lambda b: (b.stream("in"), b.stream("in")), "read by two sources"),
        (lambda b: b.stream("bad topic!"), "invalid topic name"),
        (
            lambda b: (
                b.stream("a").group_by_key().count("same"),
                b.stream("b").group_by_key().count("same"),
            ),
            "already exists",
        ),
        (lambda b: b.stream("in").group_by_key().count("sk-task-state-9"), "reserved"),
        (lambda b: b.stream("in").process(object()), "Processor factory"),
        (lambda b: b.stream("in").process(lambda: 1, stores="x"), "list of store names"),
    ],
)
def test_mistakes_are_reported_clearly(mistake, message):
    b = StreamsBuilder()
    with pytest.raises(TopologyError, match=message):
        mistake(b)
        b.build()


def test_empty_topology_is_rejected():
    with pytest.raises(TopologyError, match="empty"):
        StreamsBuilder().build()
