"""``rlsr compare``: methods across training seeds, from run folders built here in the layouts
train.py and ``rlsr evaluate`` write (samples through ``append_samples``, metrics.json through
``compute_metrics``, run.json with the fields their writers record). Checked: every number
against a computation by definition from the samples, the CI over seeds against the exact
bootstrap distribution, paired differences on shared seeds only, grouping by recorded config,
each refusal (one ``rlsr: error:`` line, exit 2, nothing written) and the atomic output.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlsr.cli import main as rlsr_main
from rlsr.data import version_records
from rlsr.evaluation.comparison import compare as compare_module
from rlsr.evaluation.comparison.compare import COMPARE_JSON, COMPARE_MD, COMPARE_PNG
from rlsr.evaluation.run.samples_io import append_samples
from rlsr.evaluation.run.summary import compute_metrics
from rlsr.metrics import selective as M
from rlsr.run.eval_protocol import EvalProtocol
from rlsr.run.run_layout import METRICS_FILE, RUN_FILE, SAMPLES_FILE, checkpoint_dir, step_dir

DATASET = "tiny-missing"
OUTPUTS = (COMPARE_JSON, COMPARE_MD, COMPARE_PNG)


# --------------------------------------------------------------------------- fixtures


def _records(answers, *, golds=None) -> list[dict]:
    """Samples of (confidence or None, correct) in the fields ``rlsr evaluate`` writes."""
    out = []
    for i, (conf, ok) in enumerate(answers):
        gold = (golds or {}).get(i, f"colour{i}")
        out.append({
            "id": f"{DATASET}-test-{i}", "dataset": DATASET, "question": f"question {i}?",
            "gold": gold, "golds": [gold], "answer": gold if ok else "other",
            "confidence": conf, "correct": bool(ok), "format_ok": True, "fallbacks": [],
            "verify_status": "ok", "scores": {"verbalized": conf},
        })  # fmt: skip
    return out


def _write_evaluation(out: Path, answers, run_record: dict, dataset: str = DATASET, golds=None):
    """``out/<dataset>/samples.jsonl``, metrics.json (the package's writers), ``out/run.json``."""
    folder = out / dataset
    folder.mkdir(parents=True, exist_ok=True)
    records = _records(answers, golds=golds)
    append_samples(folder / SAMPLES_FILE, records)
    metrics = compute_metrics(records, n_resamples=0)
    (folder / METRICS_FILE).write_text(json.dumps(metrics))
    (out / RUN_FILE).write_text(json.dumps(run_record))


def _settings(**protocol) -> dict:
    """The protocol fields the held-out evaluation records under run.json's ``settings``."""
    return {**EvalProtocol(**{"max_new_tokens": 32, **protocol}).values(), "progress": False}


def make_run(
    root: Path,
    name: str,
    *,
    method: str,
    seed: int,
    steps: dict[int, list],
    label: str | None = None,
    datasets=(DATASET,),
    protocol: dict | None = None,
    verifier: str = "exact_match",
    golds=None,
    config: dict | None = None,
) -> Path:
    """A train.py output dir: config.yaml and eval/step-N/<dataset>/ for every step."""
    run = root / name
    run.mkdir(parents=True)
    method_section = {"name": method, **({"label": label} if label else {})}
    cfg = {"output_dir": str(run), "seed": seed, "method": method_section,
           "grpo": {"learning_rate": 0.001}, **(config or {})}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    for step, answers in steps.items():
        record = {
            "model": "tiny-missing-warm", "adapter": None, "step": step,
            "backend": "transformers", "system_prompt": "simple", "datasets": list(datasets),
            "settings": _settings(**(protocol or {})),
            "versions": version_records({d: verifier for d in datasets}),
        }  # fmt: skip
        for dataset in datasets:
            _write_evaluation(step_dir(run, step), answers, record, dataset, golds=golds)
    return run


def _answers(confidences, correct):
    return list(zip(confidences, correct, strict=True))


# Ten questions, distinct confidences at bin centres (no tie, no ECE bin edge).
CONF = [0.95, 0.85, 0.75, 0.65, 0.55, 0.45, 0.35, 0.25, 0.15, 0.05]
FLAT = _answers([0.5] * 10, [1, 0, 1, 0, 1, 0, 1, 0, 1, 0])  # step 0: a constant confidence


def _correct(pattern: str) -> list[int]:
    return [int(c) for c in pattern]


def _compare(capsys, *args) -> tuple[int, str, str]:
    code = rlsr_main(["compare", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("rlsr: error: "), lines
    return lines[0]


# --------------------------------------------------------------------------- definitions


def _aurc_by_definition(conf, ok) -> float:
    """(1/n) sum_k R_k, R_k = error rate of the k most confident; a tie group cut at k counts
    its expected errors over the orderings of the group (the share k takes of it)."""
    conf, wrong = np.asarray(conf), 1 - np.asarray(ok, dtype=float)
    risks = []
    for k in range(1, len(conf) + 1):
        levels = sorted(set(conf), reverse=True)
        taken, errors = 0, 0.0
        for level in levels:
            group = wrong[conf == level]
            share = min(len(group), k - taken)
            errors += share / len(group) * group.sum()
            taken += share
            if taken == k:
                break
        risks.append(errors / k)
    return float(np.mean(risks))


def _ece_by_definition(conf, ok) -> float:
    """10 equal-width bins (no confidence on an edge here): sum |B|/n |acc_B - conf_B|."""
    conf, ok = np.asarray(conf), np.asarray(ok, dtype=float)
    total = 0.0
    for b in range(10):
        inside = (conf >= b / 10) & (conf < (b + 1) / 10)
        if inside.any():
            total += inside.sum() / len(conf) * abs(ok[inside].mean() - conf[inside].mean())
    return total


def _t_interval_by_hand(values, bounds=(0.0, 1.0)) -> list[float]:
    """mean ± t_{n-1, 0.975} s / √n with the t quantiles of a printed table (n = 2, 3 seeds);
    equal values v: v - q (v - lo), v + q (hi - v), q = 1 - 0.025^(1/n) (Clopper-Pearson); cut
    to the range [lo, hi]."""
    if max(values) - min(values) < 1e-12:
        q = 1 - 0.025 ** (1 / len(values))
        v = values[0]
        return [v - q * (v - bounds[0]), v + q * (bounds[1] - v)]
    quantile = {1: 12.706204736174707, 2: 4.302652729749464}[len(values) - 1]
    half = quantile * float(np.std(values, ddof=1)) / math.sqrt(len(values))
    mean = float(np.mean(values))
    return [max(mean - half, bounds[0]), min(mean + half, bounds[1])]


def _by_definition(conf, ok) -> dict[str, float]:
    aurc = _aurc_by_definition(conf, ok)
    accuracy = float(np.mean(ok))
    return {"aurc": aurc, "ranking_gain": (1 - accuracy) - aurc,
            "ece": _ece_by_definition(conf, ok), "accuracy": accuracy}  # fmt: skip


def test_bootstrap_mean_ci_matches_the_exact_bootstrap_distribution():
    """The CI over seeds is the percentile interval of the bootstrap distribution of the mean:
    with 5 values, all 5^5 equally likely resamples enumerated give the exact 2.5 / 97.5 %
    quantiles, which 200,000 seeded resamples must match closely (a CI of the values themselves,
    a std-based interval or a resample of the wrong size would not)."""
    values = np.array([0.10, 0.18, 0.21, 0.33, 0.47])
    means = np.array([values[list(idx)].mean() for idx in itertools.product(range(5), repeat=5)])
    exact = np.percentile(means, [2.5, 97.5])
    est = M.bootstrap_mean_ci(values, n_resamples=200_000, seed=3)
    assert est.estimate == pytest.approx(values.mean(), abs=1e-15)
    assert est.low == pytest.approx(exact[0], abs=0.004)
    assert est.high == pytest.approx(exact[1], abs=0.004)
    # not the 2.5 / 97.5 % quantiles of the values (a wider interval)
    assert est.high - est.low < 0.8 * (np.percentile(values, 97.5) - np.percentile(values, 2.5))


def test_bootstrap_mean_ci_is_seeded_and_undefined_for_one_value():
    """The same seed gives the same bounds (compare.json is reproducible); one value gives NaN
    bounds, not a zero-width interval that would read as certainty; equal values give [v, v];
    2 or 3 values give their range (the documented reading of a CI over few seeds)."""
    values = [0.21, 0.53, 0.12, 0.47, 0.38, 0.05, 0.66]
    assert M.bootstrap_mean_ci(values, seed=7) == M.bootstrap_mean_ci(values, seed=7)
    # 100 resamples of 7 distinct values: another seed moves the percentiles
    assert M.bootstrap_mean_ci(values, 100, seed=7) != M.bootstrap_mean_ci(values, 100, seed=8)
    one = M.bootstrap_mean_ci([0.3])
    assert one.estimate == 0.3 and math.isnan(one.low) and math.isnan(one.high)
    assert M.bootstrap_mean_ci([0.25, 0.25, 0.25])[1:] == (0.25, 0.25)
    # 2 or 3 seeds: the interval is their range, as docs/compare.md says (P = 1/4, 1/27)
    assert M.bootstrap_mean_ci([0.1, 0.4, 0.2])[1:] == pytest.approx((0.1, 0.4), abs=1e-12)
    assert M.bootstrap_mean_ci([0.3, 0.1])[1:] == pytest.approx((0.1, 0.3), abs=1e-12)


# --------------------------------------------------------------------------- numbers


# per (method, seed): correctness at the last step (step 20), confidences CONF
LAST = {
    ("rlsr", 1): "1111100000",  # seeds 1 and 4 (unshared) far from the rest
    ("rlsr", 2): "1101101000",
    ("rlsr", 3): "1110100100",
    ("rlcr", 2): "1010101010",
    ("rlcr", 3): "0110011001",
    ("rlcr", 4): "0000011111",
}


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Two methods x three seeds, seeds 2 and 3 shared, steps 0, 10, 20; folder names that
    say nothing true about method or seed (grouping must come from config.yaml)."""
    root = tmp_path / "runs"
    for k, ((method, seed), pattern) in enumerate(LAST.items()):
        mid = _answers(CONF, _correct(pattern[::-1]))
        last = _answers(CONF, _correct(pattern))
        make_run(root, f"job{k}-seed{99 - k}", method=method, seed=seed,
                 steps={0: FLAT, 10: mid, 20: last})  # fmt: skip
    return root


def test_values_equal_a_computation_by_definition_from_the_samples(sweep, tmp_path, capsys):
    """compare.json's per-seed AURC, ranking gain, ECE and accuracy at the first and last step
    equal their definitions computed here from the same answers (and metrics.json's AURC); the
    mean is the plain mean over seeds and the CI is bootstrap_mean_ci of those values; a value
    read from a wrong step, seed or scorer, or a re-implemented metric that differs, fails."""
    out = tmp_path / "cmp"
    code, stdout, err = _compare(capsys, sweep, "--output-dir", out)
    assert code == 0, err
    result = json.loads((out / COMPARE_JSON).read_text())
    block = result["datasets"][DATASET]
    assert (block["first_step"], block["last_step"]) == (0, 20)
    for method in ("rlsr", "rlcr"):
        entry = block["methods"][method]
        seeds = sorted(s for m, s in LAST if m == method)
        assert list(entry["seeds"]) == [str(s) for s in seeds]
        for seed in seeds:
            expected = _by_definition(CONF, _correct(LAST[(method, seed)]))
            assert entry["seeds"][str(seed)] == pytest.approx(expected, abs=1e-12)
            first = _by_definition([0.5] * 10, [a[1] for a in FLAT])
            assert entry["first"]["seeds"][str(seed)] == pytest.approx(first, abs=1e-12)
            assert first["ranking_gain"] == pytest.approx(
                0.0, abs=1e-12
            )  # a constant ranks nothing
        for key in ("aurc", "ranking_gain", "ece", "accuracy"):
            values = [entry["seeds"][str(s)][key] for s in seeds]
            assert entry["mean"][key] == pytest.approx(np.mean(values), abs=1e-12)
            bounds = (-1 / math.e, 1 / math.e) if key == "ranking_gain" else (0.0, 1.0)
            assert entry["ci95"][key] == pytest.approx(
                _t_interval_by_hand(values, bounds), abs=1e-12
            )
    # the samples' metrics.json says the same AURC (one implementation)
    metrics = json.loads((step_dir(sweep / "job0-seed99", 20) / DATASET / METRICS_FILE).read_text())
    assert block["methods"]["rlsr"]["seeds"]["1"]["aurc"] == pytest.approx(
        metrics["scorers"]["verbalized"]["aurc"], abs=1e-15
    )
    # the curve of the PNG: mean, lowest and highest ranking gain over seeds at every step
    curve = block["methods"]["rlcr"]["curve"]
    assert [p["step"] for p in curve] == [0, 10, 20]
    gains = [_by_definition(CONF, _correct(LAST[("rlcr", s)]))["ranking_gain"] for s in (2, 3, 4)]
    assert curve[-1] == pytest.approx(
        {"step": 20, "mean": np.mean(gains), "min": min(gains), "max": max(gains)}, abs=1e-12
    )
    assert (out / COMPARE_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / COMPARE_MD).read_text()
    mean_gain = block["methods"]["rlsr"]["mean"]["ranking_gain"]
    assert "| rlsr | 3 | " in md and f"{round(mean_gain, 4) + 0.0:.4f} [" in md
    assert "tiny-missing at step 20" in stdout


def test_paired_differences_use_shared_seeds_only(sweep, tmp_path, capsys):
    """rlcr - rlsr pairs seeds 2 and 3 only (the seeds both methods have): per seed the
    difference of that seed's values, then their mean and CI; not mean(rlcr) - mean(rlsr) over
    all seeds, which these fixtures make different (its interval: the t-interval of the per-seed
    differences). --reference flips the pair to rlsr - rlcr."""
    out = tmp_path / "cmp"
    assert _compare(capsys, sweep, "--output-dir", out)[0] == 0
    pair = json.loads((out / COMPARE_JSON).read_text())["datasets"][DATASET]["pairs"][0]
    assert (pair["a"], pair["b"], pair["shared_seeds"]) == ("rlcr", "rlsr", [2, 3])
    diffs = {}
    for seed in (2, 3):
        a = _by_definition(CONF, _correct(LAST[("rlcr", seed)]))
        b = _by_definition(CONF, _correct(LAST[("rlsr", seed)]))
        diffs[seed] = {k: a[k] - b[k] for k in a}
        assert pair["last"]["seeds"][str(seed)] == pytest.approx(diffs[seed], abs=1e-12)
    paired = np.mean([diffs[s]["aurc"] for s in (2, 3)])
    assert pair["last"]["mean"]["aurc"] == pytest.approx(paired, abs=1e-12)
    unpaired = np.mean(
        [_by_definition(CONF, _correct(LAST[("rlcr", s)]))["aurc"] for s in (2, 3, 4)]
    ) - np.mean([_by_definition(CONF, _correct(LAST[("rlsr", s)]))["aurc"] for s in (1, 2, 3)])
    assert abs(paired - unpaired) > 0.1  # the fixture tells the two apart
    by_hand = _t_interval_by_hand([diffs[s]["aurc"] for s in (2, 3)], (-1.0, 1.0))
    assert pair["last"]["ci95"]["aurc"] == pytest.approx(by_hand, abs=1e-12)
    assert pair["first"]["step"] == 0

    out2 = tmp_path / "cmp2"
    assert _compare(capsys, sweep, "--output-dir", out2, "--reference", "rlsr")[0] == 0
    flipped = json.loads((out2 / COMPARE_JSON).read_text())["datasets"][DATASET]["pairs"][0]
    assert (flipped["a"], flipped["b"]) == ("rlsr", "rlcr")
    assert flipped["last"]["mean"]["aurc"] == pytest.approx(-paired, abs=1e-12)


def test_runs_are_grouped_by_recorded_method_label_and_seed(tmp_path, capsys):
    """Folder names lie here ('rlsr-seed1' holds an rlcr run of seed 5); a variant's
    method.label is its own method. Grouping by folder name or by method.name alone fails."""
    root = tmp_path / "runs"
    last = _answers(CONF, _correct("1111011000"))
    make_run(root, "rlsr-seed1", method="rlcr", seed=5, steps={0: FLAT, 4: last})
    make_run(root, "rlsr-seed2", method="rlcr", seed=5, label="rlcr-std", steps={0: FLAT, 4: last})
    make_run(root, "x", method="rlsr", seed=1, steps={0: FLAT, 4: last})
    make_run(root, "y", method="rlsr", seed=2, steps={0: FLAT, 4: last})
    out = tmp_path / "cmp"
    code, _, err = _compare(capsys, root, "--output-dir", out)
    assert code == 0, err
    result = json.loads((out / COMPARE_JSON).read_text())
    methods = result["datasets"][DATASET]["methods"]
    assert sorted(methods) == ["rlcr", "rlcr-std", "rlsr"]
    assert list(methods["rlsr"]["seeds"]) == ["1", "2"]
    assert list(methods["rlcr"]["seeds"]) == ["5"]
    assert methods["rlcr"]["runs"]["5"].endswith("rlsr-seed1")


def test_fewer_than_three_seeds_is_said_not_refused(tmp_path, capsys):
    """A method with one or two seeds is compared, and the output says so (stderr, compare.md,
    compare.json's notes); one seed's CI is null (n/a), never a zero-width interval. A training
    setting that differs between the runs of one method is named too."""
    root = tmp_path / "runs"
    last = _answers(CONF, _correct("1111011000"))
    make_run(root, "a", method="rlsr", seed=1, steps={0: FLAT, 4: last})
    make_run(root, "b", method="rlcr", seed=1, steps={0: FLAT, 4: last})
    make_run(root, "c", method="rlcr", seed=2, steps={0: FLAT, 4: last},
             config={"grpo": {"learning_rate": 0.01}})  # fmt: skip
    out = tmp_path / "cmp"
    code, _, err = _compare(capsys, root, "--output-dir", out)
    assert code == 0
    assert "rlsr has 1 seed (1), fewer than 3" in err
    assert "rlcr has 2 seeds (1, 2), fewer than 3" in err
    # a setting that differs between one method's runs is named (seed, output_dir are not)
    assert (
        "the runs of rlcr differ in their recorded config (config.yaml) beyond the seed: "
        "grpo.learning_rate" in err
    )
    result = json.loads((out / COMPARE_JSON).read_text())
    assert any("rlsr has 1 seed" in n for n in result["notes"])
    assert result["datasets"][DATASET]["methods"]["rlsr"]["ci95"]["aurc"] == [None, None]
    assert "rlsr has 1 seed (1), fewer than 3" in (out / COMPARE_MD).read_text()
    assert "[n/a]" in (out / COMPARE_MD).read_text()


def test_compared_at_the_last_step_every_run_reached(tmp_path, capsys):
    """A run that went further (or one still training) does not lend its later step to the
    table: every method is compared at the last step all runs evaluated, and the note names the
    run that reached further; a failed step (failed.json) is left out."""
    root = tmp_path / "runs"
    last = _answers(CONF, _correct("1111011000"))
    make_run(root, "a", method="rlsr", seed=1, steps={0: FLAT, 4: last, 8: FLAT})
    b = make_run(root, "b", method="rlcr", seed=1, steps={0: FLAT, 4: last})
    make_run(root, "c", method="rlcr", seed=2, steps={0: FLAT, 4: last})  # a second seed
    failed = step_dir(b, 8)
    failed.mkdir()
    (failed / "failed.json").write_text(json.dumps({"step": 8, "error": "judge down"}))
    out = tmp_path / "cmp"
    code, _, err = _compare(capsys, root, "--output-dir", out)
    assert code == 0, err
    block = json.loads((out / COMPARE_JSON).read_text())["datasets"][DATASET]
    assert block["last_step"] == 4
    assert block["methods"]["rlsr"]["seeds"]["1"]["aurc"] == pytest.approx(
        _aurc_by_definition(CONF, _correct("1111011000")), abs=1e-12
    )
    assert (
        f"compared at step 4, the last step every run evaluated; {root / 'a'} reached step 8" in err
    )


def test_rlsr_evaluate_folders_of_checkpoints_and_final_adapters(tmp_path, capsys):
    """`rlsr evaluate` folders (slurm/evaluate.slurm's evals/<run>/ and <run>/checkpoint-N/):
    the training run is the adapter's folder (or the one above checkpoint-N), the step is N, or
    for the final adapter the max_steps its checkpoint's trainer_state.json records."""
    runs, evals = tmp_path / "runs", tmp_path / "evals"
    last = _answers(CONF, _correct("1111011000"))
    mid = _answers(CONF, _correct("1010101010"))
    for name, method, seed in (("r1", "rlsr", 1), ("r2", "rlcr", 1), ("r2b", "rlcr", 2)):
        run = make_run(runs, name, method=method, seed=seed, steps={})
        ckpt = checkpoint_dir(run, 10)
        ckpt.mkdir()
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 10, "max_steps": 20}))
        for adapter, folder, answers in ((ckpt, evals / name / "checkpoint-10", mid),
                                         (run, evals / name, last)):  # fmt: skip
            record = {"model": "tiny-missing-warm", "adapter": str(adapter),
                      **{k: v for k, v in _settings().items() if k != "progress"},
                      "system_prompt": "simple", "protocol_variant": None,
                      "versions": version_records({DATASET: "exact_match"})}  # fmt: skip
            _write_evaluation(folder, answers, record)
    out = tmp_path / "cmp"
    code, _, err = _compare(capsys, evals, "--output-dir", out)
    assert code == 0, err
    block = json.loads((out / COMPARE_JSON).read_text())["datasets"][DATASET]
    assert (block["first_step"], block["last_step"]) == (10, 20)
    assert block["methods"]["rlsr"]["seeds"]["1"] == pytest.approx(
        _by_definition(CONF, _correct("1111011000")), abs=1e-12
    )
    assert block["methods"]["rlsr"]["first"]["seeds"]["1"] == pytest.approx(
        _by_definition(CONF, _correct("1010101010")), abs=1e-12
    )
    # held-out histories beside evaluate folders are two evaluations: refused unless --use says
    make_run(runs, "r3", method="rlvr", seed=1, steps={0: FLAT})
    make_run(runs, "r4", method="rlvr", seed=2, steps={0: FLAT})
    code, _, err = _compare(capsys, tmp_path, "--output-dir", tmp_path / "both")
    assert code == 2 and "--use held-out or --use evaluate" in _one_error_line(err)
    assert not (tmp_path / "both").exists()
    code, _, err = _compare(capsys, tmp_path, "--use", "evaluate", "--output-dir", out)
    assert code == 0, err
    assert json.loads((out / COMPARE_JSON).read_text())["methods"] == ["rlcr", "rlsr"]
    code, _, err = _compare(capsys, tmp_path, "--use", "held-out", "--output-dir", out)
    assert code == 0 and "left out 3 run(s) without held-out history" in err
    assert json.loads((out / COMPARE_JSON).read_text())["methods"] == ["rlvr"]


# --------------------------------------------------------------------------- refusals


def _two_runs(root: Path, **second) -> tuple[Path, Path]:
    last = _answers(CONF, _correct("1111011000"))
    a = make_run(root, "a", method="rlsr", seed=1, steps={0: FLAT, 4: last})
    kwargs = {"method": "rlcr", "seed": 1, "steps": {0: FLAT, 4: last}, **second}
    return a, make_run(root, "b", **kwargs)


@pytest.mark.parametrize(
    "case, second, needles",
    [
        ("protocol", {"protocol": {"max_new_tokens": 64}},
         ["evaluation protocol differs on tiny-missing: max_new_tokens is", "64 in", "32 in"]),
        ("temperature", {"protocol": {"temperature": 0.3}}, ["temperature is", "0.0 in", "0.3 in"]),
        ("dataset", {"datasets": ("tiny-format",)},
         ["held-out tasks differ: ", "['tiny-missing'] in", "['tiny-format'] in"]),
        ("verifier", {"verifier": "numeric"},
         ["data version of tiny-missing differs: versions.tiny-missing", "numeric"]),
        ("questions", {"golds": {3: "mauve"}},
         ["data version of tiny-missing differs: its questions", "heldout.limit"]),
        ("seed twice", {"method": "rlsr"}, ["method 'rlsr' has seed 1 twice", "method.label"]),
        ("no common step", {"steps": {2: FLAT, 6: FLAT}},
         ["no step of tiny-missing was evaluated by every run", "[0, 4]", "[2, 6]"]),
    ],
)  # fmt: skip
def test_refusals_name_the_field_and_the_runs_and_write_nothing(
    tmp_path, capsys, case, second, needles
):
    """Runs that cannot be pooled: one `rlsr: error:` line naming the field and both runs,
    exit 2, and no output folder at all (nothing partial that could be read as a result)."""
    a, b = _two_runs(tmp_path / "runs", **second)
    out = tmp_path / "cmp"
    code, _, err = _compare(capsys, a, b, "--output-dir", out)
    line = _one_error_line(err)
    assert code == 2
    for needle in needles:
        assert needle in line, line
    assert str(a) in line and str(b) in line
    assert not out.exists()


def test_refusals_of_empty_and_historyless_folders(tmp_path, capsys):
    """An empty folder, a folder of unrelated files, and a train.py run without held-out
    history (heldout.every=0) are each one line naming the folder and the fix; a missing path too."""
    empty = tmp_path / "empty"
    empty.mkdir()
    stray = tmp_path / "stray"
    (stray / "sub").mkdir(parents=True)
    (stray / "sub" / "notes.txt").write_text("x")
    no_history = make_run(tmp_path / "runs", "no-eval", method="rlsr", seed=1, steps={})
    cases = [
        (empty, "no run inside"),
        (stray, "no run inside"),
        (no_history, "no held-out history"),
        (tmp_path / "runs", "no held-out history"),  # a sweep's runs/ whose runs have none
        (tmp_path / "missing", "no such folder"),
    ]
    for path, needle in cases:
        code, _, err = _compare(capsys, path, "--output-dir", tmp_path / "cmp")
        line = _one_error_line(err)
        assert code == 2 and needle in line and str(path) in line, line  # runs/ -> runs/no-eval
        assert not (tmp_path / "cmp").exists()
    assert "heldout.every=N" in _one_error_line(
        _compare(capsys, no_history, "--output-dir", tmp_path / "cmp")[2]
    )


def test_an_unfinished_evaluation_is_refused(tmp_path, capsys):
    """samples.jsonl holding more answers than its metrics.json summarises (an evaluation still
    writing, or cut off) is refused, not compared on a partial set of questions."""
    a, _ = _two_runs(tmp_path / "runs")
    samples = step_dir(a, 4) / DATASET / SAMPLES_FILE
    append_samples(samples, _records([(0.5, True)] * 11)[10:])
    code, _, err = _compare(capsys, tmp_path / "runs", "--output-dir", tmp_path / "cmp")
    line = _one_error_line(err)
    assert code == 2 and "samples.jsonl: holds 11 samples but" in line and "n=10" in line


def test_output_appears_complete_or_not_at_all(sweep, tmp_path, capsys, monkeypatch):
    """A failure while the files are rendered (here: compare.md) leaves none of compare.json,
    compare.md, compare.png and no temporary file behind; the next run writes all three."""
    out = tmp_path / "cmp"

    def broken(result):
        raise OSError("disk full")

    monkeypatch.setattr(compare_module, "render_markdown", broken)
    code, _, err = _compare(capsys, sweep, "--output-dir", out)
    assert code == 2 and "disk full" in _one_error_line(err)
    assert list(out.iterdir()) == []
    monkeypatch.undo()
    assert _compare(capsys, sweep, "--output-dir", out)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)


def test_runs_of_one_seed_each_are_refused_naming_each_run(tmp_path, capsys):
    """When no method has a second seed there is nothing to compare across seeds: one line
    naming each run's method, seed and folder, exit 2, no output file. Catches a table of
    single runs presented with the look of a seed comparison."""
    root = tmp_path / "runs"
    last = _answers(CONF, _correct("1111011000"))
    make_run(root, "a", method="rlsr", seed=1, steps={0: FLAT, 4: last})
    make_run(root, "b", method="rlcr", seed=1, steps={0: FLAT, 4: last})
    out = tmp_path / "cmp"
    code, _, err = _compare(capsys, root, "--output-dir", out)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "every method has one seed" in err
    assert "rlsr: seed 1" in err and "rlcr: seed 1" in err and str(root / "a") in err
    assert not out.exists() or not any(out.iterdir())


# --------------------------------------------------------------------------- no silent fallback


def _finish(run: Path, step: int, max_steps: int) -> None:
    """What train.py leaves in a run folder: checkpoint-N/trainer_state.json (HF Trainer's
    global_step and max_steps) and, once training ended, the final adapter in the run folder
    (compare reads only whether the file is there, so its bytes are a placeholder)."""
    checkpoint = checkpoint_dir(run, step)
    checkpoint.mkdir()
    state = {"global_step": step, "max_steps": max_steps}
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    if step == max_steps:
        (run / "adapter_model.safetensors").write_bytes(b"placeholder")


def _four_runs(root: Path, **config) -> list[Path]:
    """rlsr and rlcr, seeds 1 and 2, held-out steps 0, 20 and 40, finished at step 40."""
    last = _answers(CONF, _correct("1111011000"))
    runs = []
    for method, seed in itertools.product(("rlsr", "rlcr"), (1, 2)):
        run = make_run(root, f"{method}-{seed}", method=method, seed=seed,
                       steps={0: FLAT, 20: last, 40: last}, config=config)  # fmt: skip
        _finish(run, 40, 40)
        runs.append(run)
    return runs


def _cut_samples(samples: Path, how: str) -> None:
    """Leave ``samples`` (and its folder) as a copy cut short or a killed evaluation would."""
    lines = samples.read_text().splitlines(keepends=True)
    if how == "empty":
        samples.write_text("")
    elif how == "short":
        samples.write_text("".join(lines[:5]))
    elif how == "cut mid-line":
        samples.write_text("".join(lines)[:-30])
    elif how == "no samples.jsonl":
        samples.unlink()
    elif how == "no metrics.json":
        (samples.parent / METRICS_FILE).unlink()
    elif how == "no dataset folder":
        shutil.rmtree(samples.parent)


CUTS = ("empty", "short", "cut mid-line", "no samples.jsonl", "no metrics.json")


@pytest.mark.parametrize("how", CUTS)
def test_a_cut_held_out_step_is_refused_with_its_file_and_train_py_fix(tmp_path, capsys, how):
    """A held-out step folder whose samples.jsonl is empty, short, cut mid-line or missing, or
    which lacks metrics.json, is refused in one line naming that file, the run and the step,
    with train.py's fixes (copy the step again, evaluate its checkpoint, or move it out), not
    `rlsr evaluate`'s rerun; never compared at an earlier step as if the other runs had gone
    further."""
    runs = _four_runs(tmp_path / "runs")
    samples = step_dir(runs[0], 40) / DATASET / SAMPLES_FILE
    _cut_samples(samples, how)
    code, _, err = _compare(capsys, tmp_path / "runs", "--output-dir", tmp_path / "cmp")
    line = _one_error_line(err)
    assert code == 2 and not (tmp_path / "cmp").exists()
    assert line.startswith(f"rlsr: error: {samples}"), line
    assert f"copy eval/step-40 of train.py run {runs[0]} again" in line
    summary_command = "the run summary's `rlsr evaluate` command with --adapter"
    assert f"evaluate checkpoint-40 ({summary_command} {checkpoint_dir(runs[0], 40)}:" in line
    assert "compare those folders with --use evaluate" in line
    assert "move eval/step-40 out of the run folder" in line
    assert "rerun the `rlsr evaluate` command" not in line and "rerun the same" not in line
    # the last fix, as said: the steps before it are compared, the note names the runs at 40
    (step_dir(runs[0], 40)).rename(tmp_path / "step-40")
    code, _, err = _compare(capsys, tmp_path / "runs", "--output-dir", tmp_path / "cmp")
    assert code == 0 and "compared at step 20, the last step every run evaluated; " in err, err


@pytest.mark.parametrize("how", ["empty", "short", "no metrics.json", "no dataset folder"])
def test_a_cut_rlsr_evaluate_folder_is_refused_with_its_rerun(tmp_path, capsys, how):
    """An `rlsr evaluate` folder whose samples.jsonl is empty or short, which lacks
    metrics.json, or holds none of the datasets its run.json names (killed before the first
    answer), is refused in one line naming the file (or folder) and the rerun of that command
    (it evaluates what is missing), never left out."""
    runs = _four_runs(tmp_path / "runs")
    for run in runs:
        record = {"model": "tiny-missing-warm", "adapter": str(run),
                  **{k: v for k, v in _settings().items() if k != "progress"},
                  "system_prompt": "simple", "datasets": [DATASET],
                  "versions": version_records({DATASET: "exact_match"})}  # fmt: skip
        _write_evaluation(tmp_path / "evals" / run.name, _answers(CONF, _correct("1" * 10)), record)
    cut = tmp_path / "evals" / runs[0].name
    _cut_samples(cut / DATASET / SAMPLES_FILE, how)
    code, _, err = _compare(capsys, tmp_path / "evals", "--output-dir", tmp_path / "cmp")
    line = _one_error_line(err)
    named = cut if how == "no dataset folder" else cut / DATASET / SAMPLES_FILE
    assert code == 2 and line.startswith(f"rlsr: error: {named}"), line
    assert f"rerun the `rlsr evaluate` command that wrote {cut}" in line


@pytest.mark.parametrize(
    "field, value, said",
    [("confidence", "NaN", "its verbalized confidence NaN is not a number"),
     ("confidence", "1.5", "its verbalized confidence 1.5 is outside [0, 1]"),
     ("confidence", '"high"', 'its verbalized confidence "high" is not a number'),
     ("confidence", "true", "its verbalized confidence true is not a number"),
     ("correct", "null", "its correct is null, not true or false")],
)  # fmt: skip
def test_a_bad_sample_is_refused_naming_the_file_and_line(tmp_path, capsys, field, value, said):
    """A confidence that is NaN, outside [0, 1], a word or a boolean (rlsr writes a number in
    [0, 1] or null), or a verdict that is not true/false, is refused in one line naming
    samples.jsonl and its line (counted in the file, blank lines too); a boolean is not read as
    1.0."""
    runs = _four_runs(tmp_path / "runs")
    samples = step_dir(runs[1], 20) / DATASET / SAMPLES_FILE
    lines = samples.read_text().splitlines()
    record = json.loads(lines[3])
    if field == "confidence":
        record["scores"]["verbalized"] = "VALUE"
    else:
        record["correct"] = "VALUE"
    lines[3] = json.dumps(record).replace('"VALUE"', value)  # raw JSON: NaN, true, null
    samples.write_text("\n".join(lines[:1] + [""] + lines[1:]) + "\n")  # a blank line 2
    code, _, err = _compare(capsys, tmp_path / "runs", "--output-dir", tmp_path / "cmp")
    line = _one_error_line(err)
    assert code == 2 and not (tmp_path / "cmp").exists()
    assert f"{samples}: line 5 (id 'tiny-missing-test-3'): {said}" in line
    assert f"copy eval/step-20 of train.py run {runs[1]}" in line


def test_a_run_still_training_is_named_as_such(tmp_path, capsys):
    """A run that has not finished training (no final adapter; its newest checkpoint at step 20
    of 40) stops the comparison at its last evaluated step: the note names that run as not
    finished, with its step, and no finished run is named so."""
    root = tmp_path / "runs"
    runs = _four_runs(root)
    late = make_run(root, "rlsr-3", method="rlsr", seed=3, steps={0: FLAT, 20: FLAT})
    _finish(late, 20, 40)
    code, _, err = _compare(capsys, root, "--output-dir", tmp_path / "cmp")
    assert code == 0, err
    assert (
        f"{late} has not finished training (no final adapter; its newest checkpoint, "
        "checkpoint-20, is at step 20 of 40): it is still training, or it stopped; the "
        "comparison stops at its last evaluated step, 20." in err
    )
    assert not any(f"{run} has not finished" in err for run in runs)
    block = json.loads((tmp_path / "cmp" / COMPARE_JSON).read_text())["datasets"][DATASET]
    assert block["last_step"] == 20


def test_the_run_summary_evaluate_folder_inside_runs_is_left_out_with_a_note(tmp_path, capsys):
    """README's order: train.py runs in runs/, then the run summary's `rlsr evaluate` into
    RUN/evaluate, then `rlsr compare runs`: the held-out histories are compared and each run's
    own evaluate folder is left out with a note naming --use evaluate (which compares those); a
    base model's evaluate folder in a folder beside runs/ is left out with a note too."""
    root = tmp_path / "project" / "runs"
    runs = _four_runs(root)
    for run in runs:
        record = {"model": "tiny-missing-warm", "adapter": str(run.resolve()),
                  **{k: v for k, v in _settings().items() if k != "progress"},
                  "system_prompt": "simple", "versions": version_records({DATASET: "exact_match"})}  # fmt: skip
        _write_evaluation(run / "evaluate", _answers(CONF, _correct("1" * 10)), record)
    code, _, err = _compare(capsys, root, "--output-dir", tmp_path / "cmp")
    assert code == 0, err
    assert "left out 4 `rlsr evaluate` folder(s) of runs whose held-out history is compared" in err
    assert json.loads((tmp_path / "cmp" / COMPARE_JSON).read_text())["evaluations"] == "held-out"
    # README's evals/base (the base model's evaluation) beside runs/: left out the same way
    base = {"model": "tiny-missing-warm", "adapter": None, "datasets": [DATASET]}
    _write_evaluation(tmp_path / "project" / "evals" / "base", FLAT, base)
    code, _, err = _compare(capsys, tmp_path / "project", "--output-dir", tmp_path / "cmp2")
    assert code == 0 and "left out 1 `rlsr evaluate` folder(s) that evaluated no train.py" in err
    code, _, err = _compare(capsys, root, "--use", "evaluate", "--output-dir", tmp_path / "ev")
    assert code == 0, err
    result = json.loads((tmp_path / "ev" / COMPARE_JSON).read_text())
    assert result["evaluations"] == "evaluate" and result["datasets"][DATASET]["last_step"] == 40


def test_a_run_of_another_task_is_named_by_its_task_first(tmp_path, capsys):
    """Your own task's run (data.task=caps, seed 1) beside the tiny task's runs in runs/: the
    refusal names the different training task and both runs, not 'seed 1 twice' or the
    evaluate folders, which follow from it."""
    root = tmp_path / "runs"
    _four_runs(root, data={"task": "tiny-missing"})
    caps = make_run(root, "caps", method="rlsr", seed=1, steps={0: FLAT}, datasets=("caps",),
                    config={"data": {"task": "caps"}})  # fmt: skip
    record = {"model": "tiny-missing-warm", "adapter": str(caps / "checkpoint-2")}
    (caps / "checkpoint-2").mkdir()
    _write_evaluation(tmp_path / "evals" / "caps", FLAT, record, dataset="caps")
    for paths in ([root], [root, tmp_path / "evals"]):
        code, _, err = _compare(capsys, *paths, "--output-dir", tmp_path / "cmp")
        line = _one_error_line(err)
        assert code == 2 and "the runs trained on different tasks: data.task is" in line, line
        assert f"'caps' in {caps}" in line and str(root / "rlcr-1") in line


# --------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize("margin", ["-0.1", "nan", "1", "0"])
def test_a_margin_that_is_not_a_positive_difference_below_the_range_is_refused(
    sweep, tmp_path, capsys, margin
):
    """--margin negative, NaN, zero or at least the metrics' smallest range (2/e, ranking
    gain's): one line naming
    --margin and the fix, exit 2, nothing written."""
    out = tmp_path / "cmp"
    code, _, err = _compare(capsys, sweep, "--output-dir", out, "--margin", margin)
    line = _one_error_line(err)
    assert code == 2 and f"--margin {float(margin)}" in line and "e.g. --margin 0.02" in line
    assert not out.exists()


def test_pairs_carry_interval_exact_p_holm_and_verdict(sweep, tmp_path, capsys):
    """compare.json's pair holds per metric the interval, the exact permutation p (2 shared
    seeds: p >= 0.5), the Holm-adjusted p over all 2 steps' 4 metrics, the test's name and a
    verdict; compare.md's verdict table prints them; --margin 0.7 makes the pair equivalent
    where its interval lies inside ±0.7, and --resample-questions keeps the means and widens the
    intervals (question sampling adds to the seeds' spread)."""
    out = tmp_path / "cmp"
    assert _compare(capsys, sweep, "--output-dir", out)[0] == 0
    result = json.loads((out / COMPARE_JSON).read_text())
    assert result["schema_version"] == 2 and result["statistics"]["margin"] is None
    last = result["datasets"][DATASET]["pairs"][0]["last"]
    for key in ("aurc", "ranking_gain", "ece", "accuracy"):
        d = [last["seeds"][s][key] for s in ("2", "3")]
        nonzero = [v for v in d if abs(v) > 1e-9]
        expect = 1.0 if len(nonzero) < 2 or abs(sum(nonzero)) < max(map(abs, nonzero)) else 0.5
        assert last["p_value"][key] == pytest.approx(expect)
        assert last["p_adjusted"][key] >= last["p_value"][key]
        assert last["verdict"][key] in ("inconclusive",)
        assert last["test"][key].startswith("exact paired permutation test")
    md = (out / COMPARE_MD).read_text()
    assert "### Tests and verdicts" in md and "| rlcr − rlsr | 20 | AURC | 2 |" in md
    wide = tmp_path / "wide"
    assert _compare(capsys, sweep, "--output-dir", wide, "--margin", "0.7")[0] == 0
    pair = json.loads((wide / COMPARE_JSON).read_text())["datasets"][DATASET]["pairs"][0]
    for key in ("aurc", "ranking_gain", "ece", "accuracy"):
        lo, hi = pair["last"]["ci95"][key]
        inside = -0.7 <= lo and hi <= 0.7
        assert (pair["last"]["verdict"][key] == "equivalent within ±0.7") == inside
    hier = tmp_path / "hier"
    code, _, err = _compare(capsys, sweep, "--output-dir", hier, "--resample-questions",
                            "--bootstrap-resamples", "300")  # fmt: skip
    assert code == 0, err
    both = json.loads((hier / COMPARE_JSON).read_text())
    assert both["statistics"]["resample_questions"] is True
    rlcr = both["datasets"][DATASET]["methods"]["rlcr"]
    assert rlcr["n_clusters"] == 10
    plain = json.loads((out / COMPARE_JSON).read_text())["datasets"][DATASET]["methods"]["rlcr"]
    for key in ("aurc", "ece"):
        wide_lo, wide_hi = rlcr["ci95"][key]
        lo, hi = plain["ci95"][key]
        assert rlcr["mean"][key] == plain["mean"][key]
        assert wide_hi - wide_lo > hi - lo  # 10 questions: their sampling adds to the seeds'


def test_arms_that_differ_outside_their_method_section_get_a_caveat(tmp_path, capsys):
    """A setting outside ``method`` that differs between arms (here the learning rate) is named
    with every arm's value in a note: the verdicts assume it was chosen the same way for each.
    A differing ``resume`` (how a run was continued) is not named."""
    root = tmp_path / "runs"
    last = _answers(CONF, _correct("1111011000"))
    for seed in (1, 2):
        make_run(root, f"a{seed}", method="rlsr", seed=seed, steps={0: FLAT, 4: last})
        make_run(root, f"b{seed}", method="rlcr", seed=seed, steps={0: FLAT, 4: last},
                 config={"grpo": {"learning_rate": 0.01}, "resume": "never"})  # fmt: skip
    out = tmp_path / "cmp"
    code, _, err = _compare(capsys, root, "--output-dir", out)
    assert code == 0, err
    assert "resume" not in err  # how a run continued is no choice about the arm
    assert (
        "the arms differ in recorded settings (config.yaml) outside their method section: " in err
    )
    assert "grpo.learning_rate (rlcr: 0.01; rlsr: 0.001)" in err
    assert "chosen for each arm by the same procedure on validation data" in err
    notes = json.loads((out / COMPARE_JSON).read_text())["notes"]
    assert any("grpo.learning_rate" in n for n in notes)


def test_a_nan_metric_leaves_its_seed_out_with_a_note_naming_the_run():
    """A seed whose metric is NaN is left out of that metric's mean, interval and test, and the
    note names the run; the verdict is computed from the other seeds, never from NaN."""
    per_seed = {1: {"aurc": 0.2}, 2: {"aurc": math.nan}, 3: {"aurc": 0.3}, 4: {"aurc": 0.25}}
    summary = compare_module.seed_summary(per_seed, keys=["aurc"])
    assert summary["excluded"] == {"aurc": [2]} and summary["n"] == {"aurc": 3}
    assert summary["mean"]["aurc"] == pytest.approx(0.25)
    notes = compare_module._nan_notes("tiny", 20, "rlsr", summary, lambda s: f"runs/s{s}")
    assert notes == [
        "tiny step 20: rlsr: aurc is NaN for 1 seed(s) (seed 2: runs/s2); left out, 3 of 4 "
        "seeds used."
    ]
    diffs = {s: {"aurc": v["aurc"] - 0.1} for s, v in per_seed.items()}
    pair = compare_module.paired_summary(diffs, keys=["aurc"])
    compare_module.add_verdicts([("a", "b", pair)], [("aurc", "AURC", "lower")], None)
    assert pair["p_value"]["aurc"] == pytest.approx(0.25)  # 3 positive of 3: 2 / 8
    assert pair["verdict"]["aurc"] == "inconclusive"


def test_ranking_gain_lies_within_plus_minus_one_over_e():
    """VALUE_BOUNDS' ranking-gain range [-1/e, 1/e], which the intervals are cut to: every
    correctness pattern of up to 10 answers in its best and its worst order (distinct
    confidences) and with one tied confidence stays inside it; the largest gain found is the
    best order's closed form max (j/n)(H_n - H_j) over n <= 10, j correct."""
    lo, hi = compare_module.VALUE_BOUNDS["ranking_gain"]
    assert (lo, hi) == pytest.approx((-1 / math.e, 1 / math.e))
    top = 0.0
    for n in range(1, 11):
        conf = np.linspace(0.9, 0.1, n)
        for pattern in itertools.product((0, 1), repeat=n):
            ok = np.array(pattern)
            for order in (np.sort(ok)[::-1], np.sort(ok), ok):  # best, worst, as drawn
                error = 1 - ok.mean()
                gain = M.ranking_gain_from_aurc(M.aurc(conf, order), error)
                assert lo - 1e-12 <= gain <= hi + 1e-12
                top = max(top, gain)
            tied = M.ranking_gain_from_aurc(M.aurc(np.full(n, 0.5), ok), 1 - ok.mean())
            assert tied == pytest.approx(0.0, abs=1e-12)
    harmonic = np.concatenate([[0.0], np.cumsum(1 / np.arange(1, 11))])
    best = max(j / n * (harmonic[n] - harmonic[j]) for n in range(1, 11) for j in range(n + 1))
    assert top == pytest.approx(best, abs=1e-12) and best < 1 / math.e
