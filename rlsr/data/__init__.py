"""The task registry: the paper's benchmarks, UtilityBench, the bundled
``tiny`` and the user's own tasks (``register_task(Task(...))``, task files: docs/tasks.md).

``get_spec(name)``, ``REGISTRY``, ``GROUPS``, ``resolve_tasks("a,b" | group)``. See
docs/datasets.md. This package's top imports no ``datasets``/``torch``, so the config check
(``rlsr.config``) reads the registry in a fraction of a second; the row readers
(``load_examples(name, *, path, split, limit, system_prompt, data_dir, columns)``,
``verification_inputs``, ...) live in ``rlsr.data.loading``, which imports ``datasets``.
"""

from rlsr.data.formatting import USER_PROMPT_TEMPLATE, build_prompt
from rlsr.data.registry import (
    BUILTIN_TASKS,
    GROUP_SYSTEM_PROMPTS,
    GROUPS,
    REGISTRY,
    VERIFIERS,
    TaskSource,
    TaskSpec,
    get_spec,
    group_system_prompt,
    groups_of,
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
    "BUILTIN_TASKS",
    "TASKS_PATH_ENV",
    "Task",
    "TaskError",
    "TaskSource",
    "load_env_tasks",
    "load_task_file",
    "load_tasks",
    "register_task",
    "task_names",
    "task_record_problem",
    "task_records",
    "version_records",
    "version_differences",
    "unregister_task",
    "TaskSpec",
    "GROUPS",
    "GROUP_SYSTEM_PROMPTS",
    "REGISTRY",
    "USER_PROMPT_TEMPLATE",
    "VERIFIERS",
    "build_prompt",
    "get_spec",
    "tasks_system_prompt",
    "group_system_prompt",
    "groups_of",
    "resolve_tasks",
]
