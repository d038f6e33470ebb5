"""Dataset registry and loaders: the paper's benchmarks, UtilityBench, the bundled ``tiny`` and
the user's own tasks (``register_task(Task(...))``, task files: docs/tasks.md).

``get_spec(name)``, ``REGISTRY``, ``GROUPS``, ``resolve_datasets("a,b" | group)``,
``load_examples(name, *, path, split, limit, system_prompt, data_dir, columns)``. See
docs/datasets.md.
"""

from rlsr.data.formatting import USER_PROMPT_TEMPLATE, build_prompt
from rlsr.data.loading import (
    DATA_DIR_ENV,
    DatasetUnavailableError,
    PromptRoom,
    VerificationInputs,
    build_verifier,
    download_command,
    download_dataset,
    load_examples,
    load_raw,
    row_verification_inputs,
    verification_inputs,
)
from rlsr.data.registry import (
    BUILTIN_DATASETS,
    GROUP_SYSTEM_PROMPTS,
    GROUPS,
    REGISTRY,
    VERIFIERS,
    DatasetSpec,
    TaskSource,
    datasets_system_prompt,
    get_spec,
    group_system_prompt,
    groups_of,
    resolve_datasets,
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
)

__all__ = [
    "BUILTIN_DATASETS",
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
    "unregister_task",
    "DATA_DIR_ENV",
    "DatasetSpec",
    "DatasetUnavailableError",
    "GROUPS",
    "GROUP_SYSTEM_PROMPTS",
    "REGISTRY",
    "USER_PROMPT_TEMPLATE",
    "VERIFIERS",
    "VerificationInputs",
    "build_prompt",
    "build_verifier",
    "download_command",
    "download_dataset",
    "get_spec",
    "datasets_system_prompt",
    "group_system_prompt",
    "groups_of",
    "PromptRoom",
    "load_examples",
    "load_raw",
    "resolve_datasets",
    "verification_inputs",
    "row_verification_inputs",
]
