"""See an app's local state without writing Python: which stores each task holds, and
their entries. Read-only: RocksDB is opened in read-only mode, so this works while the app
runs (it then shows the last state RocksDB has on disk) and never changes anything."""
