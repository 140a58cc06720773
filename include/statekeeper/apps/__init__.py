"""Example stateful apps built with the DSL (``module:build_topology`` for app specs)."""
