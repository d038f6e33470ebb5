#!/usr/bin/env python
"""README command 1 over seeds, four arms: does RLSR rank better than RLCR and RLVR on recipe=tiny?

    python tools/tiny/seeds.py                                 # 4 arms x seeds 0-9 and 42, one at a time
    python tools/tiny/seeds.py --seeds 0,1,2 --output-dir /work/tiny_evidence
    python tools/tiny/seeds.py --arms rlsr,rlvr --dispatches scalar   # portable kernels
    python tools/tiny/seeds.py --recipe tiny-candidates --output-dir candidates_runs

Each run is the real command 1 (``train.py recipe=R seed=S`` + the arm's overrides, one
process, OMP_NUM_THREADS=1; ``--recipe``: ``tiny``, README command 1, or ``tiny-candidates``, where
calibration and ranking want different confidences) for the arms of ``ARMS``: RLSR; RLCR as the
paper runs it (``method=rlcr``, ``scale_rewards: none``); RLCR with GRPO's group std
normalisation (``grpo.scale_rewards=group``, TRL's default; the toy's ``rlcr-stdnorm``,
docs/toy.md; recorded as ``method.label=rlcr-stdnorm`` so ``rlsr compare`` keeps it apart from
RLCR); RLVR (its reward never reads the confidence). An output folder holds one recipe's runs:
a finished run of another recipe there is refused. Every arm runs on the same seeds; runs go seed by seed (all
arms of seed 0, then seed 1, ...) so a stopped sweep leaves the same seeds on every arm, and a run
folder holding a finished history is reused when the command is re-run. ``--dispatches`` also runs
under ``ATEN_CPU_CAPABILITY`` (another machine's float rounding; ``scalar`` = the portable kernels).

From each run's held-out history (``eval/``, greedy on the test split) it reads the AURC, error
rate and ranking gain (error rate - AURC, ``rlsr.metrics.selective.ranking_gain_from_aurc``) at the first
and last evaluated step, and from the last step's samples the greedy confidence per kind of
question (``RECIPES``: listed fact / ``Facts: none.`` for tiny, the four tiers for tiny-candidates). Per arm: mean and 95 % interval over seeds of the
last ranking gain and of the AURC drop (first - last); per other arm: the paired difference
RLSR - arm on the seeds both finished, its interval, Holm-adjusted exact paired p and verdict, all
computed by ``rlsr compare``'s own functions (``rlsr.evaluation.comparison.compare``). Writes ``OUT/table.md`` (docs/results.md's tables) and ``OUT/table.json`` after every run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
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
from rlsr.run.run_layout import EVAL_DIR, SAMPLES_FILE, STEP_PREFIX, pool_path, pool_steps  # noqa: E402
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


def _listed_or_missing(question: str) -> str:
    return "missing" if "Facts: none." in question else "listed"


# --recipe -> the held-out dataset it evaluates, the kind of each of its questions (the
# confidence columns of the per-run table, in this order) and, where the rewards' best reports
# differ, each report as one confidence per kind: the table adds the AURC a run's own last-step
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
# The table's two metrics: (key, heading, which direction is better), as rlsr compare's METRICS.
TABLE_METRICS = (("ranking_gain", "ranking gain", "higher"), ("aurc_drop", "AURC drop", "higher"))
# A row's key -> rlsr compare's name of the metric (which sets the range its interval is cut to).
STAT_KEY = {"gain_last": "ranking_gain", "aurc_drop": "aurc_drop"}
STATISTICS = Statistics()


def seed_ci(values, key: str = "gain_last") -> tuple[float, float]:
    """95 % interval of the mean over seeds, as ``rlsr compare`` computes it
    (``rlsr.evaluation.comparison.compare.seed_summary``: a t-interval, widened where some seeds are exactly
    0, cut to the metric's range); (nan, nan) for fewer than 2 values."""
    name = STAT_KEY[key]
    per_seed = {i: {name: float(v)} for i, v in enumerate(values)}
    low, high = seed_summary(per_seed, STATISTICS, [name])["ci95"][name]
    return low, high


def confidence_by_kind(samples_path: Path, recipe: str = "tiny") -> dict:
    """The greedy confidences at one evaluated step, per kind of question of ``recipe``
    (``RECIPES``; tiny: ``listed``, the asked fact is in the prompt, and ``missing``,
    ``Facts: none.``), as {value: count} and the accuracy. An unparsed confidence counts as
    ``none``."""
    out = {}
    rows = [json.loads(line) for line in samples_path.read_text().splitlines() if line.strip()]
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


def sampled_means(pools: Path, recipe: str, window: int = 10) -> dict[str, list[float | None]]:
    """Per kind of training prompt (``RECIPES``), the mean parsed confidence of the rollouts in
    the run's first and last ``window`` optimizer steps (``pools/step-N.jsonl``; a prompt's kind
    from its bundled train question, by ``prompt_id``): whether the sampled confidence moved at
    all, where the greedy one did not. None for a kind without a rollout in the window."""
    spec = RECIPES[recipe]
    train = FIXTURES_DIR / spec["dataset"] / "train.jsonl"
    kind_of_id = {row["id"]: spec["kind_of"](row["question"])
                  for row in map(json.loads, train.read_text().splitlines())}  # fmt: skip
    steps = sorted(pool_steps(pools.parent))
    out: dict[str, list[float | None]] = {kind: [] for kind in spec["kinds"]}
    for chosen in (steps[:window], steps[-window:]):
        confs: dict[str, list[float]] = {kind: [] for kind in spec["kinds"]}
        for step in chosen:
            for line in pool_path(pools.parent, step).read_text().splitlines():
                row = json.loads(line)
                if row.get("confidence") is not None:
                    confs[kind_of_id[row["prompt_id"]]].append(row["confidence"])
        for kind, values in confs.items():
            out[kind].append(sum(values) / len(values) if values else None)
    return out


def report_aurcs(samples_path: Path, recipe: str) -> dict[str, float]:
    """Per report of ``RECIPES[recipe]["reports"]``: the AURC (``rlsr.metrics.selective.aurc``, ties as the
    expectation over their orderings) of the samples' own answers (``correct``) had each question
    been given its kind's confidence under that report. Separates what a run's ranking earns
    from what its accuracy does: a run that learnt report X has the AURC ``X`` gives its
    answers."""
    rows = [json.loads(line) for line in samples_path.read_text().splitlines() if line.strip()]
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


def _run(
    arm: str, seed: int, dispatch: str, out: Path, *, train: bool = True, recipe: str = "tiny"
) -> dict | None:
    """The row of one run, training it first unless its folder holds a finished one (None when
    it does not and ``train`` is off). A finished run of another recipe raises ``SystemExit``."""
    folder = out / f"{arm}-{dispatch}-seed{seed}"
    done = folder / "wall.json"
    dataset = RECIPES[recipe]["dataset"]
    if not done.is_file() and not train:
        return None
    recorded = _recorded_recipe(folder) if done.is_file() else None
    if recorded is not None and recorded != recipe:
        raise SystemExit(
            f"--recipe {recipe}: {folder} holds a finished recipe={recorded} run; give another "
            "--output-dir (one folder per recipe)."
        )
    if not done.is_file():
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        env.pop("ATEN_CPU_CAPABILITY", None)
        if dispatch != "default":
            env["ATEN_CPU_CAPABILITY"] = DISPATCHES[dispatch]
        cmd = [sys.executable, str(REPO / "train.py"), f"recipe={recipe}", *ARMS[arm],
               f"seed={seed}", f"output_dir={folder}", "resume=never", "grpo.disable_tqdm=true"]  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(folder.with_suffix(".log"), "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        seconds = time.perf_counter() - t0
        if rc.returncode != 0:
            return {"arm": arm, "seed": seed, "dispatch": dispatch, "error": rc.returncode,
                    "log": str(folder.with_suffix(".log"))}  # fmt: skip
        done.write_text(json.dumps({"seconds": seconds, "load": os.getloadavg()}))
    wall = json.loads(done.read_text())
    history = sorted(
        (h for h in read_history(folder) if "failed" not in h and h["dataset"] == dataset),
        key=lambda h: h["step"],
    )
    first, last = history[0], history[-1]
    row = {"arm": arm, "seed": seed, "dispatch": dispatch,
           "first_step": first["step"], "last_step": last["step"],
           "aurc_first": first["aurc"], "aurc_last": last["aurc"],
           "aurc_drop": first["aurc"] - last["aurc"],
           "error_first": 1 - first["accuracy"], "error_last": 1 - last["accuracy"],
           "gain_first": ranking_gain_from_aurc(first["aurc"], 1 - first["accuracy"]),
           "gain_last": ranking_gain_from_aurc(last["aurc"], 1 - last["accuracy"]),
           "format_last": last["format_rate"], "seconds": wall["seconds"],
           "load_1min_at_end": wall["load"][0]}  # fmt: skip
    samples = folder / EVAL_DIR / f"{STEP_PREFIX}{last['step']}" / dataset / SAMPLES_FILE
    row["last_confidence"] = confidence_by_kind(samples, recipe)
    row["last_aurc_if"] = report_aurcs(samples, recipe)
    row["sampled_confidence_first_last"] = sampled_means(folder / "pools", recipe)
    return row


def summarize(
    rows: list[dict], arms: list[str], reference: str = "rlsr", margin: float | None = None
) -> dict:
    """Per (dispatch, arm): the seeds, mean and 95 % interval of ``gain_last`` and ``aurc_drop``;
    per (dispatch, other arm): the paired difference ``reference`` - arm on the seeds both have,
    with ``rlsr compare``'s exact paired test, Holm-adjusted p (one family per dispatch) and
    verdict (docs/compare.md, "Intervals, tests and verdicts")."""
    names = [k for k, _, _ in TABLE_METRICS]
    ok = [r for r in rows if "error" not in r]
    out = {}
    for dispatch in sorted({r["dispatch"] for r in ok}):
        by_arm = {a: {r["seed"]: r for r in ok if r["arm"] == a and r["dispatch"] == dispatch}
                  for a in arms}  # fmt: skip
        per_arm, paired, entries = {}, {}, []
        for arm, runs in by_arm.items():
            seeds = sorted(runs)
            per_seed = {s: {STAT_KEY[k]: runs[s][k] for k in STAT_KEY} for s in seeds}
            stat = seed_summary(per_seed, STATISTICS, names)
            per_arm[arm] = {"seeds": seeds}
            for key, name in STAT_KEY.items():
                mean = stat["mean"][name] if seeds else float("nan")
                per_arm[arm][key] = {"mean": mean, "ci95": tuple(stat["ci95"][name])}
        if reference in by_arm:
            for arm in arms:
                if arm == reference:
                    continue
                shared = sorted(set(by_arm[reference]) & set(by_arm[arm]))
                diffs = {s: {n: by_arm[reference][s][k] - by_arm[arm][s][k]
                             for k, n in STAT_KEY.items()} for s in shared}  # fmt: skip
                entry = paired_summary(diffs, STATISTICS, names)
                entries.append((reference, arm, entry))
                paired[arm] = {"seeds": shared, "entry": entry}
            add_verdicts(entries, TABLE_METRICS, margin)
            for pair in paired.values():
                entry = pair.pop("entry")
                for key, name in STAT_KEY.items():
                    pair[key] = {
                        "mean": entry["mean"][name] if pair["seeds"] else float("nan"),
                        "ci95": tuple(entry["ci95"][name]),
                        "p_adjusted": entry["p_adjusted"][name],
                        "verdict": entry["verdict"][name],
                    }
        out[dispatch] = {"arms": per_arm, "paired": paired}
    return out


def _signed(value: float) -> str:
    """``value`` as +0.123; float noise around 0 (-1e-16) prints +0.000."""
    return f"{round(value, 3) + 0.0:+.3f}"


def _ci(stat: dict) -> str:
    """``mean [lo, hi]``; without runs "–", with one seed the mean alone (no CI)."""
    lo, hi = stat["ci95"]
    if np.isnan(stat["mean"]):
        return "–"
    return _signed(stat["mean"]) + ("" if np.isnan(lo) else f" [{_signed(lo)}, {_signed(hi)}]")


def _tested(stat: dict) -> str:
    """``mean [lo, hi], p=…, verdict`` of one paired difference."""
    if np.isnan(stat["mean"]):
        return "–"
    p = stat["p_adjusted"]
    return f"{_ci(stat)}, p={'n/a' if np.isnan(p) else f'{p:.3f}'}, {stat['verdict']}"


def _counts(counts: dict) -> str:
    return " ".join(f"{v}:{n}" for v, n in counts.items())


def table_markdown(
    rows: list[dict], summary: dict, reference: str = "rlsr", recipe: str = "tiny"
) -> str:
    dataset, kinds = RECIPES[recipe]["dataset"], RECIPES[recipe]["kinds"]
    reports = RECIPES[recipe]["reports"]
    lines = []
    for dispatch, block in summary.items():
        lines += [f"**Per arm** (dispatch {dispatch}; held-out {dataset} test, greedy, last "
                  "evaluated step; mean [95 % interval over seeds, as rlsr compare])", "",
                  "| arm | seeds | ranking gain | AURC drop (first - last) |",
                  "| --- | --- | --- | --- |"]  # fmt: skip
        for arm, stat in block["arms"].items():
            lines.append(f"| {arm} | {len(stat['seeds'])} | {_ci(stat['gain_last'])} | "
                         f"{_ci(stat['aurc_drop'])} |")  # fmt: skip
        lines += ["", f"**Paired difference {reference} - arm** (dispatch {dispatch}, seeds both "
                  "finished; mean [95 % interval]; Holm-adjusted exact p; verdict)", "",
                  "| arm | seeds | ranking gain | AURC drop |", "| --- | --- | --- | --- |"]  # fmt: skip
        for arm, stat in block["paired"].items():
            lines.append(f"| {arm} | {len(stat['seeds'])} | {_tested(stat['gain_last'])} | "
                         f"{_tested(stat['aurc_drop'])} |")  # fmt: skip
        lines.append("")
    lines += ["**Per run** (greedy confidence at the last step as value:count, per kind; "
              "accuracy per kind)", "",
              "| arm | seed | dispatch | AURC first -> last | error first -> last | "
              "ranking gain first -> last | format | "
              + "".join(f"{k} conf (acc) | " for k in kinds)
              + "".join(f"AURC if {name} | " for name in reports) + "wall s | load |",
              "| --- " * (9 + len(kinds) + len(reports)) + "|"]  # fmt: skip
    for r in sorted(rows, key=lambda r: (r["dispatch"], list(ARMS).index(r["arm"]), r["seed"])):
        if "error" in r:
            lines.append(f"| {r['arm']} | {r['seed']} | {r['dispatch']} | failed: {r['log']} "
                         + "| " * (6 + len(kinds) + len(reports)) + "|")  # fmt: skip
            continue
        c = r["last_confidence"]
        lines.append(
            f"| {r['arm']} | {r['seed']} | {r['dispatch']} | {r['aurc_first']:.3f} -> "
            f"{r['aurc_last']:.3f} | {r['error_first']:.2f} -> {r['error_last']:.2f} | "
            f"{_signed(r['gain_first'])} -> {_signed(r['gain_last'])} | {r['format_last']:.2f} | "
            + "".join(f"{_counts(c[k]['confidence_counts'])} ({c[k]['accuracy']:.2f}) | "
                      for k in kinds)
            + "".join(f"{r.get('last_aurc_if', {}).get(name, float('nan')):.3f} | "
                      for name in reports)
            + f"{r['seconds']:.0f} | {r['load_1min_at_end']:.1f} |"
        )  # fmt: skip
    sampled = [r for r in rows if "sampled_confidence_first_last" in r]
    if sampled:
        lines += ["", "**Sampled confidence per run** (mean parsed confidence of the training "
                  "rollouts per kind, first 10 -> last 10 optimizer steps, from pools/)", "",
                  "| arm | seed | " + " | ".join(kinds) + " |",
                  "| --- " * (2 + len(kinds)) + "|"]  # fmt: skip
        for r in sorted(sampled, key=lambda r: (list(ARMS).index(r["arm"]), r["seed"])):
            means = r["sampled_confidence_first_last"]
            cells = [" -> ".join("–" if m is None else f"{m:.3f}" for m in means[k])
                     for k in kinds]  # fmt: skip
            lines.append(f"| {r['arm']} | {r['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _write(out: Path, rows: list[dict], arms: list[str], meta: dict) -> str:
    summary = summarize(rows, arms)
    recipe = meta.get("recipe", "tiny")
    record = {"meta": meta, "summary": summary, "runs": rows}
    tmp = out / "table.json.tmp"
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, out / "table.json")
    text = table_markdown(rows, summary, recipe=recipe)
    (out / "table.md").write_text(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 0-9 and the recipe's own seed (42, what README command 1 runs)
    p.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9,42")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {list(ARMS)}")
    p.add_argument("--dispatches", default="default", help=f"comma list of {list(DISPATCHES)}")
    p.add_argument(
        "--recipe",
        default="tiny",
        choices=sorted(RECIPES),
        help="tiny (README command 1) or tiny-candidates (calibration vs ranking)",
    )
    p.add_argument(
        "--output-dir",
        default=None,
        help="default: tiny_runs (recipe tiny), tiny-candidates_runs (tiny-candidates)",
    )
    p.add_argument(
        "--table-only", action="store_true", help="tabulate the finished runs; train none"
    )
    args = p.parse_args(argv)
    out = Path(
        args.output_dir or ("tiny_runs" if args.recipe == "tiny" else f"{args.recipe}_runs")
    ).absolute()
    arms = [a for a in args.arms.split(",") if a]
    dispatches = [d for d in args.dispatches.split(",") if d]
    for flag, given, known in (("--arms", arms, ARMS), ("--dispatches", dispatches, DISPATCHES)):
        unknown = set(given) - set(known)
        if unknown or not given:
            p.error(f"{flag}: unknown or empty {sorted(unknown)}; known: {list(known)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    out.mkdir(parents=True, exist_ok=True)
    meta = {"recipe": args.recipe, "seeds": seeds, "arms": {a: ARMS[a] for a in arms},
            "dispatches": dispatches,
            "machine": platform.machine(), "processor": platform.processor() or "unknown",
            "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "statistics": "rlsr compare's: t-interval over seeds, exact paired permutation test, "
                          "Holm"}  # fmt: skip
    rows, text = [], ""
    for seed in seeds:  # seed-major: a stopped sweep leaves the same seeds on every arm
        for dispatch in dispatches:
            for arm in arms:
                row = _run(arm, seed, dispatch, out, train=not args.table_only, recipe=args.recipe)
                if row is not None:
                    rows.append(row)
                    text = _write(out, rows, arms, meta)
    print(text or f"no finished run in {out}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
