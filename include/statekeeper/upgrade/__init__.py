"""Upgrading a running app to a new version under a new application id
(docs/changing-apps.md#cutting-over-and-rolling-back).

Modules: :mod:`verify` (the new version's state read back and compared with the old one's
with the migration applied again), :mod:`cutover` (stop the old version, migrate, verify,
record; and the rollback). The upgrade history both write is
:mod:`statekeeper.versions.history`.
"""

from statekeeper.upgrade.cutover import CutoverReport, UpgradeError, cutover, rollback
from statekeeper.upgrade.verify import VerifyReport, verify_migration

__all__ = [
    "CutoverReport",
    "UpgradeError",
    "VerifyReport",
    "cutover",
    "rollback",
    "verify_migration",
]
