"""A full replay of a changelog whose log start was moved up (DeleteRecords) is refused:
it would silently miss every key last written below the log start."""

from __future__ import annotations

from unittest import mock

import pytest

from statekeeper.changelog import restorer as restorer_module
from statekeeper.changelog.restorer import ChangelogRestorer, RestoreJob
from statekeeper.errors import ChangelogTrimmedError
from statekeeper.stores.base import StoreMetadata


class _Store:
    name = "counts"

    def read_metadata(self) -> StoreMetadata:
        return StoreMetadata()

    def wipe(self) -> None:
        pass


class _PastTheCheck(Exception):
    pass


def _restore(job: RestoreJob, low: int) -> None:
    tp = (job.topic, job.partition)
    consumer = mock.Mock()
    with (
        mock.patch.object(restorer_module, "eof_consumer", return_value=consumer),
        mock.patch.object(restorer_module, "watermarks", return_value=({tp: low}, {tp: 100})),
        mock.patch.object(restorer_module, "assign_at", side_effect=_PastTheCheck),
    ):
        ChangelogRestorer({}).restore(job)


def test_full_replay_of_a_trimmed_changelog_is_refused_naming_it() -> None:
    job = RestoreJob("app-counts-changelog", 3, _Store(), "0_3", full=True)
    with pytest.raises(
        ChangelogTrimmedError, match=r"app-counts-changelog\[3\] starts at offset 40"
    ):
        _restore(job, low=40)


def test_an_untrimmed_changelog_and_a_window_changelog_restore() -> None:
    with pytest.raises(_PastTheCheck):
        _restore(RestoreJob("app-counts-changelog", 0, _Store(), "0_0", full=True), low=0)
    window = RestoreJob(
        "app-w-changelog", 0, _Store(), "0_0", full=True, log_start_may_advance=True
    )
    with pytest.raises(_PastTheCheck):  # retention moved its log start: normal
        _restore(window, low=40)
