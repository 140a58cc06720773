"""App versions and compatibility: what a topology's state depends on, and whether a new
version can run on the state an older one wrote (docs/changing-apps.md).

Modules: :mod:`fingerprint` (a topology's stores, serdes, windows, subtopologies and topics
as plain JSON with a digest), :mod:`recorded` (the copy in the state root,
``topology.json``), :mod:`compatibility` (old vs new: per store and source topic a verdict
and the difference), :mod:`auto_names` (names the DSL numbered, which shift),
:mod:`start_check` (the refusal at start), :mod:`plan_table` (a plan as text).
"""

from statekeeper.versions.compatibility import (
    StoreChange,
    StoreVerdict,
    TopicChange,
    TopicVerdict,
    UpgradePlan,
    compare,
)
from statekeeper.versions.fingerprint import (
    FingerprintError,
    StoreFingerprint,
    SubtopologyFingerprint,
    TopologyFingerprint,
    WindowFingerprint,
    fingerprint_of,
)
from statekeeper.versions.recorded import TOPOLOGY_FILE, read_recorded, write_recorded
from statekeeper.versions.start_check import IncompatibleStateError, check_state_version

__all__ = [
    "TOPOLOGY_FILE",
    "FingerprintError",
    "IncompatibleStateError",
    "StoreChange",
    "StoreFingerprint",
    "StoreVerdict",
    "SubtopologyFingerprint",
    "TopicChange",
    "TopicVerdict",
    "TopologyFingerprint",
    "UpgradePlan",
    "WindowFingerprint",
    "check_state_version",
    "compare",
    "fingerprint_of",
    "read_recorded",
    "write_recorded",
]
