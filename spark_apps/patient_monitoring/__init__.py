"""patient_monitoring: pulse windows, heart rate, alerts, checkouts (see topology.py)."""
