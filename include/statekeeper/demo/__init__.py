"""The store-level demo: a plain-Python counting worker, its input and a reference model."""
