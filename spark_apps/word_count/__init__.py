"""word_count: lines -> words -> counts (see topology.py)."""
