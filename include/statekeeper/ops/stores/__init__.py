"""See an app's local state without writing Python: which stores each task holds, and
their entries. Read-only: each store is read through :mod:`statekeeper.ops.live_task` (a
private read-only shadow of its files; no task lock, no restore, not a byte written in the
task directory), so this works while the app runs (it then shows the last state RocksDB has
on disk) and never changes anything."""
