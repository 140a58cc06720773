"""Changelogs: record formats, writer, restorer, restore listeners, topic management."""

from statekeeper.changelog.listeners import BaseRestoreListener, StateRestoreListener
from statekeeper.changelog.records import MARKER_KEY, CommitMarker, changelog_topic
from statekeeper.changelog.restorer import ChangelogRestorer, RestoreJob, RestoreOutcome
from statekeeper.changelog.writer import ChangelogWriter

__all__ = [
    "MARKER_KEY",
    "BaseRestoreListener",
    "ChangelogRestorer",
    "ChangelogWriter",
    "CommitMarker",
    "RestoreJob",
    "RestoreOutcome",
    "StateRestoreListener",
    "changelog_topic",
]
