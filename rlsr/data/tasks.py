"""User tasks: a dataset, its columns, verifier and system prompt, declared in one YAML file (or
one ``Task`` object) and registered beside the built-in datasets, so every command that looks a
dataset up by name (``train.py data.task=NAME``, ``rlsr evaluate --tasks NAME``, ...) takes
it. docs/tasks.md has the schema, the verifier-plugin contract and the errors.

Discovery: ``load_tasks(paths)`` registers every ``*.yaml`` / ``*.yml`` file of a folder, or one
file; ``--tasks-dir`` (every ``rlsr`` command), ``tasks_dir=`` (``train.py``) and
``$RLSR_TASKS_PATH`` (folders or files, ``os.pathsep``-separated; read on the first lookup of a
name that is not registered, and by ``load_env_tasks()``) all end here. In Python,
``register_task(Task(...))``.

Every check that needs no data runs at registration (schema, unknown keys, name clashes, split
settings, the verifier and its options, the plugin's import, the system prompt's tags); the
checks that need the data (columns present, split not empty, unique ids) run when a split is
loaded (``rlsr.data.loading.load_examples``), which every command does before loading a model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlsr.core.checks import closest_hint
from rlsr.core.prompts import (
    FORMAT_INSTRUCTIONS,
    NO_SYSTEM_PROMPT,
    SYSTEM_PROMPTS,
    missing_format_tags,
    register_system_prompt,
    system_prompt_names,
    unregister_system_prompt,
)
from rlsr.data.registry import (
    BUILTIN_TASKS,
    GROUPS,
    LOOKUP_HOOKS,
    REGISTRY,
    VERIFIERS,
    TaskSource,
    TaskSpec,
    add_spec,
    remove_spec,
)
from rlsr.verifiers import VERIFIERS as VERIFIER_CLASSES
from rlsr.verifiers import PluginVerifier, is_plugin_name, load_plugin
from rlsr.verifiers.plugin import plugin_source
from rlsr.verifiers.workers import EXECUTION_OPTIONS, verifier_options

__all__ = [
    "TASKS_PATH_ENV",
    "TASK_COLUMNS",
    "TASK_KEYS",
    "Task",
    "TaskError",
    "register_task",
    "unregister_task",
    "load_task_file",
    "load_tasks",
    "load_env_tasks",
    "parse_task",
    "task_names",
    "task_records",
    "task_record_problem",
    "version_records",
    "version_differences",
]

TASKS_PATH_ENV = "RLSR_TASKS_PATH"
TASK_COLUMNS = ("question", "answer", "id", "aliases", "options")
# The keys of a task file, by section (docs/tasks.md documents each one).
TASK_KEYS: Mapping[str, tuple[str, ...]] = {
    "": (
        "name",
        "description",
        "data",
        "splits",
        "columns",
        "verifier",
        "system_prompt",
        "skip_empty",
        "too_long",
    ),
    "data": ("path", "hub", "config", "revision"),
    "splits": ("train", "eval", "eval_fraction", "seed"),
    "columns": TASK_COLUMNS,
    "system_prompt": ("text", "append_format"),
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
TOO_LONG_POLICIES = ("refuse", "skip")


class TaskError(ValueError):
    """A task file or ``Task`` is wrong; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Task:
    """One user task: the Python form of a task file (docs/tasks.md has every field).

    Data: ``path`` or ``hub`` (+ ``hub_config``, ``revision``); splits: ``train_split`` /
    ``eval_split``, or ``eval_fraction`` of a single file held out by ``split_seed`` as ``eval``;
    ``columns``: the data's column for ``question``, ``answer``, ``id``, ``aliases``, ``options``;
    ``verifier``: a built-in or ``"package.module:function"`` (+ ``verifier_options``);
    ``system_prompt``: a prompt name, or ``system_prompt_text`` (+ ``append_format``)."""

    name: str
    path: str | os.PathLike | None = None
    hub: str | None = None
    hub_config: str | None = None
    revision: str | None = None
    train_split: str = "train"
    eval_split: str | None = None
    eval_fraction: float | None = None
    split_seed: int = 0
    columns: Mapping[str, str] = field(default_factory=dict)
    verifier: str = "exact_match"
    verifier_options: Mapping[str, Any] = field(default_factory=dict)
    system_prompt: str = "simple"
    system_prompt_text: str | None = None
    append_format: bool = False
    description: str = ""
    skip_empty: bool = False
    too_long: str = "refuse"

    def canonical(self) -> dict:
        """The task's fields as JSON types (hashed for a task registered in Python)."""
        values = dataclasses.asdict(self)
        values["path"] = None if self.path is None else str(self.path)
        return json.loads(json.dumps(values, sort_keys=True, default=str))


# --------------------------------------------------------------------------- checks


def _fail(where: str, key: str, message: str) -> None:
    raise TaskError(f"{where}: {key}: {message}" if key else f"{where}: {message}")


def _unknown_keys(values: Mapping, section: str, where: str) -> None:
    known = TASK_KEYS[section]
    for key in values:
        if key not in known:
            hint = closest_hint(str(key), known)
            dotted = f"{section}.{key}" if section else str(key)
            _fail(where, dotted, f"unknown key.{hint} Known keys: {list(known)}.")


def _verifier_options_problem(name: str, options: Mapping[str, Any]) -> str | None:
    parameters = verifier_options(
        PluginVerifier if is_plugin_name(name) else VERIFIER_CLASSES[name]
    )
    for key in options:
        if key not in parameters:
            hint = closest_hint(str(key), parameters)
            return (
                f"{key!r} is not an option of verifier {name!r}.{hint} Its options: {parameters}."
            )
    return None


def _plugin_file(verifier: str) -> str:
    """`` The module's file: PATH.`` when the plugin's module is found on ``sys.path``."""
    try:
        spec = importlib.util.find_spec(verifier.split(":")[0])
    except (ImportError, ValueError):
        return ""
    origin = getattr(spec, "origin", None)
    return f" The module's file: {origin}." if origin and origin != "built-in" else ""


def _check_task(task: Task, where: str) -> None:
    """Everything about ``task`` that needs no data (module docstring)."""
    name = task.name
    if not isinstance(name, str) or not _NAME.match(name):
        _fail(where, "name", f"{name!r} must be letters, digits, '_', '.' or '-' (e.g. caps).")
    if name in BUILTIN_TASKS or name in GROUPS:
        kind = "a built-in task" if name in BUILTIN_TASKS else "a task group"
        _fail(where, "name", f"{name!r} is {kind} of rlsr; give the task another name.")
    if name in SYSTEM_PROMPTS or name == NO_SYSTEM_PROMPT:
        _fail(where, "name", f"{name!r} is a built-in system prompt's name; choose another.")
    if (task.path is None) == (task.hub is None):
        _fail(where, "data", "give exactly one of path (a local file or folder) or hub (an id).")
    if task.path is not None:
        path = Path(task.path)
        if not path.exists():
            _fail(where, "data.path", f"{path} does not exist; the path is relative to the task "
                  "file's folder.")  # fmt: skip
    elif task.hub_config is not None and not isinstance(task.hub_config, str):
        _fail(where, "data.config", f"must be a string; got {task.hub_config!r}.")
    single_file = task.path is not None and Path(task.path).is_file()
    fraction = task.eval_fraction
    if fraction is not None:
        if not (isinstance(fraction, int | float) and not isinstance(fraction, bool)) or not (
            0 < fraction < 1
        ):
            _fail(where, "splits.eval_fraction", f"must be a number in (0, 1), e.g. 0.2; got "
                  f"{fraction!r}.")  # fmt: skip
        if not single_file:
            _fail(where, "splits.eval_fraction", "splits a single data file; data.path is not "
                  "one (name the splits of a folder or hub dataset with splits.train / .eval).")  # fmt: skip
        if task.eval_split is not None or task.train_split != "train":
            _fail(where, "splits", "eval_fraction makes the splits 'train' and 'eval'; remove "
                  "splits.train / splits.eval.")  # fmt: skip
        if not isinstance(task.split_seed, int) or isinstance(task.split_seed, bool):
            _fail(where, "splits.seed", f"must be an integer; got {task.split_seed!r}.")
    for key, value in (("splits.train", task.train_split), ("splits.eval", task.eval_split)):
        if value is not None and (not isinstance(value, str) or not value):
            _fail(where, key, f"must be a split name; got {value!r}.")
    if single_file and task.eval_split is not None and task.eval_split != task.train_split:
        _fail(where, "splits.eval", f"data.path {task.path} is one file, so it has one split; "
              "hold out part of it with splits.eval_fraction: 0.2, or point data.path at a "
              "folder with one file per split (train.jsonl, test.jsonl).")  # fmt: skip
    if not isinstance(task.columns, Mapping):
        _fail(where, "columns", f"must be a mapping of field: column; got {task.columns!r}.")
    _unknown_keys(task.columns, "columns", where)
    for key, value in task.columns.items():
        if not isinstance(value, str) or not value:
            _fail(where, f"columns.{key}", f"must be a column name; got {value!r}.")
    if not isinstance(task.skip_empty, bool):
        _fail(where, "skip_empty", f"must be true or false; got {task.skip_empty!r}.")
    if task.too_long not in TOO_LONG_POLICIES:
        _fail(where, "too_long", f"must be one of {list(TOO_LONG_POLICIES)}; got "
              f"{task.too_long!r}.")  # fmt: skip
    verifier = task.verifier
    if not isinstance(verifier, str) or not (verifier in VERIFIERS or is_plugin_name(verifier)):
        hint = closest_hint(str(verifier), VERIFIERS)
        _fail(where, "verifier", f"unknown verifier {verifier!r}.{hint} Choose one of "
              f"{list(VERIFIERS)} or a plugin 'package.module:function'.")  # fmt: skip
    if is_plugin_name(verifier):
        try:
            load_plugin(verifier)
        except ValueError as err:
            problem = str(err)
        else:
            problem = None
        if problem:  # raised outside the except block: no chained traceback
            _fail(where, "verifier", problem + _plugin_file(verifier))
    problem = _verifier_options_problem(verifier, task.verifier_options)
    if problem:
        _fail(where, "verifier", problem)
    if verifier == "mcq" and "options" not in task.columns:
        _fail(where, "verifier", "mcq compares option letters; map the options column "
              "(columns.options) or choose exact_match.")  # fmt: skip
    if task.system_prompt_text is None:
        names = [*system_prompt_names(), NO_SYSTEM_PROMPT]
        if task.system_prompt not in names:
            _fail(where, "system_prompt", f"unknown prompt {task.system_prompt!r}; choose one of "
                  f"{names} or give your own as {{text: '...'}}.")  # fmt: skip
    elif not isinstance(task.system_prompt_text, str) or not task.system_prompt_text.strip():
        _fail(where, "system_prompt.text", "is empty.")
    elif missing_format_tags(task.system_prompt_text) and not task.append_format:
        missing = " ".join(missing_format_tags(task.system_prompt_text))
        _fail(where, "system_prompt.text", f"does not ask for {missing}: the parser and the "
              "format reward read <think>, <answer>, <analysis> and <confidence> blocks, so a "
              "model never told about them scores as unformatted. Add the tag instructions to "
              "the text, or set system_prompt.append_format: true to have rlsr append its own "
              "(docs/tasks.md).")  # fmt: skip


def _prompt_text(task: Task) -> str | None:
    text = task.system_prompt_text
    if text is None or not missing_format_tags(text):
        return text
    return f"{text.rstrip()}\n\n{FORMAT_INSTRUCTIONS}"  # append_format: true (checked)


def _spec(task: Task, where: str, file: str | None, sha256: str) -> TaskSpec:
    fraction = task.eval_fraction
    has_eval = fraction is not None or task.eval_split is not None
    train = "train" if fraction is not None else task.train_split
    evaluation = "eval" if fraction is not None else (task.eval_split or train)
    text = _prompt_text(task)
    return TaskSpec(
        name=task.name,
        hf_id=task.hub,
        hf_config=task.hub_config,
        revision=task.revision,
        split=evaluation,
        train_split=train,
        sizes={},
        verifier=task.verifier,
        verifier_options=dict(task.verifier_options),
        system_prompt=task.name if text is not None else task.system_prompt,
        formatter="task",
        columns={"question": "question", "answer": "answer", **dict(task.columns)},
        description=task.description or f"task {task.name} ({where})",
        source_note=f"task file {file}" if file else "task registered in Python",
        task=TaskSource(
            file=file,
            sha256=sha256,
            data_path=None if task.path is None else str(Path(task.path).resolve()),
            eval_fraction=None if fraction is None else float(fraction),
            split_seed=task.split_seed,
            prompt_text=text,
            has_eval=has_eval,
            skip_empty=task.skip_empty,
            too_long=task.too_long,
            definition_sha256=_definition_sha256(task),
        ),
    )


def _definition_sha256(task: Task) -> str:
    """SHA-256 of ``task``'s fields less its verifier's execution options (``EXECUTION_OPTIONS``:
    how items are run, not what a verdict is), so a rerun may raise ``timeout_s``."""
    values = task.canonical()
    values["verifier_options"] = {k: v for k, v in (values.get("verifier_options") or {}).items()
                                  if k not in EXECUTION_OPTIONS}  # fmt: skip
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


# --------------------------------------------------------------------------- registration


def register_task(
    task: Task, *, file: str | os.PathLike | None = None, sha256: str | None = None
) -> TaskSpec:
    """Check ``task`` and register it as a dataset (and its own prompt, if any); returns its spec.

    ``file`` / ``sha256``: the task file it came from and that file's SHA-256 (``load_task_file``
    passes them); a task built in Python is hashed from its fields. Registering the same task
    again is a no-op; another task under a registered name raises ``TaskError``.
    """
    where = str(file) if file is not None else f"task {task.name!r}"
    _check_task(task, where)
    sha = sha256 or hashlib.sha256(json.dumps(task.canonical()).encode()).hexdigest()
    existing = REGISTRY.get(task.name)
    if existing is not None:
        if existing.task is not None and existing.task.sha256 == sha:
            return existing
        other = existing.task.file if existing.task and existing.task.file else "Python"
        _fail(where, "name", f"a task named {task.name!r} is already registered (from {other}); "
              "rename one of them, or unregister_task() the old one first.")  # fmt: skip
    spec = _spec(task, where, None if file is None else str(file), sha)
    if spec.task.prompt_text is not None:
        register_system_prompt(task.name, spec.task.prompt_text)
    add_spec(spec)
    return spec


def unregister_task(name: str) -> None:
    """Remove the user task ``name`` and its prompt (no-op when it is not registered)."""
    spec = REGISTRY.get(name)
    if spec is None or spec.task is None:
        return
    remove_spec(name)
    if spec.task.prompt_text is not None:
        unregister_system_prompt(name)


def task_names() -> list[str]:
    """Names of the user tasks registered in this process."""
    return [name for name, spec in REGISTRY.items() if spec.task is not None]


def task_records(names) -> dict[str, dict]:
    """``{name: {"file", "sha256", "definition_sha256"}}`` for the user tasks among ``names``
    (built-ins left out): the provenance ``rlsr evaluate`` writes to ``run.json`` and ``rlsr
    deploy`` to ``deployment.json``, so results of another version of a task file are told
    apart (a resume compares ``definition_sha256``: the file less its execution options)."""
    out = {}
    for name in dict.fromkeys(names):
        spec = REGISTRY.get(name)
        if spec is not None and spec.task is not None:
            out[name] = {"file": spec.task.file, "sha256": spec.task.sha256,
                         "definition_sha256": spec.task.definition_sha256}  # fmt: skip
    return out


def task_record_problem(name: str, record: Mapping) -> str | None:
    """What differs between task ``name`` as recorded (``task_records``) and as registered in
    this process; None when they are the same task file content."""
    spec = REGISTRY.get(name)
    if spec is None or spec.task is None:
        return (
            f"task: the threshold was computed on task {name!r} ({record.get('file')}), which is "
            f"not loaded; pass --tasks-dir with its task file"
        )
    if spec.task.sha256 != record.get("sha256"):
        return (
            f"task: the threshold was computed on {name!r} with task file sha256 "
            f"{str(record.get('sha256'))[:12]}..., the loaded {spec.task.file or 'task'} has "
            f"{spec.task.sha256[:12]}... (another version of the task)"
        )
    return None


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _data_files(path: str | os.PathLike) -> dict[str, str]:
    """``{name: sha256}`` of a task's local data: the file, or every file under the folder
    (path relative to it; hidden files left out)."""
    root = Path(path)
    if root.is_file():
        return {root.name: _sha256_file(root)}
    files = sorted(
        f for f in root.rglob("*")
        if f.is_file() and not any(part.startswith(".") for part in f.relative_to(root).parts)
    )  # fmt: skip
    return {f.relative_to(root).as_posix(): _sha256_file(f) for f in files}


def version_records(
    verifiers: Mapping[str, str], paths: Mapping[str, str] | None = None
) -> dict[str, dict]:
    """What decides the verdicts of each dataset in ``verifiers`` (``{dataset: verifier}``),
    recorded so a resumed run cannot mix versions (``version_differences``; docs/tasks.md,
    "Resuming"): ``verifier``; ``verifier_options``, the task's options of its own verifier that
    decide a verdict (``EXECUTION_OPTIONS``, how items are run, left out); ``plugin``, the
    plugin module's file and SHA-256 (``plugin_source``), else None; ``data``, ``{file:
    sha256}`` of a user task's local data (``paths``: a ``--data-path`` in its place), else None
    (built-in datasets and hub tasks: their revision is in the task file's hash)."""
    out = {}
    for name, vname in verifiers.items():
        spec = REGISTRY.get(name)
        own = spec is not None and vname == spec.verifier
        options = dict(spec.verifier_options) if own else {}
        local = (paths or {}).get(name) or (
            spec.task.data_path if spec is not None and spec.task is not None else None
        )
        out[name] = json.loads(json.dumps({
            "verifier": vname,
            "verifier_options": {k: v for k, v in sorted(options.items())
                                 if k not in EXECUTION_OPTIONS},
            "plugin": plugin_source(vname) if is_plugin_name(vname) else None,
            "data": _data_files(local) if local is not None and Path(local).exists() else None,
        }, default=str))  # fmt: skip
    return out


def _short(value) -> str:
    return value[:12] + "…" if isinstance(value, str) and len(value) == 64 else repr(value)


def version_differences(
    old: Mapping[str, dict], new: Mapping[str, dict], compared: set[str] | None = None
) -> list[str]:
    """What changed between two ``version_records``, one line each (data file, plugin file,
    verifier options), for the datasets in both (and in ``compared`` when given: those with
    results on disk). A record an older rlsr wrote without a field is not compared on it."""
    diffs = []
    for name in sorted(set(old) & set(new)):
        if compared is not None and name not in compared:
            continue
        was, now = old[name], new[name]
        if was.get("data") is not None and now.get("data") is not None:
            for file in sorted(set(was["data"]) | set(now["data"])):
                a, b = was["data"].get(file), now["data"].get(file)
                if a != b:
                    change = (
                        "added" if a is None else "removed" if b is None
                        else f"{_short(a)} -> {_short(b)}"
                    )  # fmt: skip
                    diffs.append(f"data file {file} of {name}: {change}")
        a, b = was.get("plugin") or {}, now.get("plugin") or {}
        if a and b and a.get("sha256") != b.get("sha256"):
            diffs.append(f"verifier plugin {b.get('module')} ({b.get('file')}) of {name}: "
                         f"{_short(a.get('sha256'))} -> {_short(b.get('sha256'))}")  # fmt: skip
        if "verifier_options" in was and was["verifier_options"] != now.get("verifier_options"):
            diffs.append(f"verifier options of {name}: {was['verifier_options']} -> "
                         f"{now.get('verifier_options')}")  # fmt: skip
        if was.get("verifier") and was.get("verifier") != now.get("verifier"):
            diffs.append(f"verifier of {name}: {was['verifier']!r} -> {now.get('verifier')!r}")
    return diffs


# --------------------------------------------------------------------------- task files


def _read_yaml(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise TaskError(f"{path}: {at}not valid YAML ({problem}).") from None


def parse_task(values: Any, *, where: str = "task", base_dir: str | os.PathLike = ".") -> Task:
    """A ``Task`` from the mapping of a task file (docs/tasks.md); relative data paths are taken
    from ``base_dir`` (the task file's folder). Unknown keys raise ``TaskError`` with the closest
    known key."""
    if not isinstance(values, Mapping):
        _fail(where, "", f"a task file holds one mapping (name:, data:, ...); got "
              f"{type(values).__name__}.")  # fmt: skip
    _unknown_keys(values, "", where)
    if "name" not in values:
        _fail(where, "name", "missing; every task needs a name (e.g. name: caps).")
    if "data" not in values:
        _fail(where, "data", "missing; give data: {path: FILE} or data: {hub: owner/name}.")
    sections = {}
    for section in ("data", "splits", "columns"):
        value = values.get(section) or {}
        if not isinstance(value, Mapping):
            _fail(where, section, f"must be a mapping; got {value!r}.")
        _unknown_keys(value, section, where)
        sections[section] = value
    data, splits = sections["data"], sections["splits"]
    verifier = values.get("verifier", "exact_match")
    options: dict[str, Any] = {}
    if isinstance(verifier, Mapping):
        if "name" not in verifier:
            _fail(where, "verifier", "a mapping needs name: (a built-in or 'package.module:"
                  "function') beside its options, e.g. {name: math, timeout_s: 10}.")  # fmt: skip
        options = {k: v for k, v in verifier.items() if k != "name"}
        verifier = verifier["name"]
    prompt = values.get("system_prompt", "simple")
    text, append = None, False
    if isinstance(prompt, Mapping):
        _unknown_keys(prompt, "system_prompt", where)
        if "text" not in prompt:
            _fail(where, "system_prompt", "a mapping needs text: '...'.")
        text, append = prompt["text"], prompt.get("append_format", False)
        if not isinstance(append, bool):
            _fail(where, "system_prompt.append_format", f"must be true or false; got {append!r}.")
        prompt = "simple"
    path = data.get("path")
    if path is not None:
        path = Path(base_dir) / Path(str(path)).expanduser()
    return Task(
        name=values["name"],
        path=path,
        hub=data.get("hub"),
        hub_config=data.get("config"),
        revision=data.get("revision"),
        train_split=splits.get("train", "train"),
        eval_split=splits.get("eval"),
        eval_fraction=splits.get("eval_fraction"),
        split_seed=splits.get("seed", 0),
        columns=dict(sections["columns"]),
        verifier=verifier,
        verifier_options=options,
        system_prompt=prompt,
        system_prompt_text=text,
        append_format=append,
        description=str(values.get("description") or ""),
        skip_empty=values.get("skip_empty", False),
        too_long=values.get("too_long", "refuse"),
    )


def load_task_file(path: str | os.PathLike) -> TaskSpec:
    """Read, check and register the task file ``path``; returns its spec."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise TaskError(f"task file {path} does not exist.")
    task = parse_task(_read_yaml(path), where=str(path), base_dir=path.parent)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return register_task(task, file=path, sha256=sha)


def _task_files(entry: Path) -> list[Path]:
    if entry.is_dir():
        files = sorted(p for p in entry.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise TaskError(
                f"tasks path {entry} holds no task files (*.yaml / *.yml); put the task files "
                "there, or point --tasks-dir (tasks_dir=, $RLSR_TASKS_PATH) at their folder."
            )
        return files
    if entry.is_file():
        return [entry]
    raise TaskError(f"tasks path {entry} does not exist; give a folder of task files or one file.")


def load_tasks(paths: str | os.PathLike | Sequence[str | os.PathLike] | None) -> list[str]:
    """Register the task files of ``paths`` (folders: their ``*.yaml`` / ``*.yml`` files; files:
    themselves; a string may list several, ``os.pathsep``-separated). Returns the task names."""
    if paths is None:
        return []
    if isinstance(paths, str | os.PathLike):
        paths = [p for p in str(paths).split(os.pathsep) if p.strip()]
    names = []
    for entry in paths:
        for file in _task_files(Path(entry).expanduser()):
            names.append(load_task_file(file).name)
    return names


_LOADED_ENV: list[str] = []


def load_env_tasks() -> list[str]:
    """Register the tasks of ``$RLSR_TASKS_PATH`` (again only when its value changed)."""
    value = os.environ.get(TASKS_PATH_ENV, "")
    if not value.strip() or (_LOADED_ENV and _LOADED_ENV[-1] == value):
        return []
    names = load_tasks(value)
    _LOADED_ENV.append(value)
    return names


LOOKUP_HOOKS.append(load_env_tasks)
