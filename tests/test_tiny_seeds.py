"""tools/tiny/seeds.py's statistics: the interval over seeds and the per-arm / paired
summary docs/results.md's recipe=tiny table is built from (no training run here)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from rlsr.evaluation.comparison.compare import VALUE_BOUNDS
from rlsr.evaluation.comparison.seed_statistics import seed_interval

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "tiny" / "seeds.py"


@pytest.fixture(scope="module")
def seeds_script():
    spec = importlib.util.spec_from_file_location("tiny_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seed_ci_is_rlsr_compares_interval(seeds_script):
    """The table's interval is ``rlsr compare``'s (``seed_statistics.seed_interval`` over the
    metric's range), so the two tools print the same interval for the same seeds; one value or
    none has none. Catches a second interval implementation beside compare's."""
    values = [0.0, 0.1, 0.15, 0.4, 0.33]
    want = seed_interval(values, VALUE_BOUNDS["aurc_drop"])
    assert seeds_script.seed_ci(values, "aurc_drop") == pytest.approx((want.low, want.high))
    assert all(math.isnan(x) for x in seeds_script.seed_ci([0.3]))
    assert all(math.isnan(x) for x in seeds_script.seed_ci([]))


def test_paired_difference_uses_only_the_seeds_both_arms_finished(seeds_script):
    """RLSR - arm is the mean of per-seed differences on shared seeds (a seed one arm lacks is
    left out of the pair, not of the per-arm mean). Catches a difference of unpaired means."""

    def row(arm, seed, aurc, gain):
        return {"arm": arm, "seed": seed, "dispatch": "default", "aurc": aurc,
                "ranking_gain": gain, "ece": 0.1}  # fmt: skip

    rows = [row("rlsr", 0, 0.2, 0.2), row("rlsr", 1, 0.1, 0.1), row("rlsr", 2, 0.3, 0.3),
            row("rlcr", 0, 0.1, 0.2), row("rlcr", 1, 0.1, 0.0)]  # fmt: skip
    got = seeds_script.summarize(rows, ["rlsr", "rlcr"])["default"]
    assert got["arms"]["rlsr"]["mean"]["ranking_gain"] == pytest.approx(0.2)
    assert sorted(got["arms"]["rlsr"]["seeds"]) == ["0", "1", "2"]
    pair = got["paired"]["rlcr"]
    assert sorted(pair["seeds"]) == ["0", "1"]
    assert pair["mean"]["ranking_gain"] == pytest.approx(0.05)  # (0.0 + 0.1) / 2
    assert pair["mean"]["aurc"] == pytest.approx(0.05)  # (0.1 + 0.0) / 2
    assert pair["verdict"]["ranking_gain"] == "inconclusive"  # 2 seeds: no exact p below 0.05
    assert pair["p_adjusted"]["ranking_gain"] == pytest.approx(1.0)


def test_the_validation_choice_is_the_lowest_mean_aurc_with_ties_to_fewer_steps(seeds_script):
    """Per arm, the (learning rate, step) with the lowest validation AURC averaged over the
    tuning seeds; step 0 (the start, the same for every rate) is never a choice; a step only one
    seed reached is not averaged; ties go to fewer steps, then the smaller rate. Catches a choice
    read from one seed, from the start, or broken towards longer training."""

    def curve(*pairs):
        return {step: {"aurc": value} for step, value in pairs}

    curves = {
        1e-3: {100: curve((0, 0.1), (10, 0.3), (20, 0.2)), 101: curve((0, 0.1), (10, 0.1), (20, 0.2))},
        3e-4: {100: curve((0, 0.1), (10, 0.2), (20, 0.2), (30, 0.0)), 101: curve((0, 0.1), (10, 0.2), (20, 0.2))},
    }  # fmt: skip
    got = seeds_script.choose(curves)
    assert (got["lr"], got["step"]) == (3e-4, 10)  # 0.2 at 3e-4 step 10 ties 1e-3's step 10 and 20
    assert got["validation_aurc"] == pytest.approx(0.2)
    assert 30 not in got["curves"][3e-4]  # reached by one seed only
    assert seeds_script.choose({})["lr"] is None


def test_confidence_columns_follow_the_recipes_kinds(seeds_script, tmp_path):
    """--recipe tiny-candidates splits the last step's greedy confidences by the four tiers (1, 2
    or 4 candidates listed, or none; recipe tiny: listed / missing), with each tier's accuracy.
    Catches a candidates sweep whose table lumps every listed tier together as "listed"."""
    import json

    rows = [("Facts: the ball is red. What color is the ball?", 0.9, True),
            ("Facts: the cup is red or blue. What color is the cup?", 0.9, False),
            ("Facts: the cup is blue or red. What color is the cup?", 0.7, True),
            ("Facts: the hat is red or blue or gray or pink. What color is the hat?", None, False),
            ("Facts: none. What color is the box?", 0.1, False)]  # fmt: skip
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps({"question": q, "confidence": c, "correct": ok}) + "\n"
                            for q, c, ok in rows))  # fmt: skip
    got = seeds_script.confidence_by_kind(path, "tiny-candidates")
    assert list(got) == ["k=1", "k=2", "k=4", "none"]
    assert got["k=2"] == {"n": 2, "confidence_counts": {"0.7": 1, "0.9": 1}, "accuracy": 0.5}
    assert got["k=4"]["confidence_counts"] == {"none": 1}
    tiny = seeds_script.confidence_by_kind(path, "tiny")
    assert tiny["listed"]["n"] == 4 and tiny["missing"]["n"] == 1


def test_a_finished_run_of_another_recipe_is_refused(seeds_script, tmp_path):
    """A sweep folder holds one recipe's runs: a finished recipe=tiny run met by
    --recipe tiny-candidates is refused with the fix, not tabulated as a candidates run."""
    folder = tmp_path / "rlsr-default-seed0"
    folder.mkdir()
    (folder / "wall.json").write_text('{"seconds": 1, "load": [0, 0, 0]}')
    (folder / "config.yaml").write_text("seed: 0\nrecipe_name: tiny\n")
    with pytest.raises(SystemExit, match="holds a finished recipe=tiny run; give another"):
        seeds_script._train(folder, "tiny-candidates", [], "default", {"lr": 1e-3})


def test_a_finished_run_trained_with_another_choice_is_refused(seeds_script, tmp_path):
    """A test run trained at another learning rate or step than the validation choice now
    holds is refused, not tabulated under the new choice. Catches a changed choice mixing runs."""
    folder = tmp_path / "rlsr-default-seed0"
    folder.mkdir()
    (folder / "wall.json").write_text('{"seconds": 1, "load": [0, 0, 0]}')
    (folder / "study.json").write_text('{"lr": 0.001, "max_steps": 40, "every": 40}')
    with pytest.raises(SystemExit, match="the validation choice changed"):
        seeds_script._train(
            folder, "tiny", [], "default", {"lr": 3e-4, "max_steps": 70, "every": 70}
        )


def test_report_aurcs_rank_a_runs_own_answers_by_each_report(seeds_script, tmp_path):
    """The "AURC if calibrated / threshold" columns: a run's own answers re-ranked by each
    report's confidence per tier, AURC with ties as the mean over their orderings. By hand, one
    question per tier, right / wrong / right / wrong (k = 1, 2, 4, none):
    calibrated (0.9 / 0.7 / 0.3 / 0.1) ranks R W R W, AURC (0 + 1/2 + 1/3 + 1/2) / 4 = 1/3;
    threshold (0.9 / 0.9 / 0.1 / 0.1) ties each pair, every R_k averages 1/2, AURC 1/2. Catches
    reports applied to the wrong tiers or ties broken in one order."""
    import json

    rows = [("Facts: the ball is red. What color is the ball?", True),
            ("Facts: the cup is red or blue. What color is the cup?", False),
            ("Facts: the hat is red or blue or gray or pink. What color is the hat?", True),
            ("Facts: none. What color is the box?", False)]  # fmt: skip
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps({"question": q, "confidence": 0.5, "correct": ok}) + "\n"
                            for q, ok in rows))  # fmt: skip
    got = seeds_script.report_aurcs(path, "tiny-candidates")
    assert got == pytest.approx({"calibrated": 1 / 3, "threshold": 1 / 2})
    assert seeds_script.report_aurcs(path, "tiny") == {}


def test_sampled_means_split_rollouts_by_their_prompts_tier(seeds_script, tmp_path):
    """The sampled-confidence table: each rollout of pools/step-N.jsonl counts for the tier of
    its prompt (found by prompt_id in the bundled train split, not by what the model wrote), in
    the first and the last window of steps; an unparsed confidence is left out and a tier
    without rollouts in a window is None. Catches rollouts binned by their own thought."""
    import json

    from rlsr.data.loading import FIXTURES_DIR

    train = [json.loads(line) for line in
             (FIXTURES_DIR / "tiny-candidates" / "train.jsonl").read_text().splitlines()]  # fmt: skip
    one = next(r["id"] for r in train if r["tier"] == "k=1")
    none = next(r["id"] for r in train if r["tier"] == "none")
    pools = tmp_path / "pools"
    pools.mkdir()
    steps = {0: [(one, 0.5), (one, 0.7), (none, None)], 1: [(none, 0.3)], 2: [(one, 0.9)]}
    for step, rollouts in steps.items():
        (pools / f"step-{step}.jsonl").write_text("".join(
            json.dumps({"prompt_id": pid, "confidence": c, "completion": "<think> not </think>"})
            + "\n" for pid, c in rollouts))  # fmt: skip
    got = seeds_script.sampled_means(tmp_path, "tiny-candidates", window=2)
    assert got["k=1"] == pytest.approx([0.6, 0.9]) and got["none"] == pytest.approx([0.3, 0.3])
    assert got["k=2"] == [None, None]


def test_sampled_level_shares_count_each_reports_level_per_tier(seeds_script, tmp_path):
    """The level-share table of recipe=tiny-split: per tier where the calibrated and threshold
    reports differ (k=2: 0.9 / 0.7, k=4: 0.3 / 0.1, and no other tier), the share of the tier's
    parsed rollout confidences at each level in the first and the last window of steps (other
    levels count in the denominator, an unparsed one does not; an empty window is None).
    Catches shares over the whole pool instead of the tier, or the same level read twice."""
    import json

    from rlsr.data.loading import FIXTURES_DIR
    from rlsr.run.run_layout import pool_path

    train = [json.loads(line) for line in
             (FIXTURES_DIR / "tiny-candidates" / "train.jsonl").read_text().splitlines()]  # fmt: skip
    k2 = next(r["id"] for r in train if r["tier"] == "k=2")
    k4 = next(r["id"] for r in train if r["tier"] == "k=4")
    steps = {0: [(k2, 0.9), (k2, 0.7), (k2, 0.5), (k2, None), (k4, 0.9)],
             1: [(k2, 0.9)], 2: [(k2, 0.7)]}  # fmt: skip
    for step, rollouts in steps.items():
        path = pool_path(tmp_path, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"prompt_id": pid, "confidence": c}) + "\n"
                                for pid, c in rollouts))  # fmt: skip
    got = seeds_script.sampled_level_shares(tmp_path, "tiny-split", window=2)
    assert set(got) == {"k=2", "k=4"}
    assert got["k=2"]["0.9"] == pytest.approx([0.5, 0.5])
    assert got["k=2"]["0.7"] == pytest.approx([0.25, 0.5])
    assert got["k=4"] == {"0.3": [0.0, None], "0.1": [0.0, None]}
    lines = seeds_script._level_share_lines([{"arm": "rlsr", "sampled_level_shares": got}])
    assert lines[-1] == "| rlsr | 1 | 0.500 -> 0.500 | 0.250 -> 0.500 | 0.000 -> – | 0.000 -> – |"
