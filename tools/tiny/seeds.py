#!/usr/bin/env python
"""The four-arm study on a tiny CPU task: every arm's learning rate and step chosen on the
validation split, the test split read once.

    python tools/tiny/seeds.py                                   # tune, then test seeds 0-9
    python tools/tiny/seeds.py --jobs 2 --output-dir /work/tiny_study
    python tools/tiny/seeds.py --recipe tiny-candidates --output-dir candidates_study
    python tools/tiny/seeds.py --table-only                      # tabulate what is finished

Each run is README command 1's ``train.py recipe=R seed=S`` plus the arm's overrides (``ARMS``:
RLSR; RLCR as the paper runs it, ``scale_rewards: none``; RLCR with GRPO's group std
normalisation, ``rlcr-stdnorm``; RLVR), one process, ``OMP_NUM_THREADS=1``. Two phases:

1. **Tune, on validation.** Every arm gets the same budget of trials: each learning rate of
   ``--lrs`` on each seed of ``--tune-seeds``, ``--max-steps`` optimizer steps, the held-out
   evaluation on the validation split every ``--every`` steps (greedy, the run's own held-out
   protocol). Per arm, the (learning rate, step) with the lowest validation AURC averaged over the
   tuning seeds is its choice (ties: fewer steps, then the smaller rate). The curves and the
   choices go to ``OUT/choices.json``; these curves are the arms' training curves.
2. **Test, once.** On each seed of ``--seeds`` (disjoint from the tuning seeds) every arm trains
   with its own choice, the validation split evaluated at its start and its last step, and its
   final adapter answers the test split once (``rlsr evaluate --split test``, the run's printed
   evaluation command); the start model answers it once too (``OUT/start``).

Per arm: mean and 95 % interval over seeds of the test AURC, ranking gain (error rate - AURC) and
ECE; per other arm: the paired difference RLSR - arm on the seeds both finished, its interval,
Holm-adjusted exact paired p and verdict, computed by ``rlsr compare``'s own functions. Writes
``OUT/choices.json`` after tuning, ``OUT/table.md`` and ``OUT/table.json`` at the end; a finished
run (or test evaluation) is reused when the command is re-run, so a stopped study resumes; a test run trained with another choice than ``choices.json`` now holds is refused.
``--dispatches`` also runs the test phase under ``ATEN_CPU_CAPABILITY`` (another machine's float
rounding; ``scalar`` = PyTorch's portable kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from rlsr.data.loading import FIXTURES_DIR  # noqa: E402
from rlsr.evaluation.comparison.compare import (  # noqa: E402
    Statistics,
    add_verdicts,
    paired_summary,
    seed_summary,
)
from rlsr.evaluation.heldout.history import read_history  # noqa: E402
from rlsr.metrics.selective import aurc, ranking_gain_from_aurc  # noqa: E402
from rlsr.run.run_layout import METRICS_FILE, SAMPLES_FILE, pool_path, pool_steps  # noqa: E402
from tools.tiny.data import candidates_tier  # noqa: E402

# Arm name -> train.py overrides on top of the recipe (--recipe).
ARMS = {
    "rlsr": ["method=rlsr"],
    "rlcr": ["method=rlcr"],
    "rlcr-stdnorm": ["method=rlcr", "grpo.scale_rewards=group", "method.label=rlcr-stdnorm"],
    "rlvr": ["method=rlvr"],
}
# Dispatch name -> ATEN_CPU_CAPABILITY ("default": unset, the best kernels this CPU has; on a CPU
# without AVX-512 that is AVX2 itself, so "scalar", PyTorch's portable kernels, is the one that
# surely rounds differently there).
DISPATCHES = {"default": None, "avx2": "avx2", "avx512": "avx512", "scalar": "default"}
VALIDATION, TEST = "validation", "test"


def _listed_or_missing(question: str) -> str:
    return "missing" if "Facts: none." in question else "listed"


# --recipe -> the held-out dataset it evaluates, the kind of each of its questions (the
# confidence columns of the per-run table, in this order) and, where the rewards' best reports
# differ, each report as one confidence per kind: the table adds the AURC a run's own test
# answers would have under each (docs/training.md, recipe=tiny-candidates). tiny-candidates: p = 1, 0.7,
# 0.3, 1/8 per tier; calibrated = the Brier term's best report on the 0.1 / 0.3 / 0.5 / 0.7 / 0.9
# grid (c = p, nearest level); threshold = the lifted-AURC reward's (top above p = 1/2, bottom
# below).
RECIPES = {
    "tiny": {"dataset": "tiny-missing", "kind_of": _listed_or_missing,
             "kinds": ("listed", "missing"), "reports": {}},
    "tiny-candidates": {"dataset": "tiny-candidates", "kind_of": candidates_tier,
                    "kinds": ("k=1", "k=2", "k=4", "none"),
                    "reports": {"calibrated": (0.9, 0.7, 0.3, 0.1),
                                "threshold": (0.9, 0.9, 0.1, 0.1)}},
}  # fmt: skip
RECIPES["tiny-split"] = RECIPES["tiny-candidates"]  # the same task from tiny-candidates-split
# The table's metrics: (key, heading, which direction is better), rlsr compare's names.
TABLE_METRICS = (
    ("aurc", "AURC", "lower"),
    ("ranking_gain", "ranking gain", "higher"),
    ("ece", "ECE", "lower"),
)
STATISTICS = Statistics()


def seed_ci(values, key: str = "ranking_gain") -> tuple[float, float]:
    """95 % interval of the mean over seeds, as ``rlsr compare`` computes it
    (``rlsr.evaluation.comparison.compare.seed_summary``: a t-interval, widened where some seeds
    are exactly 0, cut to the metric's range); (nan, nan) for fewer than 2 values."""
    per_seed = {i: {key: float(v)} for i, v in enumerate(values)}
    low, high = seed_summary(per_seed, STATISTICS, [key])["ci95"][key]
    return low, high


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def confidence_by_kind(samples_path: Path, recipe: str = "tiny") -> dict:
    """The greedy confidences of one evaluation, per kind of question of ``recipe``
    (``RECIPES``; tiny: ``listed``, the asked fact is in the prompt, and ``missing``,
    ``Facts: none.``), as {value: count} and the accuracy. An unparsed confidence counts as
    ``none``."""
    out = {}
    rows = _rows(samples_path)
    kind_of = RECIPES[recipe]["kind_of"]
    for kind in RECIPES[recipe]["kinds"]:
        picked = [r for r in rows if kind_of(r["question"]) == kind]
        counts = Counter("none" if r["confidence"] is None else f"{r['confidence']:g}"
                         for r in picked)  # fmt: skip
        out[kind] = {
            "n": len(picked),
            "confidence_counts": dict(sorted(counts.items())),
            "accuracy": sum(bool(r["correct"]) for r in picked) / max(1, len(picked)),
        }
    return out


def _window_confidences(run: Path, recipe: str, window: int) -> list[dict[str, list[float]]]:
    """Per kind of training prompt (``RECIPES``), the parsed confidences of the rollouts in the
    run's first and last ``window`` optimizer steps (``pools/step-N.jsonl``; a prompt's kind from
    its bundled train question, by ``prompt_id``)."""
    spec = RECIPES[recipe]
    train = FIXTURES_DIR / spec["dataset"] / "train.jsonl"
    kind_of_id = {row["id"]: spec["kind_of"](row["question"]) for row in _rows(train)}
    steps = sorted(pool_steps(run))
    out = []
    for chosen in (steps[:window], steps[-window:]):
        confs: dict[str, list[float]] = {kind: [] for kind in spec["kinds"]}
        for step in chosen:
            for row in _rows(pool_path(run, step)):
                if row.get("confidence") is not None:
                    confs[kind_of_id[row["prompt_id"]]].append(row["confidence"])
        out.append(confs)
    return out


def sampled_means(run: Path, recipe: str, window: int = 10) -> dict[str, list[float | None]]:
    """Per kind of training prompt, the mean parsed confidence of the rollouts in the run's first
    and last ``window`` optimizer steps (``_window_confidences``): whether the sampled confidence
    moved at all, where the greedy one did not. None for a kind without a rollout in the window."""
    windows = _window_confidences(run, recipe, window)
    return {kind: [sum(w[kind]) / len(w[kind]) if w[kind] else None for w in windows]
            for kind in RECIPES[recipe]["kinds"]}  # fmt: skip


def sampled_level_shares(run: Path, recipe: str, window: int = 10) -> dict[str, dict]:
    """Per kind where the reports of ``RECIPES[recipe]["reports"]`` differ, the share of the
    rollouts' parsed confidences at each of those reports' levels, first and last ``window``
    optimizer steps: {kind: {level: [first, last]}} (None for an empty window). Where the mass
    of each tier moved: towards the calibrated level or the threshold one."""
    spec = RECIPES[recipe]
    windows = _window_confidences(run, recipe, window)
    out = {}
    for i, kind in enumerate(spec["kinds"]):
        levels = sorted({levels[i] for levels in spec["reports"].values()}, reverse=True)
        if len(levels) > 1:
            out[kind] = {f"{lv:g}": [sum(abs(c - lv) < 1e-9 for c in w[kind]) / len(w[kind])
                                     if w[kind] else None for w in windows]
                         for lv in levels}  # fmt: skip
    return out


def report_aurcs(samples_path: Path, recipe: str) -> dict[str, float]:
    """Per report of ``RECIPES[recipe]["reports"]``: the AURC (``rlsr.metrics.selective.aurc``,
    ties as the expectation over their orderings) of the samples' own answers (``correct``) had
    each question been given its kind's confidence under that report. Separates what a run's
    ranking earns from what its accuracy does."""
    rows = _rows(samples_path)
    spec = RECIPES[recipe]
    out = {}
    for name, levels in spec["reports"].items():
        by_kind = dict(zip(spec["kinds"], levels, strict=True))
        conf = [by_kind[spec["kind_of"](r["question"])] for r in rows]
        out[name] = aurc(conf, [bool(r["correct"]) for r in rows])
    return out


def _recorded_recipe(folder: Path) -> str | None:
    """``recipe_name`` of the run's resolved ``config.yaml`` (None when it has none)."""
    path = folder / "config.yaml"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        if line.startswith("recipe_name:"):
            return line.split(":", 1)[1].strip()
    return None


def _log(folder: Path) -> Path:
    """The training log beside ``folder`` (``NAME.log``; the name may hold dots, as lr0.001)."""
    return folder.parent / f"{folder.name}.log"


def _env(dispatch: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if dispatch != "default":
        env["ATEN_CPU_CAPABILITY"] = DISPATCHES[dispatch]
    return env


def _train(folder: Path, recipe: str, overrides: list[str], dispatch: str, study: dict) -> dict:
    """Train one run into ``folder`` unless it holds a finished one (``wall.json``); returns
    ``{"seconds", "load"}`` or ``{"error": rc, "log": path}``. ``study``: the choice it is
    trained with (its learning rate, steps), written beside it; a finished run of another recipe
    or trained with another choice raises ``SystemExit``."""
    done, mine = folder / "wall.json", folder / "study.json"
    if done.is_file():
        recorded = _recorded_recipe(folder)
        if recorded is not None and recorded != recipe:
            raise SystemExit(f"--recipe {recipe}: {folder} holds a finished recipe={recorded} run; "
                             "give another --output-dir (one folder per recipe).")  # fmt: skip
        if mine.is_file() and json.loads(mine.read_text()) != study:
            raise SystemExit(f"{folder} was trained with {mine.read_text().strip()}, not {study}: "
                             "the validation choice changed; move it away or give another "
                             "--output-dir.")  # fmt: skip
        return json.loads(done.read_text())
    cmd = [sys.executable, str(REPO / "train.py"), f"recipe={recipe}", *overrides,
           f"output_dir={folder}", "resume=never", "grpo.disable_tqdm=true"]  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(_log(folder), "w") as log:
        rc = subprocess.run(cmd, env=_env(dispatch), stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    if rc.returncode != 0:
        return {"error": rc.returncode, "log": str(_log(folder))}
    wall = {"seconds": time.perf_counter() - t0, "load": os.getloadavg()}
    mine.write_text(json.dumps(study))
    done.write_text(json.dumps(wall))
    return wall


def _split_overrides(lr: float, steps: int, seed: int, every: int) -> list[str]:
    """A run of ``steps`` steps at ``lr`` whose held-out evaluation reads the validation split
    every ``every`` steps and at step 0 (never the test split)."""
    return [f"seed={seed}", f"grpo.learning_rate={lr}", f"grpo.max_steps={steps}",
            f"heldout.split={VALIDATION}", f"heldout.every={every}", "heldout.at_start=true",
            f"grpo.save_steps={steps}"]  # fmt: skip


def validation_curve(run: Path, dataset: str) -> dict[int, dict]:
    """The run's held-out history on the validation split: {step: {aurc, accuracy, ece,
    ranking_gain}} (``rlsr.evaluation.heldout.history.read_history``)."""
    out = {}
    for h in read_history(run):
        if "failed" not in h and h["dataset"] == f"{dataset}@{VALIDATION}":
            out[h["step"]] = _figures(h["aurc"], h["accuracy"], h["ece"])
    return dict(sorted(out.items()))


def _figures(aurc_value: float, accuracy: float, ece: float) -> dict:
    return {"aurc": aurc_value, "accuracy": accuracy, "ece": ece,
            "ranking_gain": ranking_gain_from_aurc(aurc_value, 1 - accuracy)}  # fmt: skip


def choose(curves: dict[float, dict[int, dict[int, dict]]]) -> dict:
    """One arm's validation choice. ``curves``: {lr: {seed: {step: figures}}}. Per (lr, step >
    0) evaluated on every tuning seed of that lr, the mean validation AURC over those seeds; the
    lowest wins, ties broken by fewer steps, then the smaller rate. Returns the choice and the
    mean curves ({lr: {step: mean AURC}})."""
    mean_curves, best = {}, None
    for lr, by_seed in sorted(curves.items()):
        steps = sorted(set.intersection(*(set(c) for c in by_seed.values()))) if by_seed else []
        mean_curves[lr] = {
            step: float(np.mean([by_seed[s][step]["aurc"] for s in by_seed])) for step in steps
        }
        for step, value in mean_curves[lr].items():
            if step > 0 and (best is None or (value, step, lr) < best):
                best = (value, step, lr)
    if best is None:
        return {"lr": None, "step": None, "validation_aurc": None, "curves": mean_curves}
    return {"lr": best[2], "step": best[1], "validation_aurc": best[0], "curves": mean_curves}


def _run_all(jobs: int, tasks: list):
    """Call every ``(fn, args)`` of ``tasks``, ``jobs`` at a time, in order of submission."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return [f.result() for f in [pool.submit(fn, *a) for fn, a in tasks]]


def tune(args, out: Path) -> dict:
    """Phase 1: every arm x ``--lrs`` x ``--tune-seeds``, validation curves, one choice per
    arm; written to ``OUT/choices.json``."""
    dataset = RECIPES[args.recipe]["dataset"]
    plan = [(arm, lr, seed) for seed in args.tune_seeds for arm in args.arms for lr in args.lrs]
    study = {"max_steps": args.max_steps, "every": args.every}

    def one(arm, lr, seed):
        if (
            args.table_only
            and not (out / "tune" / f"{arm}-lr{lr:g}-seed{seed}" / "wall.json").is_file()
        ):
            return arm, lr, seed, {}
        folder = out / "tune" / f"{arm}-lr{lr:g}-seed{seed}"
        overrides = ARMS[arm] + _split_overrides(lr, args.max_steps, seed, args.every)
        wall = _train(folder, args.recipe, overrides, "default", {**study, "lr": lr})
        print(f"tune {arm} lr={lr:g} seed={seed}: {wall}", flush=True)
        return arm, lr, seed, ({} if "error" in wall else validation_curve(folder, dataset))

    curves: dict[str, dict[float, dict[int, dict]]] = {a: {} for a in args.arms}
    for arm, lr, seed, curve in _run_all(args.jobs, [(one, p) for p in plan]):
        if curve:
            curves[arm].setdefault(lr, {})[seed] = curve
    choices = {arm: choose(curves[arm]) for arm in args.arms}
    record = {"recipe": args.recipe, "lrs": args.lrs, "tune_seeds": args.tune_seeds,
              "max_steps": args.max_steps, "every": args.every, "choices": choices,
              "criterion": "lowest mean validation AURC over the tuning seeds; ties: fewer "
                           "steps, then the smaller learning rate"}  # fmt: skip
    (out / "choices.json").write_text(json.dumps(record, indent=1))
    return record


def _evaluate_command(log: Path) -> list[str]:
    """The ``rlsr evaluate`` command a training run printed (its held-out protocol: model, adapter,
    tasks, new tokens, system prompt), without its output folder, split and bootstrap."""
    line = next(ln for ln in log.read_text().splitlines() if " evaluate --model " in ln)
    cmd = shlex.split(line.strip())
    cmd[0] = str(Path(sys.executable).with_name("rlsr"))
    kept, i = [], 0
    while i < len(cmd):
        if cmd[i] in ("--output-dir", "--split", "--bootstrap"):
            i += 2
            continue
        kept.append(cmd[i])
        i += 1
    return kept


def _without_adapter(cmd: list[str]) -> list[str]:
    i = cmd.index("--adapter")
    return cmd[:i] + cmd[i + 2 :]


def evaluate_test(cmd: list[str], target: Path, dataset: str, dispatch: str) -> Path | None:
    """The test split answered once with ``cmd`` (``_evaluate_command``) into ``target``
    (``rlsr evaluate`` resumes an interrupted one); its metrics.json, None when it failed."""
    metrics = target / f"{dataset}@{TEST}" / METRICS_FILE
    if not metrics.is_file():
        target.mkdir(parents=True, exist_ok=True)
        cmd = [*cmd, "--split", TEST, "--output-dir", str(target), "--bootstrap", "0"]
        with open(target / "evaluate.log", "w") as log:
            subprocess.run(cmd, env=_env(dispatch), stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    return metrics if metrics.is_file() else None


def _test_figures(metrics_path: Path) -> dict:
    m = json.loads(metrics_path.read_text())
    primary = m["scorers"][m["primary_scorer"]]
    return _figures(primary["aurc"], m["accuracy"], primary["ece"])


def test_phase(args, out: Path, choices: dict) -> list[dict]:
    """Phase 2: every arm on every test seed with its validation choice, the test split read
    once by its final adapter (and once by the start model, ``OUT/start``); one row per run."""
    spec = RECIPES[args.recipe]
    dataset = spec["dataset"]
    plan = [(arm, seed, d) for seed in args.seeds for d in args.dispatches for arm in args.arms
            if choices[arm]["lr"] is not None]  # fmt: skip

    def one(arm, seed, dispatch):
        c = choices[arm]
        folder = out / TEST / f"{arm}-{dispatch}-seed{seed}"
        if args.table_only and not (folder / "wall.json").is_file():
            return None
        # validation at step 0 and at the chosen step only: the curves are the tuning runs'
        study = {"lr": c["lr"], "max_steps": c["step"], "every": c["step"]}
        overrides = ARMS[arm] + _split_overrides(c["lr"], c["step"], seed, c["step"])
        wall = _train(folder, args.recipe, overrides, dispatch, study)
        row = {"arm": arm, "seed": seed, "dispatch": dispatch, "lr": c["lr"], "steps": c["step"]}
        if "error" in wall:
            return {**row, **wall}
        cmd = _evaluate_command(_log(folder))
        metrics = evaluate_test(cmd, folder / TEST, dataset, dispatch)
        if metrics is None:
            return {**row, "error": "test evaluation", "log": str(folder / TEST / "evaluate.log")}
        samples = metrics.parent / SAMPLES_FILE
        row.update(_test_figures(metrics), seconds=wall["seconds"], load=wall["load"][0],
                   validation=validation_curve(folder, dataset),
                   last_confidence=confidence_by_kind(samples, args.recipe),
                   aurc_if=report_aurcs(samples, args.recipe),
                   sampled_first_last=sampled_means(folder, args.recipe),
                   sampled_level_shares=sampled_level_shares(folder, args.recipe),
                   start_command=_without_adapter(cmd))  # fmt: skip
        print(f"test {arm} seed={seed} {dispatch}: AURC {row['aurc']:.3f}", flush=True)
        return row

    rows = [r for r in _run_all(args.jobs, [(one, p) for p in plan]) if r is not None]
    # the start model answers the test split once, after the runs (parallel runs would race on
    # its folder); its command is any run's without the adapter
    command = next((r.pop("start_command") for r in rows if "start_command" in r), None)
    start = command and evaluate_test(command, out / "start" / TEST, dataset, "default")
    for r in rows:
        r.pop("start_command", None)
        if start:
            r["start"] = _test_figures(start)
    return rows


def summarize(rows: list[dict], arms: list[str], reference: str = "rlsr",
              margin: float | None = None) -> dict:  # fmt: skip
    """Per (dispatch, arm): the seeds, mean and 95 % interval of each ``TABLE_METRICS``; per
    (dispatch, other arm): the paired difference ``reference`` - arm on the seeds both have,
    with ``rlsr compare``'s exact paired test, Holm-adjusted p (one family per dispatch: every
    pair x metric) and verdict (docs/compare.md, "Intervals, tests and verdicts")."""
    names = [k for k, _, _ in TABLE_METRICS]
    ok = [r for r in rows if "error" not in r]
    out = {}
    for dispatch in sorted({r["dispatch"] for r in ok}):
        by_arm = {a: {r["seed"]: {k: r[k] for k in names} for r in ok
                      if r["arm"] == a and r["dispatch"] == dispatch} for a in arms}  # fmt: skip
        per_arm = {a: seed_summary(runs, STATISTICS, names) for a, runs in by_arm.items()}
        entries = []
        for arm in arms:
            if arm != reference and reference in by_arm:
                a, b = by_arm[reference], by_arm[arm]
                diffs = {s: {k: a[s][k] - b[s][k] for k in names} for s in sorted(set(a) & set(b))}
                entries.append((reference, arm, paired_summary(diffs, STATISTICS, names)))
        add_verdicts(entries, TABLE_METRICS, margin)
        out[dispatch] = {"arms": per_arm, "paired": {b: e for _, b, e in entries}}
    return out


def _signed(value: float) -> str:
    """``value`` as +0.123; float noise around 0 (-1e-16) prints +0.000."""
    return f"{round(value, 3) + 0.0:+.3f}"


def _ci(summary: dict, key: str, signed: bool = False) -> str:
    """``mean [lo, hi]`` of one metric; without seeds "–", with one the mean alone."""
    if not summary["seeds"] or summary["n"].get(key, 0) == 0:
        return "–"
    fmt = _signed if signed else (lambda v: f"{v:.3f}")
    lo, hi = summary["ci95"][key]
    return fmt(summary["mean"][key]) + ("" if np.isnan(lo) else f" [{fmt(lo)}, {fmt(hi)}]")


def _tested(entry: dict, key: str) -> str:
    if not entry["seeds"]:
        return "–"
    p = entry["p_adjusted"][key]
    return f"{_ci(entry, key, True)}, p={'n/a' if np.isnan(p) else f'{p:.3f}'}, {entry['verdict'][key]}"


def _counts(counts: dict) -> str:
    return " ".join(f"{v}:{n}" for v, n in counts.items())


def table_markdown(rows: list[dict], summary: dict, tuning: dict, recipe: str = "tiny") -> str:
    spec = RECIPES[recipe]
    dataset, kinds, reports = spec["dataset"], spec["kinds"], spec["reports"]
    heads = " | ".join(h for _, h, _ in TABLE_METRICS)
    lines = [f"**Choices on validation** ({dataset} validation split, greedy; learning rates "
             f"{', '.join(f'{lr:g}' for lr in tuning['lrs'])} x tuning seeds "
             f"{', '.join(map(str, tuning['tune_seeds']))}, {tuning['max_steps']} steps, evaluated "
             f"every {tuning['every']}; mean validation AURC over the tuning seeds per step)", "",
             "| arm | learning rate | " + " | ".join(f"step {s}" for s in _steps(tuning))
             + " |", "| --- " * (2 + len(_steps(tuning))) + "|"]  # fmt: skip
    for arm, c in tuning["choices"].items():
        for lr, curve in c["curves"].items():
            cells = []
            for s in _steps(tuning):
                v = curve.get(s) if s in curve else curve.get(str(s))
                mark = "**" if float(lr) == c["lr"] and s == c["step"] else ""
                cells.append("–" if v is None else f"{mark}{v:.3f}{mark}")
            lines.append(f"| {arm} | {float(lr):g} | " + " | ".join(cells) + " |")
    lines.append("")
    for dispatch, block in summary.items():
        lines += [f"**Test, read once** (dispatch {dispatch}; {dataset} test split, greedy, each "
                  "arm at its validation choice; mean [95 % interval over seeds, as rlsr compare])",
                  "", f"| arm | learning rate, steps | seeds | {heads} |",
                  "| --- " * (3 + len(TABLE_METRICS)) + "|"]  # fmt: skip
        for arm, stat in block["arms"].items():
            c = tuning["choices"][arm]
            cells = " | ".join(_ci(stat, k, k == "ranking_gain") for k, _, _ in TABLE_METRICS)
            lines.append(f"| {arm} | {c['lr']:g}, {c['step']} | {len(stat['seeds'])} | {cells} |")
        lines += ["", f"**Paired difference rlsr - arm on test** (dispatch {dispatch}, seeds both "
                  "finished; mean [95 % interval]; Holm-adjusted exact p; verdict)", "",
                  f"| arm | seeds | {heads} |", "| --- " * (2 + len(TABLE_METRICS)) + "|"]  # fmt: skip
        for arm, entry in block["paired"].items():
            cells = " | ".join(_tested(entry, k) for k, _, _ in TABLE_METRICS)
            lines.append(f"| {arm} | {len(entry['seeds'])} | {cells} |")
        lines.append("")
    start = next((r["start"] for r in rows if "start" in r), None)
    if start:
        lines += [
            f"Start model on the test split: AURC {start['aurc']:.3f}, ranking gain "
            f"{_signed(start['ranking_gain'])}, ECE {start['ece']:.3f}.",
            "",
        ]
    lines += ["**Per run** (test; greedy confidence as value:count per kind, accuracy per kind)",
              "", "| arm | seed | dispatch | AURC | ranking gain | ECE | "
              + "".join(f"{k} conf (acc) | " for k in kinds)
              + "".join(f"AURC if {name} | " for name in reports) + "wall s |",
              "| --- " * (7 + len(kinds) + len(reports)) + "|"]  # fmt: skip
    for r in sorted(rows, key=lambda r: (r["dispatch"], list(ARMS).index(r["arm"]), r["seed"])):
        if "error" in r:
            lines.append(f"| {r['arm']} | {r['seed']} | {r['dispatch']} | failed: {r['log']} "
                         + "| " * (3 + len(kinds) + len(reports)) + "|")  # fmt: skip
            continue
        c = r["last_confidence"]
        lines.append(
            f"| {r['arm']} | {r['seed']} | {r['dispatch']} | {r['aurc']:.3f} | "
            f"{_signed(r['ranking_gain'])} | {r['ece']:.3f} | "
            + "".join(f"{_counts(c[k]['confidence_counts'])} ({c[k]['accuracy']:.2f}) | "
                      for k in kinds)
            + "".join(f"{r['aurc_if'].get(name, float('nan')):.3f} | " for name in reports)
            + f"{r['seconds']:.0f} |"
        )  # fmt: skip
    lines += ["", "**Sampled confidence per run** (mean parsed confidence of the training "
              "rollouts per kind, first 10 -> last 10 optimizer steps, from pools/)", "",
              "| arm | seed | " + " | ".join(kinds) + " |", "| --- " * (2 + len(kinds)) + "|"]  # fmt: skip
    for r in sorted((r for r in rows if "sampled_first_last" in r),
                    key=lambda r: (list(ARMS).index(r["arm"]), r["seed"])):  # fmt: skip
        means = r["sampled_first_last"]
        cells = [" -> ".join("–" if m is None else f"{m:.3f}" for m in means[k]) for k in kinds]
        lines.append(f"| {r['arm']} | {r['seed']} | " + " | ".join(cells) + " |")
    lines += _level_share_lines(rows)
    return "\n".join(lines) + "\n"


def _level_share_lines(rows: list[dict]) -> list[str]:
    """The table of ``sampled_level_shares`` per arm: each level's share of its tier's rollouts,
    mean over the arm's runs, first 10 -> last 10 optimizer steps (empty without such rows)."""
    done = [r for r in rows if r.get("sampled_level_shares")]
    if not done:
        return []
    cols = [(k, lv) for k, levels in done[0]["sampled_level_shares"].items() for lv in levels]
    lines = ["", "**Sampled confidence levels per tier** (share of the tier's training rollouts "
             "at each level, mean over the arm's runs, first 10 -> last 10 optimizer steps, "
             "from pools/)", "", "| arm | runs | " + " | ".join(f"{k} at {lv}" for k, lv in cols)
             + " |", "| --- " * (2 + len(cols)) + "|"]  # fmt: skip
    for arm in ARMS:
        mine = [r["sampled_level_shares"] for r in done if r["arm"] == arm]
        if not mine:
            continue
        cells = []
        for k, lv in cols:
            ends = [[m[k][lv][i] for m in mine if m[k][lv][i] is not None] for i in (0, 1)]
            cells.append(" -> ".join(f"{np.mean(e):.3f}" if e else "–" for e in ends))
        lines.append(f"| {arm} | {len(mine)} | " + " | ".join(cells) + " |")
    return lines


def _steps(tuning: dict) -> list[int]:
    return sorted({int(s) for c in tuning["choices"].values() for cv in c["curves"].values()
                   for s in cv})  # fmt: skip


def _write(out: Path, rows: list[dict], tuning: dict, meta: dict, arms: list[str]) -> str:
    summary = summarize(rows, arms)
    record = {"meta": meta, "tuning": tuning, "summary": summary, "runs": rows}
    tmp = out / "table.json.tmp"
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, out / "table.json")
    text = table_markdown(rows, summary, tuning, meta["recipe"])
    (out / "table.md").write_text(text)
    return text


def _ints(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9", help="test seeds")
    p.add_argument("--tune-seeds", default="100,101,102", help="validation seeds (tuning)")
    p.add_argument("--lrs", default="3e-4,1e-3,3e-3", help="learning rates tried per arm")
    p.add_argument("--max-steps", type=int, default=80, help="tuning runs' optimizer steps")
    p.add_argument("--every", type=int, default=10, help="steps between validation evaluations")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {list(ARMS)}")
    p.add_argument("--dispatches", default="default", help=f"comma list of {list(DISPATCHES)}")
    p.add_argument("--recipe", default="tiny", choices=sorted(RECIPES),
                   help="tiny (README command 1) or tiny-candidates (calibration vs ranking)")  # fmt: skip
    p.add_argument("--output-dir", default=None, help="default: <recipe>_study")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (one thread each)")
    p.add_argument("--table-only", action="store_true", help="tabulate the finished runs")
    args = p.parse_args(argv)
    args.arms = [a for a in args.arms.split(",") if a]
    args.dispatches = [d for d in args.dispatches.split(",") if d]
    for flag, given, known in (("--arms", args.arms, ARMS),
                               ("--dispatches", args.dispatches, DISPATCHES)):  # fmt: skip
        unknown = set(given) - set(known)
        if unknown or not given:
            p.error(f"{flag}: unknown or empty {sorted(unknown)}; known: {list(known)}")
    args.seeds, args.tune_seeds = _ints(args.seeds), _ints(args.tune_seeds)
    args.lrs = [float(x) for x in args.lrs.split(",") if x]
    if set(args.seeds) & set(args.tune_seeds):
        p.error("--seeds and --tune-seeds share seeds; the test seeds must not be tuned on")
    if args.max_steps < args.every or args.every < 1 or not args.lrs or args.jobs < 1:
        p.error("need --every >= 1, --max-steps >= --every, at least one --lrs, --jobs >= 1")
    out = Path(args.output_dir or f"{args.recipe}_study").absolute()
    out.mkdir(parents=True, exist_ok=True)
    tuning = tune(args, out)
    missing = [a for a, c in tuning["choices"].items() if c["lr"] is None]
    if missing:
        print(f"no finished tuning run for {missing}; those arms are left out of the test phase")
    rows = test_phase(args, out, tuning["choices"])
    meta = {"recipe": args.recipe, "seeds": args.seeds, "arms": {a: ARMS[a] for a in args.arms},
            "dispatches": args.dispatches, "machine": platform.machine(),
            "processor": platform.processor() or "unknown", "cpus": os.cpu_count(),
            "written": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "statistics": "rlsr compare's: t-interval over seeds, exact paired permutation "
                          "test, Holm"}  # fmt: skip
    text = _write(out, rows, tuning, meta, args.arms)
    print(text)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
