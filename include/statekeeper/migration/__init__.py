"""State migration between app versions (docs/changing-apps.md#migrating-state).

Modules: :mod:`functions` (a store's migration, per record or whole-store, applied to
entries), :mod:`store_plan` (per store: copy, migrate, start empty or skip, and what is
refused), :mod:`old_state` (the old version's committed state of a task, read-only in a
scratch copy), :mod:`task` (one task migrated: old stores in, new stores and changelogs out,
committed at the old source offsets), :mod:`job` (every task, on Spark or in a loop).
"""

from statekeeper.migration.functions import (
    MigrationError,
    MigrationRefused,
    StoreCounts,
    StoreMigration,
    migrated_entries,
)
from statekeeper.migration.job import (
    MigrationReport,
    PreparedMigration,
    migrate_app,
    prepare_migration,
    run_migration,
)
from statekeeper.migration.store_plan import StoreAction, StoreStep, store_steps
from statekeeper.migration.task import MigrationJob, TaskMigration, migrate_task

__all__ = [
    "MigrationError",
    "MigrationJob",
    "MigrationRefused",
    "PreparedMigration",
    "MigrationReport",
    "StoreAction",
    "StoreCounts",
    "StoreMigration",
    "StoreStep",
    "TaskMigration",
    "migrate_app",
    "migrate_task",
    "migrated_entries",
    "prepare_migration",
    "run_migration",
    "store_steps",
]
