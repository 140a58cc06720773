"""Local state: directories, task locks, checkpoint files and the task state manager."""
