"""Orchestration of the CPU toy reproduction (``examples/toy/toy_repro.py`` is its command line).

Per seed: generate the task (``examples.toy.task``), warm up BASE from scratch (``examples.toy.warmup``,
cached by config hash), train every arm from the same BASE with identical budgets through the
real ``train.py recipe=toy method=...``, evaluate BASE and every arm on the held-out split with
the real ``rlsr evaluate`` (greedy), then ``rlsr report`` and a summary over seeds (mean and
95 % CI per row, paired RLSR - each arm: ``examples.toy.comparison``; mean ± std of every metric,
oracle AURC) with overlaid risk-coverage curves (docs/toy.md).

The pure parts (arm list, each arm's overrides, stage count, metric rows, the summary table) are
unit-tested in ``tests/test_toy_repro.py``; the rest launches the real commands.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from examples.toy.comparison import comparison, comparison_markdown
from examples.toy.task import VARIANT_TIERS, make_split, write_dataset_folder
from examples.toy.warmup import WarmupGateError, ensure_warmup, warmup_config
from rlsr.config.compose import compose_tree
from rlsr.evaluation.reports.plots import curve_steps
from rlsr.evaluation.run.samples_io import json_safe
from rlsr.evaluation.run.summary import scorer_arrays
from rlsr.method.run_plan import plan_from_config
from rlsr.metrics.selective import aurc, risk_coverage_curve
from rlsr.run.eval_protocol import EvalProtocol
from rlsr.run.run_layout import METRICS_FILE, PLOT_FILE, SAMPLES_FILE, SUMMARY_FILE

__all__ = [
    "ARMS",
    "DEFAULT_ARMS",
    "Arm",
    "METRICS",
    "REPO",
    "Progress",
    "arm_list",
    "arms_for",
    "stage_count",
    "train_overrides",
    "row_metrics",
    "mean_std",
    "summary_markdown",
    "run",
]

REPO = Path(__file__).resolve().parents[2]
METRICS = ("aurc", "accuracy", "acc@10", "acc@25", "acc@50", "ece", "confidence_gap")


# ----------------------------------------------------------------------------- progress


class Progress:
    """One line per stage with elapsed time; a live step counter while an arm trains."""

    def __init__(self, total_stages: int, quiet: bool = False):
        self.total, self.done, self.quiet, self.start = total_stages, 0, quiet, time.perf_counter()

    def elapsed(self) -> str:
        s = time.perf_counter() - self.start
        return f"{int(s // 60):d}:{int(s % 60):02d}"

    def stage(self, label: str) -> None:
        self.done += 1
        if not self.quiet:
            print(f"[{self.elapsed()}] ({self.done}/{self.total}) {label}", flush=True)

    def live(self, text: str) -> None:
        if not self.quiet and sys.stdout.isatty():
            print(f"\r    {text}\033[K", end="", flush=True)

    def end_live(self, text: str) -> None:
        if not self.quiet:
            if sys.stdout.isatty():
                print("\r\033[K", end="")
            print(f"    {text}", flush=True)


def _launch(args: list[str], log_path: Path, on_line=None) -> None:
    """Run ``train.py ARGS`` or ``rlsr ARGS`` with output to ``log_path``; raise on failure."""
    head, rest = args[0], args[1:]
    cmd = (
        [sys.executable, head, *rest]
        if head.endswith(".py")
        else [sys.executable, "-m", "rlsr.cli", *rest]
    )
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for line in proc.stdout:
            log.write(line)
            if on_line is not None:
                on_line(line)
        rc = proc.wait()
    if rc != 0:
        tail = log_path.read_text().splitlines()[-15:]
        raise RuntimeError(
            f"{' '.join(args[:3])} failed (exit {rc}); log {log_path}:\n" + "\n".join(tail)
        )


# ----------------------------------------------------------------------------- stages


def train_arm(
    args,
    arm: Arm,
    warm_dir: Path,
    data_dir: Path,
    out: Path,
    seed: int,
    progress: Progress,
) -> float:
    """``train.py recipe=toy method=...``; returns seconds. Skips a finished arm (resumable)."""
    name = arm.name
    if (out / "model.safetensors").is_file():
        progress.end_live(f"{name}: already trained, reused")
        return 0.0
    overrides = train_overrides(args, arm, warm_dir, data_dir, out, seed)
    logged = {"n": 0, "aurc": float("nan")}

    def on_line(line: str) -> None:
        if "'rlsr/aurc'" in line:
            logged["n"] += 1
            try:
                logged["aurc"] = float(line.split("'rlsr/aurc': '")[1].split("'")[0])
            except (IndexError, ValueError):
                pass
            progress.live(
                f"{name}: step {min(args.steps, logged['n'] * 10)}/{args.steps}  "
                f"train-pool AURC {logged['aurc']:.3f}"
            )

    start = time.perf_counter()
    _launch(["train.py", *overrides], out.with_suffix(".train.log"), on_line)
    seconds = time.perf_counter() - start
    progress.end_live(f"{name}: {args.steps} steps in {seconds:.0f} s ({train_note(arm, logged)})")
    return seconds


def train_note(arm: Arm, logged: dict) -> str:
    """What the end-of-training line says about the arm's training pools: the last logged
    train-pool AURC of a GRPO arm; an SFT arm trains on gold answers and has no pool (its
    ranking shows in the held-out evaluation only), so it gets no ``nan``."""
    if arm.sft:
        return "SFT trains on gold answers: no train pool, no train-pool AURC"
    return f"last train-pool AURC {logged['aurc']:.3f}"


def evaluate(model_dir: Path, data_dir: Path, out: Path, eval_args=()) -> dict:
    """``rlsr evaluate`` on the held-out split with the arm's protocol flags ``eval_args``
    (``toy_evaluate_args``); returns metrics.json."""
    metrics_path = out / "tiny@test" / METRICS_FILE
    if not metrics_path.is_file():
        _launch(
            [
                "rlsr", "evaluate", "--model", str(model_dir), "--tasks", "tiny",
                "--data-path", f"tiny={data_dir}", "--split", "test", "--output-dir", str(out),
                "--no-progress", *eval_args,
            ],
            out.with_suffix(".eval.log"),
        )  # fmt: skip
    return json.loads(metrics_path.read_text())


def train_then_evaluate(
    args,
    arm: Arm,
    warm_dir: Path,
    data_dir: Path,
    model_dir: Path,
    eval_dir: Path,
    seed: int,
    progress: Progress,
) -> tuple[float, dict]:
    """Train ``arm`` (BASE: nothing to train) and evaluate it; (training seconds, metrics)."""
    seconds = 0.0
    if arm.name != "base":
        seconds = train_arm(args, arm, warm_dir, data_dir, model_dir, seed, progress)
    return seconds, evaluate(model_dir, data_dir, eval_dir, arm.eval_args)


def row_metrics(metrics: dict, scorer_name: str = "verbalized") -> dict:
    """The table's metrics of one evaluated row, ranked by the scorer ``scorer_name``."""
    scorer = metrics["scorers"][scorer_name]
    return {
        "aurc": scorer["aurc"],
        "accuracy": metrics["accuracy"],
        "acc@10": scorer["acc@10"],
        "acc@25": scorer["acc@25"],
        "acc@50": scorer["acc@50"],
        "ece": scorer["ece"],
        "confidence_gap": scorer["confidence_gap"],
    }


def oracle_aurc(samples_path: Path) -> float:
    """AURC of the same answers ranked by the oracle (confidence = correctness)."""
    correct = [json.loads(line)["correct"] for line in samples_path.open()]
    correct = np.asarray(correct, dtype=bool)
    return float(aurc(correct.astype(float), correct))


def calibrated_aurc(samples_path: Path, p_correct: dict[str, float]) -> float:
    """AURC of the same answers ranked by the calibrated confidence ``P(correct | prompt)``
    (``p_correct[id]``, ``examples.toy.task.ToyExample.p_correct``): the best a calibrated model
    can rank them from the prompt alone."""
    recs = [json.loads(line) for line in samples_path.open()]
    conf = np.asarray([p_correct[r["id"]] for r in recs], dtype=float)
    return float(aurc(conf, np.asarray([r["correct"] for r in recs], dtype=bool)))


def two_level_aurc(samples_path: Path, p_correct: dict[str, float]) -> float:
    """AURC of the same answers ranked by the released lifted-AURC reward's per-completion best
    response (docs/methods.md, "What each reward teaches"): every prompt with P(correct) > 1/2
    tied at the top, every other prompt tied at the bottom."""
    recs = [json.loads(line) for line in samples_path.open()]
    conf = np.asarray([float(p_correct[r["id"]] > 0.5) for r in recs], dtype=float)
    return float(aurc(conf, np.asarray([r["correct"] for r in recs], dtype=bool)))


def confidence_by_tier(samples_path: Path, p_correct: dict[str, float]) -> dict[str, dict]:
    """Per tier (``P(correct | prompt)``, as text): the greedy verbalized confidences the model
    stated, counted (``{"0.9": 91}``; an unparsed confidence counts as ``"none"``), and their mean."""
    by_tier: dict[str, list] = {}
    for line in samples_path.open():
        rec = json.loads(line)
        by_tier.setdefault(f"{p_correct[rec['id']]:.1f}", []).append(rec["confidence"])
    out = {}
    for tier in sorted(by_tier, reverse=True):
        values = by_tier[tier]
        stated = [v for v in values if v is not None]
        counts: dict[str, int] = {}
        for v in values:
            key = "none" if v is None else f"{v:.1f}"
            counts[key] = counts.get(key, 0) + 1
        out[tier] = {
            "n": len(values),
            "mean": float(np.mean(stated)) if stated else float("nan"),
            "counts": dict(sorted(counts.items(), reverse=True)),
        }
    return out


def tier_table(rows, tiers_seen: dict[str, list[dict]]) -> list[str]:
    """Markdown lines: mean greedy confidence per tier (mean over seeds of the per-seed means;
    seeds that stated none for a tier are left out and counted) for every row, then each row's
    per-seed counts."""
    tiers = sorted({t for r in rows for seed in tiers_seen[r] for t in seed}, reverse=True)
    lines = [
        "Greedy confidence per tier (mean over held-out prompts, then over seeds):",
        "",
        "| row | " + " | ".join(f"p = {t}" for t in tiers) + " |",
        "| --- |" + " --- |" * len(tiers),
    ]
    for r in rows:
        cells = []
        for t in tiers:  # a seed that stated no confidence for a tier has no mean there
            means = [seed[t]["mean"] for seed in tiers_seen[r] if t in seed]
            stated = [m for m in means if not np.isnan(m)]
            cell = mean_std(stated) if stated else "none stated"
            if stated and len(stated) < len(means):
                cell += f" ({len(stated)} of {len(means)} seeds)"
            cells.append(cell)
        lines.append(f"| {r.upper()} | " + " | ".join(cells) + " |")
    lines += ["", "Stated confidences per tier and seed (confidence: count):", ""]
    for r in rows:
        per_seed = [
            "; ".join(
                f"p={t}: " + ", ".join(f"{c}x{n}" for c, n in seed[t]["counts"].items())
                for t in tiers
                if t in seed
            )
            for seed in tiers_seen[r]
        ]
        lines.append(f"- {r.upper()}: " + " | ".join(per_seed))
    return lines + [""]


def mean_std(values: list[float]) -> str:
    arr = np.asarray(values, dtype=float)
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return f"{arr.mean():.3f} ± {std:.3f}"


# ----------------------------------------------------------------------------- main


# The toy table's variant of the run's protocol (recipes/recipe/toy.yaml heldout.variants.toy)
TOY_VARIANT = "toy"


@functools.cache
def _toy_plan(method: str):
    """The run plan of ``train.py recipe=toy method=METHOD`` (``rlsr.method.run_plan.plan_from_config``),
    read for its fields: the warm-up model and the data folder are placeholders here."""
    overrides = ["recipe=toy", "model.name_or_path=BASE", "data.path=DATA"]
    tree = compose_tree(overrides + ([f"method={method}"] if method else []))
    return plan_from_config(tree, world_size=1, here=False)


def toy_protocol(method: str) -> EvalProtocol:
    """How the toy evaluates METHOD's models: the run plan's protocol of ``train.py recipe=toy
    method=METHOD`` (``RunPlan.protocol``, the one the held-out steps, train.py's printed
    command and Slurm's evaluations use: greedy, the trained 12-token budget, a method file's
    ``method.evaluate``) with the recipe's ``toy`` variant on top (no fallbacks, no bootstrap, one
    batch). ``""`` (BASE, not trained): the recipe's default method."""
    return _toy_plan(method).protocol(TOY_VARIANT)


def toy_evaluate_args(method: str) -> tuple[str, ...]:
    """The ``rlsr evaluate`` flags of ``toy_protocol(method)`` and the variant's name (run.json)."""
    return tuple(_toy_plan(method).evaluate_flags(TOY_VARIANT))


@dataclass(frozen=True)
class Arm:
    """One row of the toy table trained from BASE: ``train.py recipe=toy method=METHOD`` plus the
    arm's own ``overrides`` (applied last), evaluated as its method file says
    (``eval_args``, ``toy_evaluate_args``) and ranked by ``scorer`` (the first of those
    ``--scorers``, else the verbalized confidence: the metrics.json scorer its row reports).
    ``sft``: the method trains with TRL's SFTTrainer, so the run's budget also goes to the
    ``sft`` section (``train_overrides``)."""

    name: str
    method: str
    overrides: tuple[str, ...] = ()
    sft: bool = False

    @property
    def eval_args(self) -> tuple[str, ...]:
        return toy_evaluate_args(self.method)

    @property
    def scorer(self) -> str:
        """The primary scorer of the arm's protocol (its method file's ``method.evaluate``)."""
        return toy_protocol(self.method).scorers[0]


# Every arm of the toy table, by row name. Each GRPO arm gets the run's budget (steps, lr, G,
# prompts per step) from ``train_overrides``; the overrides here only change what the arm is.
ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm("rlvr", "rlvr"),
        Arm("rlcr", "rlcr"),
        # RLCR's reward with GRPO's std normalisation (TRL's default); rlcr above follows RLCR's
        # and the RLSR authors' configs (scale_rewards none, the toy recipe's default).
        Arm("rlcr-stdnorm", "rlcr", ("grpo.scale_rewards=group",)),
        Arm("rlsr", "rlsr"),
        Arm("rlsr-plain-aurc", "rlsr-plain-aurc"),  # Sec. C.7 ablation: correct_scale 0
        # Sec. D.4 / Tab. 7: the pool ranked by the answer's length-normalised log-probability;
        # evaluated by the same quantity (recipes/method/rlsr-logprob.yaml method.evaluate).
        Arm("rlsr-logprob", "rlsr-logprob"),
        # Sec. D.3 / Tab. 6: SFT on (question, answer) pairs, plain answers ranked by the agreement
        # of K = 8 samples at T = 0.7, 64 tokens (recipes/method/sft.yaml method.evaluate).
        Arm("sft-sc", "sft", sft=True),
        # Ours, not the paper's: marginal credit for the pooled lifted AURC (docs/methods.md,
        # "What each reward teaches"). Not in the default demo (its time budget); --methods.
        Arm("rlsr-marginal", "rlsr-marginal"),
    )
}
DEFAULT_ARMS: tuple[str, ...] = tuple(name for name in ARMS if name != "rlsr-marginal")


def arm_list(
    methods: str, generations: int, pool_sizes: str | None = None, std_norm: bool = False
) -> list[Arm]:
    """The arms of a run: the named arms (comma list of ``ARMS`` keys), then the ablation
    arms: one RLSR arm per pool size B (``pool_sizes``, comma list; B x G completions per pool)
    and, with ``std_norm``, RLSR with GRPO's std normalisation (``scale_rewards=group``)."""
    names = [m for m in methods.split(",") if m]
    unknown = [m for m in names if m not in ARMS]
    if unknown:
        raise ValueError(f"--methods: unknown arm {unknown[0]!r}; choose from {', '.join(ARMS)}.")
    arms = [ARMS[m] for m in names]
    if pool_sizes:
        for b in [int(x) for x in pool_sizes.split(",")]:
            pool = b * generations
            arms.append(Arm(f"rlsr-B{b}", "rlsr", (f"grpo.per_device_train_batch_size={pool}",)))
    if std_norm:
        arms.append(Arm("rlsr-stdnorm", "rlsr", ("grpo.scale_rewards=group",)))
    return arms


def arms_for(args) -> list[Arm]:
    """``arm_list`` of the command-line options ``args``."""
    return arm_list(args.methods, args.generations, args.pool_sizes, args.std_norm)


def stage_count(n_seeds: int, n_arms: int) -> int:
    """Progress stages of a run: per seed data + warm-up + report, one per arm trained, one per
    row evaluated (BASE + arms); then the summary."""
    return n_seeds * (3 + n_arms + (1 + n_arms)) + 1


def train_overrides(args, arm: Arm, warm_dir, data_dir, out, seed: int) -> list[str]:
    """``train.py`` overrides of one arm: ``recipe=toy method=...`` with the run's budget (every
    arm the same: steps, lr, G, pool = prompts per step x G), then ``--override`` and the arm's own
    extra overrides (last wins)."""
    pool = args.prompts_per_step * args.generations
    # An SFT arm trains with the sft section: the GRPO arms' optimizer steps, prompts per step
    # and constant learning rate, one gold answer per prompt instead of G rollouts.
    sft_budget = (
        [
            f"sft.learning_rate={args.learning_rate}",
            f"sft.per_device_train_batch_size={args.prompts_per_step}",
            "sft.gradient_accumulation_steps=1",
            "sft.lr_scheduler_type=constant",
            "sft.warmup_steps=0",
            "sft.save_strategy=no",
        ]
        if arm.sft
        else []
    )
    return [
        "recipe=toy",
        f"method={arm.method}",
        f"model.name_or_path={warm_dir}",
        f"data.path={data_dir}",
        f"output_dir={out}",
        f"seed={seed}",
        "resume=never",
        f"grpo.max_steps={args.steps}",
        f"grpo.learning_rate={args.learning_rate}",
        f"grpo.num_generations={args.generations}",
        f"grpo.per_device_train_batch_size={pool}",
        "grpo.logging_steps=10",
        *sft_budget,
        *args.override,
        *arm.overrides,
    ]


def run(args) -> int:
    """The whole reproduction for the command-line options ``args`` (examples/toy/toy_repro.py)."""
    seeds = [int(s) for s in args.seeds.split(",")]
    root = Path(args.output_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    arms = arms_for(args)
    rows = ["base", *[arm.name for arm in arms]]
    by_row = {"base": Arm("base", ""), **{arm.name: arm for arm in arms}}
    progress = Progress(stage_count(len(seeds), len(arms)), args.quiet)
    results: dict[str, dict[str, list]] = {r: {m: [] for m in METRICS} for r in rows}
    oracle: list[float] = []
    calibrated: list[float] = []
    two_level: list[float] = []
    tiers_seen: dict[str, list[dict]] = {r: [] for r in rows}
    timings: dict[str, list[float]] = {}
    stopped: dict[int, str] = {}
    start = time.perf_counter()
    for seed in seeds:
        run = root / f"{args.variant}-seed{seed}"
        data_dir = write_dataset_folder(
            run / "data", args.variant, seed, n_train=args.n_train, n_heldout=args.n_heldout
        )
        progress.stage(f"seed {seed}: data written to {data_dir}")
        t0 = time.perf_counter()
        warm_cfg = warmup_config(args.variant, seed, args.warmup_steps)
        try:
            warm_dir, summary = ensure_warmup(warm_cfg, args.cache_dir)
        except WarmupGateError as err:  # no arm trains on a broken BASE; the other seeds go on
            stopped[seed] = str(err)
            progress.stage(f"seed {seed}: stopped: {err}")
            continue
        timings.setdefault("warmup", []).append(time.perf_counter() - t0)
        progress.stage(
            f"seed {seed}: BASE warm-up {warm_dir.name}: format {summary['format_rate']:.2f}, "
            f"acc(fact present) {summary['accuracy_present']:.2f}, "
            f"acc(missing) {summary['accuracy_missing']:.2f}, "
            f"gate passed after {summary['extensions']} extension(s)"
        )
        eval_dirs = {name: run / "eval" / name for name in rows}
        model_dirs = {"base": warm_dir, **{arm.name: run / "arms" / arm.name for arm in arms}}

        # Each arm is an independent single-threaded process (OMP_NUM_THREADS=1), so arms run
        # side by side on a multi-core machine without changing any result; each arm's
        # evaluation follows its training in the same worker.
        with ThreadPoolExecutor(max_workers=max(1, args.jobs or len(rows))) as executor:
            futures = {
                name: executor.submit(
                    train_then_evaluate,
                    args,
                    by_row[name],
                    warm_dir,
                    data_dir,
                    model_dirs[name],
                    eval_dirs[name],
                    seed,
                    progress,
                )  # fmt: skip
                for name in rows
            }
            for name in rows:
                seconds, metrics = futures[name].result()
                if name != "base":
                    timings.setdefault(name, []).append(seconds)
                    progress.stage(f"seed {seed}: trained {name}")
                row = row_metrics(metrics, by_row[name].scorer)
                for key, value in row.items():
                    results[name][key].append(value)
                progress.stage(
                    f"seed {seed}: evaluated {name}: AURC {row['aurc']:.3f}"
                    f", accuracy {row['accuracy']:.3f}"
                )
        ref = eval_dirs["rlsr" if "rlsr" in eval_dirs else "base"] / "tiny@test" / SAMPLES_FILE
        oracle.append(oracle_aurc(ref))
        heldout = make_split(args.variant, "heldout", args.n_heldout, seed)
        p_correct = {ex.id: ex.p_correct for ex in heldout}
        calibrated.append(calibrated_aurc(ref, p_correct))
        if args.variant in VARIANT_TIERS:
            two_level.append(two_level_aurc(ref, p_correct))
            for name in rows:
                samples = eval_dirs[name] / "tiny@test" / SAMPLES_FILE
                tiers_seen[name].append(confidence_by_tier(samples, p_correct))
        report_out = run / "report"
        _launch(
            ["rlsr", "report", *[str(eval_dirs[r]) for r in rows], "--output-dir", str(report_out),
             *[x for r in rows for x in ("--label", f"{r.upper()}={eval_dirs[r]}")]],
            run / "report.log",
        )  # fmt: skip
        progress.stage(f"seed {seed}: rlsr report -> {report_out}")
    total = time.perf_counter() - start
    done = [s for s in seeds if s not in stopped]
    if done:
        tiers = (two_level, tiers_seen) if args.variant in VARIANT_TIERS else None
        write_summary(root, args, done, rows, results, oracle, timings, total, calibrated, tiers)
        progress.stage(f"summary -> {root / 'summary.md'}")
        print((root / "summary.md").read_text())
    for seed, reason in stopped.items():
        print(f"seed {seed} stopped before training any arm: {reason}", file=sys.stderr)
    return 1 if stopped else 0


def summary_markdown(
    args,
    seeds,
    rows,
    results,
    oracle,
    timings,
    total,
    load=None,
    calibrated=None,
    tiers=None,
    comp=None,
) -> str:
    """The summary: the comparison over seeds (``examples.toy.comparison``: mean and 95 % CI of
    AURC, ranking gain and AURC drop per row, paired RLSR - each arm), then the table of every
    metric (mean ± std over seeds), oracle and calibrated-ranking AURC, per-seed AURC and
    timings. ``results[row][metric]`` holds one value per seed; ``load``: the load average to
    report (default ``os.getloadavg()``); ``tiers``: on a tier variant, ``(two-level AURC per
    seed, confidence_by_tier per row and seed)``; ``comp``: the comparison if already computed
    (``examples.toy.comparison.comparison`` of the same results)."""
    load = os.getloadavg() if load is None else load
    comp = comparison(seeds, rows, results) if comp is None else comp
    lines = [
        f"# Toy reproduction ({args.variant}, seeds {','.join(map(str, seeds))}, "
        f"{args.steps} steps x {args.prompts_per_step} prompts x {args.generations}, "
        f"lr {args.learning_rate})",
        "",
        "Held-out split, greedy decoding.",
        "",
        *comparison_markdown(comp),
        "Every metric, mean ± std over seeds (std 0 for one seed):",
        "",
        "| row | " + " | ".join(METRICS) + " |",
        "| --- |" + " --- |" * len(METRICS),
    ]
    for r in rows:
        lines.append(
            f"| {r.upper()} | " + " | ".join(mean_std(results[r][m]) for m in METRICS) + " |"
        )
    lines += [
        "",
        f"Oracle AURC (same answers as RLSR, ranked by correctness): {mean_std(oracle)}",
        "",
    ]
    if calibrated:
        lines += [
            "Calibrated-ranking AURC (same answers as RLSR, ranked by P(correct | prompt)): "
            f"{mean_std(calibrated)}",
            "",
        ]
    if tiers:
        two_level, tiers_seen = tiers
        lines += [
            "Two-level AURC (same answers as RLSR; P(correct) > 1/2 tied at the top, the rest "
            f"tied at the bottom: the released reward's best response): {mean_std(two_level)}",
            "",
            *tier_table(rows, tiers_seen),
        ]
    lines.append(
        "Per-seed AURC: "
        + "; ".join(
            f"{r.upper()} " + ", ".join(f"{v:.3f}" for v in results[r]["aurc"]) for r in rows
        )
    )
    lines.append("")
    lines.append(
        "Seconds per arm (training only, mean): "
        + ", ".join(f"{k} {np.mean(v):.0f}" for k, v in timings.items())
    )
    lines.append(
        f"Total wall time: {total:.0f} s; load average at end: "
        f"{', '.join(f'{x:.1f}' for x in load)} on {os.cpu_count()} CPUs."
    )
    return "\n".join(lines) + "\n"


def write_summary(
    root, args, seeds, rows, results, oracle, timings, total, calibrated, tiers=None
) -> None:
    """``root/summary.md``, ``summary.json`` and ``risk_coverage.png``."""
    comp = comparison(seeds, rows, results)
    (root / SUMMARY_FILE).with_suffix(".md").write_text(
        summary_markdown(
            args, seeds, rows, results, oracle, timings, total, None, calibrated, tiers, comp
        )
    )
    (root / SUMMARY_FILE).write_text(
        json.dumps(
            {
                "args": vars(args),
                "seeds": seeds,
                "results": results,
                "comparison": json_safe(comp),
                "oracle_aurc": oracle,
                "calibrated_aurc": calibrated,
                "two_level_aurc": tiers[0] if tiers else None,
                "confidence_by_tier": tiers[1] if tiers else None,
                "timings": timings,
                "total_seconds": total,
            },
            indent=2,
        )
    )
    by_row = {"base": Arm("base", ""), **{arm.name: arm for arm in arms_for(args)}}
    plot_overlay(root, args.variant, seeds, {r: by_row[r].scorer for r in rows})


# Line styles and markers of the summary plot, cycled at different lengths (4 and 8): the first
# 8 rows get 8 distinct pairs, so rows with equal curves (e.g. several constant confidences at
# one error rate) stay distinguishable where their lines lie on each other.
_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def overlay_figure(curves: dict[str, tuple[np.ndarray, np.ndarray]], title: str):
    """The summary plot (not saved): per row ``curves[name] = (confidence, correct)`` its
    risk-coverage step curve (``rlsr.evaluation.reports.plots.curve_steps``: each tie group's risk over
    the coverage it adds, from coverage 0), in its own colour, line style and markers, labelled
    with the row's AURC; a row whose confidence is one value (it does not rank) is a flat line
    at its error rate across all coverages, marked so in the legend."""
    import matplotlib  # heavy optional dependency: only when the summary is plotted

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for i, (name, (conf, ok)) in enumerate(curves.items()):
        curve = risk_coverage_curve(conf, ok)
        x, y = curve_steps(curve)
        flat = " (one confidence: no ranking)" if len(curve.coverage) == 1 else ""
        ax.step(
            x, y, where="pre", color=f"C{i % 10}", linestyle=_LINESTYLES[i % len(_LINESTYLES)],
            marker=_MARKERS[i % len(_MARKERS)], markersize=5, alpha=0.85,
            label=f"{name.upper()} (AURC {aurc(conf, ok):.3f}){flat}",
        )  # fmt: skip
    ax.set(xlim=(0, 1.02), ylim=(-0.02, 1.02), title=title, xlabel="coverage")
    ax.set_ylabel("risk (error rate of the most confident)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_overlay(root: Path, variant: str, seeds, scorers: dict[str, str]) -> None:
    """Risk-coverage curves of every row (first seed) in one PNG, ``root/risk_coverage.png``:
    ``overlay_figure`` of each row's held-out samples ranked by its scorer (``scorers[row]``,
    the one its table row reports), titled with the toy task."""
    import matplotlib.pyplot as plt  # heavy optional dependency (overlay_figure selects Agg)

    seed = seeds[0]
    run = next(iter(root.glob(f"*-seed{seed}")))
    curves = {}
    for row, scorer in scorers.items():
        records = [json.loads(x) for x in (run / "eval" / row / "tiny@test" / SAMPLES_FILE).open()]
        conf, ok, _ = scorer_arrays(records, scorer)
        curves[row] = (conf, ok)
    title = f"toy task {variant}: held-out risk-coverage, seed {seed}"
    fig = overlay_figure(curves, title)
    fig.savefig(root / PLOT_FILE, dpi=120)
    plt.close(fig)
