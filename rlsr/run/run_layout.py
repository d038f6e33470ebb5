"""What a run folder and an evaluation output folder hold, in one place: file names, step
folders, run.json, for every floor (trainer, pool files, evaluation, serving).

``rlsr evaluate --output-dir OUT``::

    OUT/run.json                     what was evaluated (model, adapter, protocol; CONFIG_FIELDS;
                                     versions: data files, plugin file, verifier options)
    OUT/<dataset>/samples.jsonl      one line per sample (appended, fsynced)
    OUT/<dataset>/metrics.json       rebuilt from samples.jsonl at the end of every run
    OUT/<dataset>/risk_coverage.png
    OUT/<dataset>/requests.jsonl     an HTTP endpoint's finished requests (rlsr.generation.endpoint)

The held-out evaluation during training writes the same layout per optimizer step::

    RUN_DIR/eval/step-N/             = an ``rlsr evaluate`` OUT (``step-N.partial/`` until complete)
    RUN_DIR/eval/step-N/failed.json  instead, when that step's evaluation failed
    RUN_DIR/eval/history.jsonl       one line per (step, dataset), rebuilt from the step folders
    RUN_DIR/versions.json            the data files / plugin file / verifier options of the
                                     training and held-out datasets (a resume must match them)
    RUN_DIR/checkpoint-N/            HF Trainer's checkpoint of step N (named by transformers)
    RUN_DIR/pools/step-N.jsonl       the optimizer-step pool of step N (rlsr.method.pool_log)

``rlsr evaluate`` also writes ``OUT/summary.json``, with ``--deployment-target``
``OUT/deployment.json`` and ``.md`` (what ``rlsr serve --threshold`` reads), with
``--audit-deployment`` ``OUT/audit.json`` and ``.md``; the other commands' output folders:
``rlsr.evaluation.run.outputs``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from rlsr.data import version_differences
from rlsr.run.eval_protocol import SAMPLE_FIELDS

__all__ = [
    "SAMPLES_FILE",
    "METRICS_FILE",
    "PLOT_FILE",
    "REQUESTS_FILE",
    "RUN_FILE",
    "VERSIONS_FILE",
    "EVAL_DIR",
    "HISTORY_FILE",
    "FAILED_FILE",
    "SUMMARY_FILE",
    "DEPLOYMENT_FILE",
    "AUDIT_FILE",
    "PARTIAL_SUFFIX",
    "STEP_PREFIX",
    "CHECKPOINT_PREFIX",
    "POOLS_DIR",
    "POOL_SUFFIX",
    "FINAL_WEIGHT_FILES",
    "CONFIG_FIELDS",
    "step_dir",
    "partial_dir",
    "step_of",
    "step_folders",
    "checkpoint_dir",
    "checkpoint_step",
    "checkpoint_folders",
    "pool_path",
    "pool_steps",
    "read_run_file",
    "config_differences",
    "datasets_with_samples",
    "move_aside",
    "remove_unused",
]

SAMPLES_FILE = "samples.jsonl"
METRICS_FILE = "metrics.json"
PLOT_FILE = "risk_coverage.png"
REQUESTS_FILE = "requests.jsonl"
RUN_FILE = "run.json"
VERSIONS_FILE = "versions.json"  # RUN_DIR/versions.json: what decided a training run's verdicts
EVAL_DIR = "eval"  # RUN_DIR/eval: the held-out evaluation during training
HISTORY_FILE = "history.jsonl"
FAILED_FILE = "failed.json"
SUMMARY_FILE = "summary.json"  # OUT/summary.json of `rlsr evaluate`
DEPLOYMENT_FILE = "deployment.json"  # its report: .with_suffix(".md")
AUDIT_FILE = "audit.json"  # its report: .with_suffix(".md")
PARTIAL_SUFFIX = ".partial"
STEP_PREFIX = "step-"  # eval/step-N/ and pools/step-N.jsonl
# transformers' PREFIX_CHECKPOINT_DIR + "-", restated: importing it loads torch (seconds);
# tests/test_layout.py checks it against transformers' source.
CHECKPOINT_PREFIX = "checkpoint-"
POOLS_DIR = "pools"  # RUN_DIR/pools/step-N.jsonl: one optimizer step's pool (rlsr.method.pool_log)
POOL_SUFFIX = ".jsonl"
# The final weights train.py saves in OUTPUT_DIR (a LoRA adapter, or the full model).
FINAL_WEIGHT_FILES = ("adapter_model.safetensors", "model.safetensors")

# run.json fields that decide what a sample is: a rerun into the same --output-dir must agree on
# each (else samples of two configurations would mix in one samples.jsonl). Execution details
# (backend, batch sizes, --limit, dtype, parallelism) may change between resumes.
# (SAMPLE_FIELDS: the protocol's sample-deciding fields, declared by rlsr.run.eval_protocol)
CONFIG_FIELDS = (
    "model",
    "adapter_sha256",
    "columns",
    *SAMPLE_FIELDS,
    "judge_model",
    "judge_max_answer_chars",
)


def _number_after(prefix: str, folder: str | os.PathLike) -> int | None:
    """N of a folder named ``<prefix>N`` (N in ASCII digits); None for anything else."""
    name = Path(folder).name
    suffix = name.removeprefix(prefix)
    if name.startswith(prefix) and suffix.isascii() and suffix.isdigit():
        return int(suffix)
    return None


def _numbered_folders(root: Path, prefix: str) -> list[tuple[int, Path]]:
    """``(N, root/<prefix>N)`` of every such folder under ``root``, by N."""
    found = []
    for child in root.glob(f"{prefix}*") if root.is_dir() else []:
        number = _number_after(prefix, child)
        if number is not None and child.is_dir():
            found.append((number, child))
    return sorted(found)


def step_dir(output_dir: str | os.PathLike, step: int) -> Path:
    """``OUTPUT_DIR/eval/step-N``: where the held-out evaluation of optimizer step N lives."""
    return Path(output_dir) / EVAL_DIR / f"{STEP_PREFIX}{step}"


def partial_dir(final: Path) -> Path:
    """``step-N.partial``: a step being written, renamed onto ``step-N`` when complete."""
    return final.with_name(final.name + PARTIAL_SUFFIX)


def step_of(folder: str | os.PathLike) -> int | None:
    """N of a ``step-N`` folder name; None for anything else (``step-N.partial``, ``step-x``)."""
    return _number_after(STEP_PREFIX, folder)


def step_folders(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(N, OUTPUT_DIR/eval/step-N)`` of every finished step folder, by step."""
    return _numbered_folders(Path(output_dir) / EVAL_DIR, STEP_PREFIX)


def checkpoint_dir(output_dir: str | os.PathLike, step: int) -> Path:
    """``OUTPUT_DIR/checkpoint-N``: where HF Trainer saves the checkpoint of optimizer step N."""
    return Path(output_dir) / f"{CHECKPOINT_PREFIX}{step}"


def checkpoint_step(folder: str | os.PathLike) -> int | None:
    """N of a ``checkpoint-N`` folder name; None for anything else (``checkpoint-x``)."""
    return _number_after(CHECKPOINT_PREFIX, folder)


def checkpoint_folders(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(N, OUTPUT_DIR/checkpoint-N)`` of every checkpoint folder, by step."""
    return _numbered_folders(Path(output_dir), CHECKPOINT_PREFIX)


def pool_path(output_dir: str | os.PathLike, step: int) -> Path:
    """``OUTPUT_DIR/pools/step-N.jsonl``."""
    return Path(output_dir) / POOLS_DIR / f"{STEP_PREFIX}{step}{POOL_SUFFIX}"


def pool_steps(output_dir: str | os.PathLike) -> list[int]:
    """The steps with a pool file under ``OUTPUT_DIR/pools``, ascending."""
    root = Path(output_dir) / POOLS_DIR
    steps = []
    for path in root.glob(f"{STEP_PREFIX}*{POOL_SUFFIX}") if root.is_dir() else []:
        number = path.name.removeprefix(STEP_PREFIX).removesuffix(POOL_SUFFIX)
        if number.isdigit():
            steps.append(int(number))
    return sorted(steps)


def read_run_file(out: Path) -> dict | None:
    """``OUT/run.json`` read back, None if there is none."""
    path = out / RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise ValueError(f"{path} is not valid JSON; fix it, or pass --overwrite.") from None


def _short(value) -> str:
    if isinstance(value, str) and len(value) == 64:  # a sha256
        return value[:12] + "…"
    return "none" if value is None else repr(value)


def datasets_with_samples(out: Path) -> set[str]:
    """Datasets with at least one sample in ``out`` (a ``<dataset>`` or ``<dataset>@<split>``
    folder with a non-empty samples.jsonl)."""
    found = set()
    for folder in out.iterdir() if out.is_dir() else []:
        samples = folder / SAMPLES_FILE
        if samples.is_file() and samples.stat().st_size > 0:
            found.add(folder.name.split("@")[0])
    return found


def config_differences(old: dict, new: dict, saved: set[str] | None = None) -> list[str]:
    """``field: old -> new`` for each CONFIG_FIELDS entry, verifier, served model root and task
    file that differs, then what changed in the ``versions`` of the datasets in ``saved``;
    fields an older run.json lacks are not compared."""
    diffs = [f"{k}: {_short(old[k])} -> {_short(new[k])}"
             for k in CONFIG_FIELDS if k in old and old[k] != new[k]]  # fmt: skip
    old_v, new_v = old.get("verifiers") or {}, new["verifiers"]
    diffs += [f"verifier of {n}: {old_v[n]!r} -> {new_v[n]!r}"
              for n in sorted(set(old_v) & set(new_v)) if old_v[n] != new_v[n]]  # fmt: skip
    # a server that serves other weights under the same --model name is refused too
    old_root = ((old.get("endpoint") or {}).get("served_model") or {}).get("root")
    new_root = ((new.get("endpoint") or {}).get("served_model") or {}).get("root")
    if old_root and new_root and old_root != new_root:
        diffs.append(f"served model root: {old_root!r} -> {new_root!r}")
    old_t, new_t = old.get("tasks") or {}, new.get("tasks") or {}
    for n in sorted(set(old_t) & set(new_t)):
        # the file less its execution options (timeout_s may change); older run.json: the file
        key = "definition_sha256" if old_t[n].get("definition_sha256") else "sha256"
        if old_t[n][key] != new_t[n].get(key):
            diffs.append(f"task file of {n}: {_short(old_t[n][key])} -> {_short(new_t[n][key])}")
    diffs += version_differences(old.get("versions") or {}, new.get("versions") or {}, saved)
    return diffs


def move_aside(out: Path) -> Path:
    """Rename ``out`` to ``out.old-<time>`` (``--overwrite``); returns the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target, k = out.with_name(f"{out.name}.old-{stamp}"), 1
    while target.exists():
        target, k = out.with_name(f"{out.name}.old-{stamp}-{k}"), k + 1
    out.rename(target)
    return target


def remove_unused(
    out: Path, datasets: Iterable[str], existed: set[str], root_existed: bool
) -> None:
    """After a failed run: remove the dataset folders it created that hold no sample and no
    finished (paid for) endpoint request, and ``out`` if it created it and holds only run.json."""
    for name in datasets:
        path = out / name
        if name not in existed and path.is_dir():
            kept = [path / SAMPLES_FILE, path / REQUESTS_FILE]
            if not any(f.exists() and f.stat().st_size > 0 for f in kept):
                shutil.rmtree(path)
    if not root_existed and out.is_dir() and {p.name for p in out.iterdir()} <= {RUN_FILE}:
        shutil.rmtree(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m rlsr.run.run_layout NAME...``: print each named constant (for Slurm scripts)."""
    names = sys.argv[1:] if argv is None else argv
    unknown = [n for n in names if n not in __all__ or not isinstance(globals()[n], str)]
    if not names or unknown:
        known = ", ".join(n for n in __all__ if isinstance(globals()[n], str))
        print(f"usage: python -m rlsr.run.run_layout NAME...; NAME is one of {known}"
              + (f" (not {', '.join(unknown)})" if unknown else ""), file=sys.stderr)  # fmt: skip
        return 2
    for name in names:
        print(globals()[name])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
