"""patient_monitoring v2: heart-rate entries with their window's end, and per patient and
minute the peak temperature (see topology.py); v1's state moves here with ``statekeeper
upgrade migrate`` (migrations.py)."""
