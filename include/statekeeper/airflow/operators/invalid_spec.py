"""The placeholder task of an app spec that does not load: it fails naming the spec and why."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException


class InvalidSpecOperator(BaseOperator):
    """Fails at once with ``app spec <path> is invalid: <reason>``; nothing else runs.

    Put in a DAG in place of an app's task when its spec is invalid (see
    :func:`statekeeper.airflow.specs.discover`), so one bad spec never hides the other apps'
    tasks: the DAG still parses and the bad app shows as a failed task naming the fix.
    """

    ui_color = "#f4a6a6"

    def __init__(self, *, spec_path: str, reason: str, **kwargs: Any) -> None:
        kwargs.setdefault("retries", 0)
        kwargs.setdefault("doc_md", f"**Invalid app spec** `{spec_path}`: {reason}")
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.reason = reason

    def execute(self, context: Any) -> None:
        raise AirflowException(
            f"app spec {self.spec_path} is invalid: {self.reason} (fix the spec; the DAG "
            "picks it up at its next parse)"
        )
