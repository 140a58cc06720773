"""word_count v2: per word a JSON count and first-seen time (see topology.py); v1's state
moves here with ``statekeeper upgrade migrate`` (migrations.py)."""
