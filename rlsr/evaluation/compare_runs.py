"""What ``rlsr compare`` compares, read from disk: training runs, their method and seed, and
every evaluation of them (step, dataset, the folder holding ``samples.jsonl``).

Inputs, each found by what it holds (never by its name):

* a train.py output dir (``config.yaml``): its held-out history, ``eval/step-N/<dataset>/``
  (``rlsr.run_layout``); a ``step-N/failed.json`` step is left out;
* an ``rlsr evaluate`` folder (``run.json`` and ``<dataset>/samples.jsonl``): the evaluation of
  the adapter (or model) that its run.json names; the training run is that folder
  (``config.yaml``) or, for ``checkpoint-N``, the folder above it, and the step is N (the final
  adapter: the ``max_steps`` its newest checkpoint's ``trainer_state.json`` records);
* a folder holding such folders at any depth: a sweep's ``runs/`` (train.py output dirs) or
  ``evals/`` (slurm/evaluate.slurm's ``<run>/`` and ``<run>/checkpoint-N/``).

Method and seed come from the training run's ``config.yaml`` (``method.label``, else
``method.name``; ``seed``). Everything here that cannot be compared is a ``ValueError`` of one
line that names the field, the runs and the fix; ``rlsr compare`` prints it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from rlsr.config.renamed import RUN_FOLDER_HOW, fold_renamed
from rlsr.eval_protocol import SAMPLE_FIELDS
from rlsr.evaluation.samples_io import read_samples
from rlsr.evaluation.summary import scorer_arrays
from rlsr.run_layout import (
    CHECKPOINT_PREFIX,
    EVAL_DIR,
    FAILED_FILE,
    METRICS_FILE,
    PARTIAL_SUFFIX,
    RUN_FILE,
    SAMPLES_FILE,
    STEP_PREFIX,
    checkpoint_folders,
    checkpoint_step,
    renamed_run_fields,
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
HELD_OUT, EVALUATE = "held-out", "evaluate"  # the two kinds of evaluation compared (--use)
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
    # per sample (samples.jsonl is read once; only these are kept): the confidence of the
    # primary scorer (metrics.json's, missing = 0.0, as summary.scorer_arrays reads it for
    # metrics.json) and the verdict
    confidence: np.ndarray
    correct: np.ndarray  # per sample
    questions: str  # _questions_digest of the samples: which questions these are
    # per sample: its id and its question text (the cluster rlsr compare --resample-questions
    # draws: a prompt asked several times is one cluster)
    ids: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()


def _questions_digest(records: list[dict]) -> str:
    """SHA-256 of the (id, question, gold answers) of every sample, in id order: the held-out
    questions themselves, which a changed data file or split changes."""
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


# --------------------------------------------------------------------------- reading


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
    return fold_renamed(config, how=RUN_FOLDER_HOW)  # an older run's keys under the new names


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
            f"{run_dir / CONFIG_FILE}: seed is {seed!r}, not an integer; compare runs that "
            "train.py wrote."
        )
    return name, seed


def _protocol(run: dict) -> dict:
    """The sample-deciding protocol fields of a run.json: the held-out evaluation records them
    under ``settings``, ``rlsr evaluate`` at the top level."""
    settings = run.get("settings") if isinstance(run.get("settings"), dict) else run
    out = {k: settings[k] for k in SAMPLE_FIELDS if k in settings}
    out.update({k: run[k] for k in _EXTRA_PROTOCOL_FIELDS if k in run})
    if "system_prompt" in run:  # the prompt the samples were rendered with (resolved)
        out["system_prompt"] = run["system_prompt"]
    return out


def _version_of(run: dict, folder_name: str) -> dict | None:
    """What decides the verdicts of one dataset, as its run.json records it: the version record
    (``rlsr.data.version_records``: verifier, its options, plugin file, data files) and, for an
    `rlsr evaluate` of a user task, the task file's hash (a hub task's revision is in it).
    None when neither is recorded (an older run.json)."""
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


def _evaluations(out: Path, step: int) -> list[Evaluation]:
    """Every dataset of one evaluation folder (``rlsr evaluate`` layout) with samples."""
    run = _read_json(out / RUN_FILE) if (out / RUN_FILE).is_file() else {}
    run = renamed_run_fields(run)  # a folder an older rlsr wrote
    found = []
    for samples in sorted(out.glob(f"*/{SAMPLES_FILE}")):
        folder = samples.parent
        records = read_samples(samples)
        if not records:
            continue
        metrics_path = folder / METRICS_FILE
        if not metrics_path.is_file():
            raise ValueError(
                f"{folder}: {SAMPLES_FILE} without {METRICS_FILE}: its evaluation did not "
                "finish; rerun the same `rlsr evaluate` command to finish it, or leave the "
                "folder out."
            )
        metrics = _read_json(metrics_path)
        if metrics.get("n") != len(records):
            raise ValueError(
                f"{folder}: {METRICS_FILE} summarises n={metrics.get('n')} samples but "
                f"{SAMPLES_FILE} holds {len(records)}: an evaluation is still writing it or was "
                "cut off; rerun the same `rlsr evaluate` command to finish it."
            )
        seen: set[str] = set()
        for record in records:
            if str(record.get("id")) in seen:
                raise ValueError(
                    f"{samples}: question id {record.get('id')!r} appears twice; one evaluation "
                    "folder holds one sample per question."
                )
            seen.add(str(record.get("id")))
        name = folder.name
        confidence, correct, _ = scorer_arrays(records, metrics.get("primary_scorer", "verbalized"))
        found.append(
            Evaluation(
                folder=folder,
                step=step,
                dataset=name,
                protocol=_protocol(run),
                versions=_version_of(run, name),
                confidence=confidence,
                correct=correct,
                questions=_questions_digest(records),
                ids=tuple(str(r.get("id")) for r in records),
                prompts=tuple(str(r.get("question", r.get("id"))) for r in records),
            )
        )
    return found


def _final_step(run_dir: Path) -> int:
    """The step of the final adapter train.py saved in ``run_dir``: the ``max_steps`` its newest
    checkpoint's trainer_state.json records (the step ``train()`` runs to; train.py saves the
    final adapter after it returns, and HF Trainer checkpoints that last step too)."""
    for _, folder in reversed(checkpoint_folders(run_dir)):
        state = folder / "trainer_state.json"
        max_steps = _read_json(state).get("max_steps") if state.is_file() else None
        if isinstance(max_steps, int) and max_steps > 0:
            return max_steps
    raise ValueError(
        f"{run_dir}: no {CHECKPOINT_PREFIX}N/trainer_state.json, so the step of its final "
        f"adapter is unknown; evaluate a {CHECKPOINT_PREFIX}N folder of the run instead."
    )


def _training_run_of(path: Path) -> tuple[Path, int] | None:
    """(training run folder, step) of an evaluated adapter or model folder, None if it is
    neither a train.py output dir nor one of its checkpoint-N folders."""
    if (path / CONFIG_FILE).is_file():
        return path, _final_step(path)
    step = checkpoint_step(path)
    if step is not None and (path.parent / CONFIG_FILE).is_file():
        return path.parent, step
    return None


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
            run.evaluations += _evaluations(folder, step)
    return run


def _not_a_run(out: Path, record: dict) -> str:
    return (
        f"{out}: its {RUN_FILE} names adapter {record.get('adapter')!r} and model "
        f"{record.get('model')!r}, neither a train.py output dir (with {CONFIG_FILE}) nor "
        f"its {CHECKPOINT_PREFIX}N here, so no recorded config gives its method and seed; "
        "compare evaluations of train.py runs, on the machine that holds the runs."
    )


def _evaluate_run(out: Path) -> tuple[Run, list[Evaluation]] | None:
    """The training run an ``rlsr evaluate`` folder evaluated and its evaluations; None when
    its run.json names no train.py run (a base model's evaluation)."""
    record = _read_json(out / RUN_FILE)
    found = None
    for key in ("adapter", "model"):
        if isinstance(record.get(key), str) and Path(record[key]).is_dir():
            found = _training_run_of(Path(record[key]))
            if found:
                break
    if found is None:
        return None
    run_dir, step = found
    config = _read_config(run_dir)
    method, seed = _method_and_seed(config, run_dir)
    return Run(run_dir.resolve(), method, seed, config, EVALUATE), _evaluations(out, step)


def _folders(root: Path, depth: int = 0):
    """(kind, folder) of every train.py output dir (HELD_OUT) and ``rlsr evaluate`` folder
    (EVALUATE) at or under ``root``. Inside a train.py output dir only its own evaluate folders
    (``OUTPUT_DIR/evaluate``, the run summary's command) are looked for, not eval/step-N."""
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
    """The evaluations of ``folder`` to the run they evaluated; a folder that evaluated no
    train.py run is refused when given by name, else left out with a note."""
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


def find_runs(paths: list[str], use: str | None = None) -> tuple[list[Run], list[str]]:
    """Every training run under ``paths`` with its evaluations (module docstring), and notes on
    what was left out. ``use``: HELD_OUT (train.py's eval/step-N history) or EVALUATE (``rlsr
    evaluate`` folders); None: whichever is there. Refuses a path that holds neither, both kinds
    without ``use``, a train.py output dir given by name without held-out history, and one
    (method, seed) from two training runs."""
    histories: dict[Path, Run] = {}
    evaluate_folders: list[Path] = []
    empty: list[Run] = []  # train.py runs without held-out history
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
            run = _history_run(folder)
            if run.evaluations:
                histories.setdefault(folder.resolve(), run)
            else:
                empty.append(run)
    if use is None and histories and evaluate_folders:
        raise ValueError(
            f"found held-out histories (train.py output dirs: {_names(list(histories.values()))}) "
            f"and `rlsr evaluate` folders ({_listed(evaluate_folders)}): two evaluations of the "
            f"runs; choose one with --use {HELD_OUT} or --use {EVALUATE}."
        )
    use = use or (EVALUATE if evaluate_folders else HELD_OUT)
    notes = []
    if use == HELD_OUT:
        for run in empty:
            if run.path.resolve() in named or not histories:
                raise ValueError(_no_history(run.path))
        if empty:
            notes.append(f"left out {len(empty)} run(s) without held-out history: {_names(empty)}")
        runs = histories
    else:
        runs = {}
        given = {Path(p).resolve() for p in paths}
        for folder in evaluate_folders:
            _add_evaluations(runs, folder, folder.resolve() in given, notes)
        runs = {k: r for k, r in runs.items() if r.evaluations}
    if not runs:
        where = ", ".join(paths)
        what = "`rlsr evaluate` folder with samples" if use == EVALUATE else "held-out history"
        raise ValueError(f"{where}: no {what} inside; nothing to compare.")
    _refuse_duplicate_seeds(list(runs.values()))
    return sorted(runs.values(), key=lambda r: (r.method, r.seed)), notes


def _names(runs: list[Run], limit: int = 3) -> str:
    shown = [str(r.path) for r in runs[:limit]]
    more = f" and {len(runs) - limit} more" if len(runs) > limit else ""
    return ", ".join(shown) + more


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


# --------------------------------------------------------------------------- pooling checks


def _key(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _first_difference(pairs: list[tuple[Path, object]]) -> tuple[object, list, object, list]:
    """Two distinct values among ``(where, value)`` pairs and where each is (once each, in
    order), or None when every value is the same."""
    where: dict[str, list[Path]] = {}
    for place, value in pairs:
        places = where.setdefault(_key(value), [])
        if place not in places:
            places.append(place)
    if len(where) < 2:
        return None
    (a, where_a), (b, where_b) = list(where.items())[:2]
    return json.loads(a), where_a, json.loads(b), where_b


def _listed(paths: list[Path]) -> str:
    more = f" and {len(paths) - 2} more" if len(paths) > 2 else ""
    return ", ".join(str(p) for p in paths[:2]) + more


def _pairs(runs: list[Run], dataset: str, read) -> list[tuple[Path, object]] | None:
    """``(where, read(evaluation))`` for every evaluation of ``dataset``: where = the training
    run for a held-out history, the ``rlsr evaluate`` folder otherwise. None when ``read``
    gives None for one of them (an older run.json without the field: not compared on it)."""
    out = []
    for run in runs:
        for e in run.evaluations:
            if e.dataset == dataset:
                value = read(e)
                if value is None:
                    return None
                out.append((run.path if run.kind == HELD_OUT else e.folder.parent, value))
    return out


def check_comparable(runs: list[Run]) -> None:
    """Refuse (``ValueError``, one line naming the field and the runs) to pool runs whose held-out
    datasets, evaluation protocol or data version differ: every run must hold the same datasets,
    and every evaluation of a dataset the same protocol fields, the same version record
    (verifier, its options, plugin file, data files) and the same questions."""
    diff = _first_difference([(r.path, r.datasets()) for r in runs])
    if diff:
        a, where_a, b, where_b = diff
        raise ValueError(
            f"held-out tasks differ: {a} in {_listed(where_a)}, {b} in {_listed(where_b)}; "
            "compare runs evaluated on the same tasks."
        )
    for dataset in runs[0].datasets():
        keys = sorted({k for r in runs for e in r.evaluations for k in e.protocol})
        for key in keys:

            def field_value(e: Evaluation, key: str = key) -> list | None:
                return [e.protocol[key]] if key in e.protocol else None  # [None]: recorded null

            diff = _first_difference(_pairs(runs, dataset, field_value) or [])
            if diff:
                (a,), where_a, (b,), where_b = diff
                raise ValueError(
                    f"evaluation protocol differs on {dataset}: {key} is {a!r} in "
                    f"{_listed(where_a)} but {b!r} in {_listed(where_b)}; compare runs evaluated "
                    "with one protocol."
                )
        diff = _first_difference(_pairs(runs, dataset, lambda e: e.versions) or [])
        if diff:
            a, where_a, b, where_b = diff
            raise ValueError(
                f"data version of {dataset} differs: versions.{dataset} is {a} in "
                f"{_listed(where_a)} but {b} in {_listed(where_b)}; compare runs evaluated on "
                "one version of the data."
            )
        diff = _first_difference(_pairs(runs, dataset, lambda e: e.questions))
        if diff:
            _, where_a, _, where_b = diff
            raise ValueError(
                f"data version of {dataset} differs: its questions (id, question, gold answers "
                f"in {SAMPLES_FILE}) are not the same in {_listed(where_a)} and "
                f"{_listed(where_b)}; compare runs evaluated on one version of the data, with "
                "the same heldout.limit."
            )
