"""The task registry: the paper's benchmarks, UtilityBench, the bundled ``tiny`` datasets and
the user's own tasks (``register_task(Task(...))``, task files: docs/tasks.md); docs/datasets.md.

This package's top imports no ``datasets``/``torch``, so the config check (``rlsr.config``) reads
the registry in a fraction of a second; the row readers (``load_examples``,
``verification_inputs``, ...) live in ``rlsr.data.loading``, which imports ``datasets``.
"""

from rlsr.data.registry import (
    GROUPS,
    REGISTRY,
    VERIFIERS,
    get_spec,
    group_system_prompt,
    resolve_tasks,
    tasks_system_prompt,
)
from rlsr.data.tasks import (
    TASKS_PATH_ENV,
    Task,
    TaskError,
    load_env_tasks,
    load_task_file,
    load_tasks,
    register_task,
    task_names,
    task_record_problem,
    task_records,
    unregister_task,
    version_differences,
    version_records,
)

__all__ = [
    "GROUPS",
    "REGISTRY",
    "TASKS_PATH_ENV",
    "VERIFIERS",
    "Task",
    "TaskError",
    "get_spec",
    "group_system_prompt",
    "load_env_tasks",
    "load_task_file",
    "load_tasks",
    "register_task",
    "resolve_tasks",
    "task_names",
    "task_record_problem",
    "task_records",
    "tasks_system_prompt",
    "unregister_task",
    "version_differences",
    "version_records",
]
