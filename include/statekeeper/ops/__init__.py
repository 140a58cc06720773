"""Operations on a stateful app's state (snapshots, restores, drills, changelog audits).

Library first: the ``statekeeper`` CLI and Airflow only call what is here.
"""
