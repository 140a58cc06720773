"""Changelog topics: created with the configs their stores need; an existing one is checked
on what it must have, and not on create-only configs (min.compaction.lag.ms)."""

from __future__ import annotations

import pytest

from statekeeper.changelog.records import changelog_topic
from statekeeper.changelog.topics import ensure_changelog_topics
from statekeeper.errors import ChangelogTopicError
from statekeeper.kafka.admin import ensure_topic, topic_configs
from statekeeper.stores import Stores
from statekeeper.stores.builders import CHANGELOG_MIN_COMPACTION_LAG_MS


def test_new_changelogs_get_the_compaction_lag_and_older_ones_still_pass(admin, topic_name):
    fresh, older = Stores.persistent("fresh"), Stores.persistent("older")
    # A changelog created before min.compaction.lag.ms was set at creation.
    ensure_topic(admin, changelog_topic(topic_name, "older"), 2, {"cleanup.policy": "compact"})
    ensure_changelog_topics(admin, topic_name, [fresh, older], 2)

    configs = topic_configs(admin, changelog_topic(topic_name, "fresh"), 10.0)
    # Both brokers report a key set at creation (Kafka reports every key).
    assert configs["min.compaction.lag.ms"] == str(CHANGELOG_MIN_COMPACTION_LAG_MS)
    # What a changelog must have is still enforced on an existing topic.
    with pytest.raises(ChangelogTopicError, match="partitions"):
        ensure_changelog_topics(admin, topic_name, [older], 3)
