"""Process-wide state services: one producer, one restorer, settings; hands out task managers."""

from __future__ import annotations

from statekeeper.changelog.listeners import (
    CompositeRestoreListener,
    LoggingRestoreListener,
    StateRestoreListener,
)
from statekeeper.changelog.restorer import ChangelogRestorer
from statekeeper.changelog.topics import ensure_changelog_topics
from statekeeper.changelog.writer import ChangelogWriter
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import make_admin, wait_for_broker
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.task_state_manager import StoreInstaller, TaskStateManager
from statekeeper.state.transaction import StepHook
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.rocksdb_memory import configure_rocksdb_memory


class StateEnvironment:
    """Shared by every task of a process (a Spark executor's Python worker, a CLI run)."""

    def __init__(
        self,
        settings: StatekeeperSettings,
        listeners: list[StateRestoreListener] | None = None,
        *,
        check_broker: bool = True,
        read_only: bool = False,
    ) -> None:
        """``read_only``: no changelog producer; every task it hands out is read-only (see
        :class:`TaskStateManager`)."""
        self.settings = settings
        self.read_only = read_only
        if check_broker:
            wait_for_broker(settings.bootstrap_servers, settings.broker_timeout_s)
        configure_rocksdb_memory(settings.block_cache_bytes, settings.write_buffer_bytes)
        self.listener = CompositeRestoreListener([LoggingRestoreListener(), *(listeners or [])])
        self.writer = (
            None if read_only else ChangelogWriter(producer_config(settings.bootstrap_servers))
        )
        self.restorer = ChangelogRestorer(
            consumer_config(settings.bootstrap_servers),
            batch_records=settings.restore_batch_records,
            threads=settings.restore_threads,
            timeout_s=settings.broker_timeout_s,
            listener=self.listener,
        )

    def ensure_changelogs(self, specs: list[StoreSpec], source_partitions: int) -> None:
        """Create (or check) the changelog topics of ``specs``, co-partitioned with the source."""
        admin = make_admin(self.settings.bootstrap_servers)
        ensure_changelog_topics(
            admin,
            self.settings.application_id,
            specs,
            source_partitions,
            timeout_s=self.settings.broker_timeout_s,
        )

    def task(
        self,
        task_id: str,
        partition: int,
        specs: list[StoreSpec],
        commit_hooks: list[StepHook] | None = None,
        installer: StoreInstaller | None = None,
        epoch: int = 0,
    ) -> TaskStateManager:
        """A (not yet opened) state manager for one task, writing under ``epoch``."""
        s = self.settings
        return TaskStateManager(
            application_id=s.application_id,
            task_id=task_id,
            partition=partition,
            specs=specs,
            task_dir=TaskDirectory(s.state_dir, s.application_id, task_id),
            writer=self.writer,
            restorer=self.restorer,
            lock_timeout_s=s.lock_timeout_s,
            commit_timeout_s=s.broker_timeout_s * 2,
            listener=self.listener,
            commit_hooks=commit_hooks,
            installer=installer,
            read_only=self.read_only,
            epoch=0 if self.read_only else epoch,
            fence_check_after_s=s.fence_check_after_s,
            fence_scan_interval_s=s.fence_scan_interval_s,
        )

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
