"""Local state: task directories and locks, checkpoint files, restore progress, and the task
state manager (open, restore, close; :mod:`statekeeper.state.task_state_manager`). Task ids
(``<subtopology>_<partition>``, the task directories' names) are read and written by
:class:`statekeeper.state.task_id.TaskId` alone.

Where is a micro-batch committed? In :mod:`statekeeper.state.transaction`: a
``TaskTransaction`` takes a task's commit from flushing its caches to its after-commit hooks
(``commit_group`` commits several tasks at once); nothing else commits a task's state.
"""
