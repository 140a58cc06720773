"""Hooks: the app an operator acts on (see :class:`StatekeeperAppHook`)."""

from statekeeper.airflow.hooks.app import StatekeeperAppHook

__all__ = ["StatekeeperAppHook"]
