"""Tasks in (tasksets), experiences out (the SQLite experience store, also the explore→train queue)."""

from buffer.experience import Experience
from buffer.experience_store import ExperienceStore
from buffer.taskset import Task, TasksetError, TasksetReader, compute_total_steps, load_taskset

__all__ = [
    "Experience",
    "ExperienceStore",
    "Task",
    "TasksetError",
    "TasksetReader",
    "compute_total_steps",
    "load_taskset",
]
