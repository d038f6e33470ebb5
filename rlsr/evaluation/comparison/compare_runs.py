"""What ``rlsr compare`` compares, read from disk: training runs, their method and seed, and
every evaluation of them (step, dataset, the folder holding ``samples.jsonl``).

Inputs, each found by what it holds (never by its name):

* a train.py output dir (``config.yaml``): its held-out history, ``eval/step-N/<dataset>/``
  (``rlsr.run.run_layout``); a ``step-N/failed.json`` step is left out;
* an ``rlsr evaluate`` folder (``run.json`` and ``<dataset>/samples.jsonl``): the evaluation of
  the adapter (or model) that its run.json names; the training run is that folder
  (``config.yaml``) or, for ``checkpoint-N``, the folder above it, and the step is N (the final
  adapter: the ``max_steps`` its newest checkpoint's ``trainer_state.json`` records);
* a folder holding such folders at any depth: a sweep's ``runs/`` (train.py output dirs) or
  ``evals/`` (slurm/evaluate.slurm's ``<run>/`` and ``<run>/checkpoint-N/``).

Method and seed come from the training run's ``config.yaml`` (``method.label``, else
``method.name``; ``seed``). What cannot be compared is a one-line ``ValueError`` naming the
field, the runs and the fix; nothing found is left out in silence (a note names it).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from rlsr.evaluation.comparison.compare_settings import EVALUATE, HELD_OUT
from rlsr.evaluation.run.samples_io import read_finished_samples
from rlsr.evaluation.run.summary import scorer_arrays
from rlsr.run.eval_protocol import SAMPLE_FIELDS
from rlsr.run.run_layout import (
    CHECKPOINT_PREFIX,
    EVAL_DIR,
    FAILED_FILE,
    FINAL_WEIGHT_FILES,
    METRICS_FILE,
    PARTIAL_SUFFIX,
    RUN_FILE,
    SAMPLES_FILE,
    STEP_PREFIX,
    checkpoint_dir,
    checkpoint_folders,
    checkpoint_step,
    step_folders,
)

__all__ = [
    "CONFIG_FILE",
    "HELD_OUT",
    "EVALUATE",
    "Evaluation",
    "Run",
    "find_runs",
    "check_comparable",
]

CONFIG_FILE = "config.yaml"  # train.py's resolved config in its output dir (train.py)
_MAX_DEPTH = 6  # how deep a folder of runs is searched
# run.json fields compared besides the protocol's sample-deciding ones (an `rlsr evaluate` run
# with an LLM judge records which judge gave the verdicts)
_EXTRA_PROTOCOL_FIELDS = ("protocol_variant", "judge_model", "judge_max_answer_chars")


@dataclass
class Evaluation:
    """One dataset evaluated at one step of one training run."""

    folder: Path  # .../<dataset>/ holding samples.jsonl and metrics.json
    step: int
    dataset: str
    protocol: dict  # SAMPLE_FIELDS (and _EXTRA_PROTOCOL_FIELDS) recorded in its run.json
    versions: dict | None  # _version_of the dataset in its run.json, None if unrecorded
    # per sample: the primary scorer's confidence (missing = 0.0, as in metrics.json), the
    # verdict, the id and the question text (the cluster --resample-questions draws)
    confidence: np.ndarray
    correct: np.ndarray
    questions: str  # _questions_digest of the samples: which questions these are
    ids: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()


def _questions_digest(records: list[dict]) -> str:
    """SHA-256 of the (id, question, gold answers) of every sample, in id order."""
    rows = sorted(
        (str(r.get("id")), r.get("question"), r.get("golds", r.get("gold"))) for r in records
    )
    return hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()


@dataclass
class Run:
    """A training run (train.py output dir) and its evaluations."""

    path: Path
    method: str
    seed: int
    config: dict
    kind: str  # HELD_OUT (its eval/step-N history) or EVALUATE (rlsr evaluate folders of it)
    evaluations: list[Evaluation] = field(default_factory=list)

    def steps(self, dataset: str) -> list[int]:
        return sorted(e.step for e in self.evaluations if e.dataset == dataset)

    def datasets(self) -> list[str]:
        return sorted({e.dataset for e in self.evaluations})

    def at(self, dataset: str, step: int) -> Evaluation:
        return next(e for e in self.evaluations if e.dataset == dataset and e.step == step)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise ValueError(
            f"{path} is not valid JSON; move it away or rerun what wrote it."
        ) from None


def _read_config(run_dir: Path) -> dict:
    path = run_dir / CONFIG_FILE
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        raise ValueError(f"{path} is not valid YAML; it is train.py's resolved config.") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not a mapping; it is train.py's resolved config.")
    return config


def _method_and_seed(config: dict, run_dir: Path) -> tuple[str, int]:
    """``method.label`` (a variant's name), else ``method.name``; ``seed``."""
    method = config.get("method") if isinstance(config.get("method"), dict) else {}
    name = method.get("label") or method.get("name")
    seed = config.get("seed")
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"{run_dir / CONFIG_FILE}: no method.name; compare runs that train.py wrote."
        )
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(
            f"{run_dir / CONFIG_FILE}: seed is {seed!r}, not an integer; compare "
            "runs that train.py wrote."
        )
    return name, seed


def _protocol(run: dict) -> dict:
    """The sample-deciding protocol fields of a run.json (held-out: under ``settings``)."""
    settings = run.get("settings") if isinstance(run.get("settings"), dict) else run
    out = {k: settings[k] for k in SAMPLE_FIELDS if k in settings}
    out.update({k: run[k] for k in _EXTRA_PROTOCOL_FIELDS if k in run})
    if "system_prompt" in run:  # the prompt the samples were rendered with (resolved)
        out["system_prompt"] = run["system_prompt"]
    return out


def _version_of(run: dict, folder_name: str) -> dict | None:
    """What decides the verdicts of one dataset, as its run.json records it: the version record
    (``rlsr.data.version_records``) and a user task file's hash; None when neither is."""
    name = folder_name.split("@")[0]  # a <dataset>@<split> folder
    versions = run.get("versions") or {}
    record = versions.get(folder_name) or versions.get(name)
    task = (run.get("tasks") or {}).get(name)
    if task:
        record = {
            **(record or {}),
            "task_file": task.get("definition_sha256") or task.get("sha256"),
        }
    return record


def _cut(run_dir: Path | None) -> str:
    """How an evaluation folder comes to be cut short (train.py writes a step whole)."""
    if run_dir is None:
        return "the `rlsr evaluate` run was cut short, or is still writing"
    return "the held-out step was cut or changed after train.py wrote it whole"


def _fix(out: Path, step: int, run_dir: Path | None, *, rewrite: bool = False) -> str:
    """What to do about an evaluation folder ``out`` that was cut short (or, ``rewrite``, whose
    samples were changed): rerun ``rlsr evaluate``; for held-out step ``step`` of train.py run
    ``run_dir``, not a rerun of train.py (it reuses a finished step as it is)."""
    if run_dir is None:
        how = (
            "with --overwrite (it starts over in a fresh folder)"
            if rewrite
            else f"(it evaluates the questions missing and rebuilds {METRICS_FILE})"
        )
        return f"rerun the `rlsr evaluate` command that wrote {out} {how}, or leave it out"
    step_folder = out.relative_to(run_dir)
    fix = (
        f"copy {step_folder} of train.py run {run_dir} again from where it trained (resuming "
        "the run would reuse the step as it is)"
    )
    checkpoint = checkpoint_dir(run_dir, step)
    if checkpoint.is_dir():
        fix += (
            f", or evaluate {checkpoint.name} (the run summary's `rlsr evaluate` command with "
            f"--adapter {checkpoint}: the held-out step's numbers) for every run and compare "
            "those folders with --use evaluate"
        )
    return fix + f", or move {step_folder} out of the run folder to compare the steps before it"


def _line_numbers(samples: Path) -> list[int]:
    """The line number of each record ``read_finished_samples`` returns (it skips blank
    lines)."""
    return [i + 1 for i, raw in enumerate(samples.read_bytes().splitlines()) if raw.strip()]


def _bad_confidence(value) -> str | None:
    """Why ``value`` is no confidence (a number in [0, 1], or None: none stated), else None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{json.dumps(value)} is not a number"
    if math.isnan(value):
        return "NaN is not a number"
    if not 0.0 <= value <= 1.0:
        return f"{value!r} is outside [0, 1]"
    return None


def _check_records(samples: Path, records: list[dict], scorer: str, fix: str) -> None:
    """Refuse a sample whose ``scorer`` confidence is not a number in [0, 1] (or null), whose
    ``scores`` is not a mapping or whose ``correct`` is not a bool, naming file and line."""
    for index, record in enumerate(records):
        scores = record.get("scores", {})
        if not isinstance(scores, dict):
            problem = f"its scores is {json.dumps(scores)}, not a mapping of scorer to confidence"
        elif (why := _bad_confidence(scores.get(scorer))) is not None:
            problem = (
                f"its {scorer} confidence {why} (a confidence is a number in [0, 1], or null "
                "when none was stated)"
            )
        elif not isinstance(record.get("correct"), bool):
            problem = f"its correct is {json.dumps(record.get('correct'))}, not true or false"
        else:
            continue
        line = _line_numbers(samples)[index]
        raise ValueError(
            f"{samples}: line {line} (id {record.get('id')!r}): {problem}; correct that line, "
            f"or {fix}."
        )


def _evaluations(out: Path, step: int, run_dir: Path | None = None) -> list[Evaluation]:
    """Every dataset of one evaluation folder: an ``rlsr evaluate`` folder, or held-out step
    ``step`` of train.py run ``run_dir``. A dataset cut short or changed (``read_finished_samples``,
    no metrics.json, one its run.json names missing) is refused with the file and the fix, never
    left out (the comparison would fall back to an earlier step)."""
    run = _read_json(out / RUN_FILE) if (out / RUN_FILE).is_file() else {}
    fix = _fix(out, step, run_dir)
    folders = sorted({p.parent for n in (SAMPLES_FILE, METRICS_FILE) for p in out.glob(f"*/{n}")})
    named = run.get("datasets") if isinstance(run.get("datasets"), list) else []
    if run_dir is None and named and not folders:
        raise ValueError(
            f"{out}: no {SAMPLES_FILE} of {', '.join(map(str, named))} (its {RUN_FILE} names "
            f"them): {_cut(run_dir)}; {fix}."
        )
    if run_dir is not None:
        # a held-out step's run.json names exactly the datasets written into it
        missing = [d for d in named if (out / str(d)) not in folders]
        if missing or not folders:
            what = f"no {missing[0]}/{SAMPLES_FILE}" if missing else "no evaluation"
            raise ValueError(
                f"{out}: {what} (its {RUN_FILE} names {named or 'none'}): {_cut(run_dir)}; {fix}."
            )
    found = []
    for folder in folders:
        samples, metrics_path = folder / SAMPLES_FILE, folder / METRICS_FILE
        for path in (samples, metrics_path):
            if not path.is_file():
                raise ValueError(f"{samples}: no {path.name} here: {_cut(run_dir)}; {fix}.")
        records = read_finished_samples(samples, "", f"{_cut(run_dir)}; {fix}")
        metrics = _read_json(metrics_path)
        seen: set[str] = set()
        for record in records:
            if str(record.get("id")) in seen:
                raise ValueError(
                    f"{samples}: question id {record.get('id')!r} appears twice; one evaluation "
                    "folder holds one sample per question."
                )
            seen.add(str(record.get("id")))
        name = folder.name
        scorer = metrics.get("primary_scorer", "verbalized")
        _check_records(samples, records, scorer, _fix(out, step, run_dir, rewrite=True))
        confidence, correct, _ = scorer_arrays(records, scorer)
        found.append(
            Evaluation(
                folder,
                step,
                name,
                _protocol(run),
                _version_of(run, name),
                confidence,
                correct,
                _questions_digest(records),
                ids=tuple(str(r.get("id")) for r in records),
                prompts=tuple(str(r.get("question", r.get("id"))) for r in records),
            )
        )
    return found


def _final_step(run_dir: Path) -> int:
    """The step of the final adapter in ``run_dir``: the ``max_steps`` its newest checkpoint's
    trainer_state.json records (HF Trainer checkpoints that last step too)."""
    for _, folder in reversed(checkpoint_folders(run_dir)):
        state = folder / "trainer_state.json"
        max_steps = _read_json(state).get("max_steps") if state.is_file() else None
        if isinstance(max_steps, int) and max_steps > 0:
            return max_steps
    raise ValueError(
        f"{run_dir}: no {CHECKPOINT_PREFIX}N/trainer_state.json, so the step of its final "
        f"adapter is unknown; evaluate a {CHECKPOINT_PREFIX}N folder of the run instead."
    )


def _evaluated(record: dict) -> tuple[Path, Path] | None:
    """(evaluated folder, its train.py output dir) of an ``rlsr evaluate`` run.json: its adapter
    (else model) when that is a train.py output dir or its checkpoint-N; else None."""
    for key in ("adapter", "model"):
        path = Path(record[key]) if isinstance(record.get(key), str) else None
        if path is None or not path.is_dir():
            continue
        if (path / CONFIG_FILE).is_file():
            return path, path
        if checkpoint_step(path) is not None and (path.parent / CONFIG_FILE).is_file():
            return path, path.parent
    return None


def _unfinished(run_dir: Path) -> str | None:
    """Why train.py output dir ``run_dir`` has not finished training (no final weights, newest
    checkpoint short of ``max_steps``), None when it has."""
    if any((run_dir / name).is_file() for name in FINAL_WEIGHT_FILES):
        return None
    folders = checkpoint_folders(run_dir)
    state_path = folders[-1][1] / "trainer_state.json" if folders else None
    if state_path is None or not state_path.is_file():
        return "no final adapter, no checkpoint"
    state = _read_json(state_path)
    step, end = state.get("global_step"), state.get("max_steps")
    if isinstance(step, int) and isinstance(end, int) and 0 < end <= step:
        return None
    return f"no final adapter; its newest checkpoint, {folders[-1][1].name}, is at step {step} of {end}"


def _no_history(run_dir: Path) -> str:
    return (
        f"{run_dir}: no held-out history (no {EVAL_DIR}/{STEP_PREFIX}N/<dataset>/{SAMPLES_FILE}): the "
        "run trained with heldout.every=0 or has not reached its first evaluation; train with "
        "heldout.every=N, or compare `rlsr evaluate` folders of its checkpoints."
    )


def _history_run(run_dir: Path) -> Run:
    """A train.py output dir with its held-out history (no evaluation when it has none)."""
    config = _read_config(run_dir)
    method, seed = _method_and_seed(config, run_dir)
    run = Run(run_dir, method, seed, config, HELD_OUT)
    for step, folder in step_folders(run_dir):
        if not (folder / FAILED_FILE).is_file():
            run.evaluations += _evaluations(folder, step, run_dir)
    return run


def _not_a_run(out: Path, record: dict) -> str:
    return (
        f"{out}: its {RUN_FILE} names adapter {record.get('adapter')!r} and model "
        f"{record.get('model')!r}, neither a train.py output dir (with {CONFIG_FILE}) nor "
        f"its {CHECKPOINT_PREFIX}N here, so no recorded config gives its method and seed; "
        "compare evaluations of train.py runs, on the machine that holds the runs."
    )


def _evaluate_run(out: Path) -> tuple[Run, list[Evaluation]] | None:
    """The training run an ``rlsr evaluate`` folder evaluated and its evaluations; None for a
    base model's evaluation."""
    found = _evaluated(_read_json(out / RUN_FILE))
    if found is None:
        return None
    evaluated, run_dir = found
    step = _final_step(run_dir) if evaluated == run_dir else checkpoint_step(evaluated)
    config = _read_config(run_dir)
    method, seed = _method_and_seed(config, run_dir)
    return Run(run_dir.resolve(), method, seed, config, EVALUATE), _evaluations(out, step)


def _folders(root: Path, depth: int = 0):
    """(kind, folder) of every train.py output dir (HELD_OUT) and ``rlsr evaluate`` folder
    (EVALUATE) at or under ``root`` (not into a run's eval/)."""
    run_dir = (root / CONFIG_FILE).is_file()
    if run_dir:
        yield HELD_OUT, root
    elif (root / RUN_FILE).is_file():
        yield EVALUATE, root
    if depth >= _MAX_DEPTH:
        return
    for child in sorted(root.iterdir()):
        skip = child.name.startswith(".") or child.name.endswith(PARTIAL_SUFFIX)
        if child.is_dir() and not skip and not (run_dir and child.name == EVAL_DIR):
            yield from _folders(child, depth + 1)


def _add_evaluations(runs: dict[Path, Run], folder: Path, named: bool, notes: list[str]) -> None:
    """The evaluations of ``folder`` to the run they evaluated; one of no train.py run is
    refused when given by name, else noted."""
    found = _evaluate_run(folder)
    if found is None:
        record = _read_json(folder / RUN_FILE)
        if named and folder.parent.name == EVAL_DIR and (folder.parents[1] / CONFIG_FILE).is_file():
            raise ValueError(
                f"{folder}: one step of the held-out history of {folder.parents[1]}; give that "
                "run folder (all its steps)."
            )
        if named:
            raise ValueError(_not_a_run(folder, record))
        notes.append(
            f"left out {folder}: it evaluated no train.py run (model "
            f"{record.get('model')!r}, adapter {record.get('adapter')!r})"
        )
        return
    run, evaluations = found
    held = runs.setdefault(run.path, run)
    for e in evaluations:
        if any(o.dataset == e.dataset and o.step == e.step for o in held.evaluations):
            other = held.at(e.dataset, e.step).folder
            raise ValueError(
                f"{run.path}: step {e.step} on {e.dataset} is evaluated twice, in "
                f"{other.parent} and {e.folder.parent}; pass one of them."
            )
        held.evaluations.append(e)


def _has_history(run_dir: Path) -> bool:
    """Whether a train.py output dir holds a held-out step that did not fail."""
    return any(not (folder / FAILED_FILE).is_file() for _, folder in step_folders(run_dir))


def _task(run_dir: Path) -> str | None:
    """``data.task`` of a train.py run's config.yaml, None if unrecorded."""
    data = _read_config(run_dir).get("data")
    return data.get("task") if isinstance(data, dict) else None


def _refuse_other_tasks(run_dirs: list[Path]) -> None:
    """Refuse runs that trained on different tasks (``data.task``), before any other
    difference (the others follow from it)."""
    _refuse_difference(
        [(d, task) for d in run_dirs if (task := _task(d)) is not None],
        "the runs trained on different tasks: data.task is {a!r} in {where_a} but {b!r} in "
        f"{{where_b}} ({CONFIG_FILE}); compare the runs of one task (name their folders, or keep "
        "each task's runs in a folder of its own).",
    )


def find_runs(paths: list[str], use: str | None = None) -> tuple[list[Run], list[str]]:
    """Every training run under ``paths`` with its evaluations, and notes on what was left out.
    ``use``: HELD_OUT or EVALUATE; None: whichever is there, held-out histories when the
    ``rlsr evaluate`` folders found inside evaluated runs whose history is there too or no
    train.py run (noted). Refuses, the real difference first: a path that holds neither;
    different tasks; both kinds without ``use``; a run given by name without history; different
    held-out tasks; one (method, seed) twice. Notes unfinished runs that hold the comparison
    back."""
    run_dirs: dict[Path, Path] = {}  # resolved -> as found: every train.py output dir
    evaluate_folders: list[Path] = []
    named: set[Path] = set()  # train.py runs given by name (not found inside a folder)
    for given in paths:
        root = Path(given)
        if not root.is_dir():
            raise ValueError(f"{root}: no such folder; give train.py output dirs, a sweep's "
                             "runs/ or evals/ folder, or `rlsr evaluate` folders.")  # fmt: skip
        found = list(_folders(root))
        if not found:
            raise ValueError(
                f"{root}: no run inside (no train.py output dir with {CONFIG_FILE}, no `rlsr "
                f"evaluate` folder with {RUN_FILE}); give the folders train.py or `rlsr "
                "evaluate` wrote, or the folder that holds them."
            )
        for kind, folder in found:
            if kind == EVALUATE:
                if folder.resolve() not in {f.resolve() for f in evaluate_folders}:
                    evaluate_folders.append(folder)
                continue
            if folder == root:
                named.add(folder.resolve())
            run_dirs.setdefault(folder.resolve(), folder)
    with_history = [key for key in run_dirs if _has_history(run_dirs[key])]
    given = {Path(p).resolve() for p in paths}
    evaluated = {} if use == HELD_OUT else {f: _evaluated(_read_json(f / RUN_FILE))
                                            for f in evaluate_folders}  # fmt: skip
    notes = []
    if use is None and with_history and evaluate_folders:
        # a second evaluation of a run whose held-out history is here: not a reason to ask
        second = [f for f in evaluate_folders if f.resolve() not in given and evaluated[f]
                  and evaluated[f][1].resolve() in with_history]  # fmt: skip
        unrelated = [f for f in evaluate_folders if f.resolve() not in given and not evaluated[f]]
        if second:
            notes.append(
                f"left out {len(second)} `rlsr evaluate` folder(s) of runs whose held-out "
                f"history is compared ({_listed(second)}); --use {EVALUATE} compares those "
                "instead"
            )
        if unrelated:
            notes.append(
                f"left out {len(unrelated)} `rlsr evaluate` folder(s) that evaluated no train.py "
                f"run here ({_listed(unrelated)})"
            )
        evaluate_folders = [f for f in evaluate_folders if f not in second + unrelated]
    _refuse_other_tasks(
        ([] if use == EVALUATE else [run_dirs[key] for key in with_history])
        + [evaluated[f][1] for f in evaluate_folders if evaluated.get(f)]
    )
    if use is None and with_history and evaluate_folders:
        histories = [run_dirs[key] for key in with_history]
        raise ValueError(
            f"found held-out histories (train.py output dirs: {_listed(histories)}) and `rlsr "
            f"evaluate` folders ({_listed(evaluate_folders)}): two evaluations of the runs; "
            f"choose one with --use {HELD_OUT} or --use {EVALUATE}."
        )
    use = use or (EVALUATE if evaluate_folders else HELD_OUT)
    if use == HELD_OUT:
        empty = [folder for key, folder in run_dirs.items() if key not in with_history]
        for folder in empty:
            if folder.resolve() in named or not with_history:
                raise ValueError(_no_history(folder))
        if empty:
            notes.append(f"left out {len(empty)} run(s) without held-out history: {_listed(empty)}")
        runs = {key: _history_run(run_dirs[key]) for key in with_history}
    else:
        runs = {}
        for folder in evaluate_folders:
            _add_evaluations(runs, folder, folder.resolve() in given, notes)
        runs = {k: r for k, r in runs.items() if r.evaluations}
    if not runs:
        where = ", ".join(paths)
        what = "`rlsr evaluate` folder with samples" if use == EVALUATE else "held-out history"
        raise ValueError(f"{where}: no {what} inside; nothing to compare.")
    _refuse_other_datasets(list(runs.values()))
    _refuse_duplicate_seeds(list(runs.values()))
    return sorted(runs.values(), key=lambda r: (r.method, r.seed)), notes + _unfinished_notes(
        list(runs.values())
    )


def _unfinished_notes(runs: list[Run]) -> list[str]:
    """A note for each unfinished run whose last evaluated step is before another run's."""
    last = {r.path: max(e.step for e in r.evaluations) for r in runs}
    notes = []
    for run in runs:
        why = _unfinished(run.path) if last[run.path] < max(last.values()) else None
        if why:
            notes.append(
                f"{run.path} has not finished training ({why}): it is still training, or it "
                f"stopped; the comparison stops at its last evaluated step, {last[run.path]}. "
                "Compare again once it has finished (a stopped run continues with its train.py "
                "command, resume=auto), or leave it out."
            )
    return notes


def _refuse_duplicate_seeds(runs: list[Run]) -> None:
    seen: dict[tuple[str, int], Run] = {}
    for run in runs:
        other = seen.setdefault((run.method, run.seed), run)
        if other is not run:
            raise ValueError(
                f"method {run.method!r} has seed {run.seed} twice: {other.path} and {run.path} "
                "(a seed is one run); pass one of them, or give a variant its own method.label "
                "(e.g. method.label=rlcr-std) when training it."
            )


def _key(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _refuse_difference(pairs: list[tuple[Path, object]] | None, say: str, **names) -> None:
    """Refuse with ``say`` (a template of ``a``, ``where_a``, ``b``, ``where_b`` and ``names``)
    the first two distinct values among ``(where, value)`` pairs (None: nothing to compare)."""
    where: dict[str, list[Path]] = {}
    for place, value in pairs or []:
        places = where.setdefault(_key(value), [])
        if place not in places:
            places.append(place)
    if len(where) > 1:
        (a, where_a), (b, where_b) = list(where.items())[:2]
        raise ValueError(
            say.format(
                a=json.loads(a),
                where_a=_listed(where_a),
                b=json.loads(b),
                where_b=_listed(where_b),
                **names,
            )
        )


def _listed(paths: list[Path]) -> str:
    more = f" and {len(paths) - 2} more" if len(paths) > 2 else ""
    return ", ".join(str(p) for p in paths[:2]) + more


def _pairs(runs: list[Run], dataset: str, read) -> list[tuple[Path, object]] | None:
    """``(where, read(evaluation))`` for every evaluation of ``dataset`` (where: the training run,
    or the ``rlsr evaluate`` folder); None when ``read`` gives None for one (not compared)."""
    out = []
    for run in runs:
        for e in run.evaluations:
            if e.dataset == dataset:
                value = read(e)
                if value is None:
                    return None
                out.append((run.path if run.kind == HELD_OUT else e.folder.parent, value))
    return out


def _refuse_other_datasets(runs: list[Run]) -> None:
    """Refuse runs whose evaluations hold different datasets (held-out tasks)."""
    _refuse_difference(
        [(r.path, r.datasets()) for r in runs],
        "held-out tasks differ: {a} in {where_a}, {b} in {where_b}; compare runs evaluated on "
        "the same tasks.",
    )


def check_comparable(runs: list[Run]) -> None:
    """Refuse to pool runs whose held-out datasets, evaluation protocol fields, data version
    records or questions differ (one line naming the field and the runs)."""
    _refuse_other_datasets(runs)
    for dataset in runs[0].datasets():
        keys = sorted({k for r in runs for e in r.evaluations for k in e.protocol})
        for key in keys:

            def field_value(e: Evaluation, key: str = key) -> list | None:
                return [e.protocol[key]] if key in e.protocol else None  # [None]: recorded null

            _refuse_difference(
                _pairs(runs, dataset, field_value),
                "evaluation protocol differs on {dataset}: {key} is {a[0]!r} in {where_a} but "
                "{b[0]!r} in {where_b}; compare runs evaluated with one protocol.",
                dataset=dataset,
                key=key,
            )
        _refuse_difference(
            _pairs(runs, dataset, lambda e: e.versions),
            "data version of {dataset} differs: versions.{dataset} is {a} in {where_a} but {b} in "
            "{where_b}; compare runs evaluated on one version of the data.",
            dataset=dataset,
        )
        _refuse_difference(
            _pairs(runs, dataset, lambda e: e.questions),
            "data version of {dataset} differs: its questions (id, question, gold answers in "
            f"{SAMPLES_FILE}) are not the same in {{where_a}} and {{where_b}}; compare runs "
            "evaluated on one version of the data, with the same heldout.limit.",
            dataset=dataset,
        )
