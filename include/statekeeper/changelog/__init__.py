"""Changelogs: record formats and commit markers, the writer, the restorer, restore listeners,
topic management.

Where is state restored? In :mod:`statekeeper.changelog.restorer`: ``ChangelogRestorer``
reads each store's changelog partition from its checkpointed offset (or from the start) to
the end, applies only what a commit marker closes, and reports to restore listeners; a task
calls it when it opens (:mod:`statekeeper.state.task_state_manager`). Imports only
``errors``, ``kafka`` and ``stores``.
"""

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
