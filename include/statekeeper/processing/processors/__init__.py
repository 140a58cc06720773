"""Processors behind the DSL operations (record at a time, and batch versions where a
linear chain allows the vectorised fast path)."""
