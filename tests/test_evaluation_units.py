"""Unit tests of the evaluation package's pure parts (no model): file I/O, scorers, fallback
extraction, deployment thresholds, report grouping, vLLM argument building (the HTTP judge:
tests/test_evaluation_judge.py).

vLLM is not installed on our CPU machines: its engine is never started here; we test the
arguments we would pass it.
"""

from __future__ import annotations

import json
import math
from itertools import permutations

import numpy as np
import pytest

from rlsr.equations import logprob
from rlsr.evaluation.deploy import deployment
from rlsr.evaluation.reports import report
from rlsr.evaluation.run.runner import self_consistency
from rlsr.evaluation.run.samples_io import append_samples, read_samples
from rlsr.evaluation.run.summary import compute_metrics, no_verdict_note, scorer_arrays
from rlsr.generation import backends
from rlsr.generation.fallbacks import append_text, fallback_answer, fallback_confidence
from rlsr.run.eval_protocol import check_scorers

# --------------------------------------------------------------------------- samples.jsonl


def test_read_samples_drops_a_cut_last_line_and_repairs(tmp_path):
    path = tmp_path / "s.jsonl"
    append_samples(path, [{"id": "a", "x": math.nan}, {"id": "b"}])
    intact = path.read_bytes()
    with open(path, "a") as fh:
        fh.write('{"id": "c", "resp')
    assert [r["id"] for r in read_samples(path)] == ["a", "b"]
    assert read_samples(path)[0]["x"] is None  # NaN is written as null
    read_samples(path, repair=True)
    assert path.read_bytes() == intact
    append_samples(path, [{"id": "c"}])
    assert [r["id"] for r in read_samples(path)] == ["a", "b", "c"]


def test_read_samples_rejects_corruption_in_the_middle(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_samples(path)


# --------------------------------------------------------------------------- scorers


def test_length_normalized_logprob_and_confidence():
    assert logprob.length_normalized_logprob([-1.0, -3.0]) == -2.0
    assert logprob.logprob_confidence([-1.0, -3.0]) == pytest.approx(math.exp(-2.0))
    assert logprob.logprob_confidence([]) is None


def test_answer_span_uses_last_occurrence():
    text = "<think>Paris? maybe Paris</think><answer>Paris</answer>"
    before, ans = logprob.answer_span(text, "Paris")
    assert ans == "Paris" and before == "<think>Paris? maybe Paris</think><answer>"
    assert logprob.answer_span(text, "Rome") is None
    assert logprob.answer_span(text, None) is None


def test_self_consistency_fraction():
    assert self_consistency("Paris", ["paris", " Paris ", "Rome", None]) == 0.5
    assert self_consistency(None, ["a"]) is None
    assert self_consistency("a", []) is None


def test_check_scorers_first_named_is_primary_and_rejects_unknown():
    # the first scorer named is the primary one; tagged responses always report verbalized too
    assert check_scorers(["logprob"]) == ("logprob", "verbalized")
    assert check_scorers(["verbalized", "logprob"]) == ("verbalized", "logprob")
    assert check_scorers(["consistency", "consistency"]) == ("consistency", "verbalized")
    # plain responses state no confidence
    assert check_scorers(["consistency"], "plain") == ("consistency",)
    with pytest.raises(ValueError, match="plain answers state no confidence"):
        check_scorers(["verbalized", "consistency"], "plain")
    with pytest.raises(ValueError, match="unknown scorer"):
        check_scorers(["entropy"])


def test_answer_span_at_the_readers_offset_not_a_later_repetition():
    """The analysis often repeats the answer: the span is where the parser read it."""
    from rlsr.core.parsing import parse_plain_response, parse_response

    text = "<think>Rome?</think><answer> Paris </answer><analysis>Paris or Rome</analysis>"
    parsed = parse_response(text)
    before, ans = logprob.answer_span(text, parsed.answer, parsed.answer_start)
    assert ans == "Paris" and before == "<think>Rome?</think><answer> "
    assert logprob.answer_span(text, "Paris", 3) is None  # not there: no score
    plain = "\n  Paris\nParis again"
    p = parse_plain_response(plain)
    assert (p.answer, p.answer_start, p.format_ok) == ("Paris", 3, True)
    assert logprob.answer_span(plain, p.answer, p.answer_start) == ("\n  ", "Paris")
    assert parse_plain_response(" \n\t").answer is None


# --------------------------------------------------------------------------- fallbacks


def test_fallback_extraction():
    assert fallback_answer(" <answer> 42 </answer> and more") == "42"
    assert fallback_answer(" Paris.\nBecause ...") == "Paris"
    assert fallback_answer(": white</answer>") == "white"
    assert fallback_answer("   \n") is None
    assert fallback_confidence(" 0.8. I am fairly sure") == pytest.approx(0.8)
    assert fallback_confidence(" <confidence>0.3</confidence>") == pytest.approx(0.3)
    assert fallback_confidence(" 85%") == pytest.approx(0.85)
    assert fallback_confidence(" unsure") is None
    assert append_text("abc", "S") == "abc S" and append_text("abc\n", "S") == "abc\nS"
    assert append_text("", "S") == "S"


# --------------------------------------------------------------------------- metrics.json


def test_missing_confidence_counts_as_zero():
    recs = [
        {"id": "1", "correct": True, "scores": {"verbalized": 0.9}},
        {"id": "2", "correct": False, "scores": {"verbalized": None}},
        {"id": "3", "correct": False, "scores": {"verbalized": 0.2}},
    ]
    conf, ok, missing = scorer_arrays(recs, "verbalized")
    assert conf.tolist() == [0.9, 0.0, 0.2] and missing == 1
    m = compute_metrics(recs, n_resamples=0)
    assert m["scorers"]["verbalized"]["aurc"] == pytest.approx((0 + 0.5 + 2 / 3) / 3)
    assert m["scorers"]["verbalized"]["missing_confidence"] == 1
    with pytest.raises(ValueError, match="empty"):
        compute_metrics([])


def test_utility_auc_only_with_answerable_and_cost():
    recs = [
        {
            "id": str(i),
            "correct": c,
            "answer": "x",
            "answerable": a,
            "cost": 1.0,
            "scores": {"verbalized": s},
        }  # fmt: skip
        for i, (c, a, s) in enumerate([(True, True, 0.9), (False, False, 0.8), (False, True, 0.1)])
    ]
    m = compute_metrics(recs, n_resamples=0)
    assert 0.0 <= m["scorers"]["verbalized"]["utility_auc"] <= 1.0
    del recs[0]["cost"]
    assert "utility_auc" not in compute_metrics(recs, n_resamples=0)["scorers"]["verbalized"]


# --------------------------------------------------------------------------- deployment


def _paper_tau(conf, ok, target):
    """Brute force of Sec. C.6.3: tau = min{t in candidate set : acc({s >= t}) >= target}."""
    feasible = [t for t in sorted(set(conf)) if np.mean(ok[conf >= t]) >= target]
    return min(feasible) if feasible else None


def test_deployment_plain_rule_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = 40
        conf = np.round(rng.random(n), 1)
        ok = rng.random(n) < conf
        tc, to = np.round(rng.random(n), 1), rng.random(n) < 0.5
        rows = deployment.deployment_rows(conf, ok, tc, to, 0.7)
        plain = rows[0]
        tau = _paper_tau(conf, ok, 0.7)
        assert plain["feasible"] == (tau is not None)
        if tau is not None:
            assert plain["tau"] == tau
            assert plain["val_coverage"] == pytest.approx(np.mean(conf >= tau))
            assert plain["test_coverage"] == pytest.approx(np.mean(tc >= tau))
            if np.any(tc >= tau):
                assert plain["test_accuracy"] == pytest.approx(np.mean(to[tc >= tau]))
        # temperature scaling is monotone: it selects the same validation samples
        temp = rows[2]
        assert temp["feasible"] == plain["feasible"]
        if plain["feasible"]:
            assert temp["val_coverage"] == pytest.approx(plain["val_coverage"])


def test_deployment_infeasible_row_reports_top_accuracy():
    conf = np.array([1.0, 1.0, 1.0, 0.5])
    ok = np.array([True, False, True, True])
    rows = deployment.deployment_rows(conf, ok, conf, ok, 0.9)
    assert rows[0]["feasible"] is False and rows[0]["tau"] == 1.0
    assert rows[0]["val_accuracy"] == pytest.approx(2 / 3) and rows[0]["test_coverage"] is None
    assert "model†" in deployment.deployment_markdown({"model": rows})


def _evaluation_folder(root, name="rlsr-seed0"):
    """An `rlsr evaluate --deployment-target` folder written by hand: run.json and 20 samples of
    medqa@validation and of medqa (test); confidence (i % 10) / 10, every fourth answer wrong,
    so both top answers (confidence 0.9) are right: the plain rule reaches 95 % on 2 answers, the
    Clopper-Pearson rule does not."""
    out = root / name
    for job in ("medqa@validation", "medqa"):
        (out / job).mkdir(parents=True)
        records = [{"id": f"{job}-{i}", "dataset": job, "correct": i % 4 != 0,
                    "scores": {"verbalized": (i % 10) / 10}} for i in range(20)]  # fmt: skip
        append_samples(out / job / "samples.jsonl", records)
    (out / "run.json").write_text(json.dumps({"model": "m", "adapter": None}))
    return out


def test_deploy_takes_the_risk_level_as_evaluate_spells_it(tmp_path, capsys):
    """`rlsr deploy --deployment-delta` (rlsr evaluate's name) sets the Clopper-Pearson risk
    level recorded in deployment.json. Catches the flag parsed but not passed on (the file would
    keep the default 0.1)."""
    from rlsr.cli import main

    evals = _evaluation_folder(tmp_path)
    common = ["deploy", "--validation", str(evals / "medqa@validation"), "--test",
              str(evals / "medqa"), "--deployment-target", "0.7"]  # fmt: skip
    out = tmp_path / "deployment"
    assert main([*common, "--deployment-delta", "0.3", "--output-dir", str(out)]) == 0
    assert capsys.readouterr().err == ""
    assert json.loads((out / "deployment.json").read_text())["provenance"]["delta"] == 0.3


def test_deploy_report_and_serve_report_write_into_output_dir_created_with_parents(
    tmp_path, capsys
):
    """One output convention: `--output-dir DIR` (missing parents created) with fixed names
    inside: DIR/deployment.json + .md, DIR/report.md ..., DIR/serve_report.json + .md; a file
    given as --output-dir is refused before anything is read."""
    from rlsr.cli import main

    evals = _evaluation_folder(tmp_path)
    common = ["deploy", "--validation", str(evals / "medqa@validation"), "--test",
              str(evals / "medqa")]  # fmt: skip
    new = tmp_path / "a" / "b"
    assert main([*common, "--deployment-target", "0.7", "--output-dir", str(new)]) == 0
    assert sorted(p.name for p in new.iterdir()) == ["deployment.json", "deployment.md"]
    assert capsys.readouterr().err == ""
    (tmp_path / "file").write_text("")
    assert (
        main([*common, "--deployment-target", "0.7", "--output-dir", str(tmp_path / "file")]) == 2
    )
    assert (
        capsys.readouterr().err
        == f"rlsr: error: --output-dir {tmp_path / 'file'} is a file; give a folder.\n"
    )

    run = tmp_path / "run-seed0" / "tiny"
    run.mkdir(parents=True)
    metrics = {"n": 2, "accuracy": 0.5, "primary_scorer": "verbalized", "scorers": {"verbalized":
               {"aurc": 0.4, "ece": 0.1, "acc@10": 1.0, "acc@25": 0.5, "acc@50": 0.5}}}  # fmt: skip
    (run / "metrics.json").write_text(json.dumps(metrics))
    assert main(["report", str(run.parent), "--output-dir", str(tmp_path / "r" / "s")]) == 0
    assert {"report.md", "report.csv"} <= {p.name for p in (tmp_path / "r" / "s").iterdir()}

    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(json.dumps({"decision": d, "tau": 0.5}) + "\n"
                           for d in ("answered", "abstained")))  # fmt: skip
    served = tmp_path / "e" / "f"
    assert main(["serve-report", str(log), "--tau", "0.5", "--output-dir", str(served)]) == 0
    assert sorted(p.name for p in served.iterdir()) == ["serve_report.json", "serve_report.md"]
    assert json.loads((served / "serve_report.json").read_text())["answered"] == 1


def test_a_flag_is_never_taken_for_the_longer_flag_it_begins(tmp_path, capsys):
    """``rlsr deploy --output X`` and ``rlsr report --output X`` are unknown flags (exit 2 before
    anything is read), not abbreviations of ``--output-dir``: a prefix would otherwise write into
    folder X where a user meant file X."""
    from rlsr.cli import main

    for argv in (["deploy", "--validation", "v", "--test", "t", "--deployment-target", "0.7"],
                 ["report", "d"]):  # fmt: skip
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--output", str(tmp_path / "x")])
        assert stop.value.code == 2
        assert "unrecognized arguments: --output" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_deployment_table_prints_its_legend_and_names_the_run_as_evaluate_does(tmp_path, capsys):
    """Wherever the deployment table is printed or written (rlsr deploy's stdout and .md,
    rlsr evaluate --deployment-target's), a dagger row comes with its legend right under the
    table (what the dagger means, what the row shows instead); the Method column is the
    evaluation folder's name (the folder of the samples' run.json) in both commands, not
    `model` in one and the folder in the other."""
    import argparse

    from rlsr.cli import evaluate_cli, main

    evals = _evaluation_folder(tmp_path)
    argv = ["deploy", "--validation", str(evals / "medqa@validation"), "--test",
            str(evals / "medqa"), "--deployment-target", "0.95", "--output-dir", str(tmp_path / "d")]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    table, legend = printed.strip().split("\n\n")
    assert legend == deployment.INFEASIBLE_LEGEND and legend.startswith("† the rule reached no")
    assert "| rlsr-seed0 | plain |" in table and "| rlsr-seed0† | clopper_pearson |" in table
    assert (tmp_path / "d" / "deployment.md").read_text().strip() == printed.strip()
    assert json.loads((tmp_path / "d" / "deployment.json").read_text())["method"] == "rlsr-seed0"
    # rlsr evaluate --deployment-target on the same folder: the same table, the same name
    args = argparse.Namespace(deployment_splits="validation,test", deployment_task="medqa",
                              deployment_target=0.95, deployment_delta=0.1, output_dir=str(evals),
                              allow_train_split=False)  # fmt: skip
    jobs = [("medqa@validation", "medqa", "validation"), ("medqa", "medqa", "test")]
    evaluate_cli._deploy_from_dirs(evals, args, jobs)
    assert capsys.readouterr().out.strip() == printed.strip()
    assert (evals / "deployment.md").read_text().strip() == printed.strip()
    # a table without a dagger row needs no legend
    feasible = deployment.deployment_rows([0.9] * 30, [True] * 30, [0.9], [True], 0.5)
    assert "†" not in deployment.deployment_markdown({"m": feasible})


# --------------------------------------------------------------------------- report


def test_method_from_dirname_and_labels(tmp_path):
    assert report.method_from_dirname("/x/rlsr-seed3") == "rlsr"
    assert report.method_from_dirname("rlcr_s2") == "rlcr"
    assert report.method_from_dirname("base") == "base"
    groups = report.group_runs(
        [str(tmp_path / "rlsr-seed0"), str(tmp_path / "b")], [f"BASE={tmp_path / 'b'}"]
    )
    assert set(groups) == {"rlsr", "BASE"}
    with pytest.raises(ValueError, match="NAME=DIR"):
        report.group_runs([], ["oops"])


def test_split_id_ood_infers_family():
    ids, oods = report.split_id_ood(["hotpot_modified", "hotpot_vanilla", "gsm8k", "trivia"])
    assert ids == ["hotpot_modified", "hotpot_vanilla"] and oods == ["gsm8k", "trivia"]
    ids, oods = report.split_id_ood(["gsm8k", "bigmath_digits", "trivia"])
    assert ids == ["gsm8k", "bigmath_digits"] and oods == ["trivia"]
    assert report.split_id_ood(["tiny"]) == (["tiny"], [])
    assert report.split_id_ood(["gsm8k", "trivia"], id_sets="gsm8k", ood_sets="trivia") == (
        ["gsm8k"],
        ["trivia"],
    )


def test_report_mean_std_and_id_ood_average(tmp_path):
    def write(run, dataset, aurc):
        d = tmp_path / run / dataset
        d.mkdir(parents=True)
        m = {"n": 2, "accuracy": 0.5, "primary_scorer": "verbalized",
             "scorers": {"verbalized": {"aurc": aurc, "ece": 0.1, "acc@10": 1.0, "acc@25": 0.5, "acc@50": 0.5}}}  # fmt: skip
        (d / "metrics.json").write_text(json.dumps(m))

    write("m-seed0", "hotpot_modified", 0.4)
    write("m-seed0", "trivia", 0.2)
    write("m-seed1", "hotpot_modified", 0.6)
    write("m-seed1", "trivia", 0.4)
    paths = report.build_report(
        [str(tmp_path / "m-seed0"), str(tmp_path / "m-seed1")], tmp_path / "r"
    )
    text = paths["markdown"].read_text()
    assert "| m | 0.500 ± 0.141 |" in text  # ID AURC over seeds: mean(0.4, 0.6), std ddof=1
    assert "OOD AURC↓" in text
    assert not paths["figure"].exists()  # no samples.jsonl -> no curves
    assert not paths["density"].exists() and "Controlled confidence gap" not in text

    # A prefix ending in `/` is a folder: the files go inside it (regression: they were
    # written beside it as report.md / report.csv).
    inside = report.build_report([str(tmp_path / "m-seed0")], f"{tmp_path / 'rep'}/")
    assert inside["markdown"] == tmp_path / "rep" / "report.md"
    assert (tmp_path / "rep" / "report.csv").is_file()


# --------------------------------------------------------------------------- backends / vLLM args


def test_resolve_adapter_picks_final_then_last_checkpoint(tmp_path):
    for step in (2, 10, 9):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "adapter_config.json").write_text('{"r": 1}')
    (tmp_path / "checkpoint-11").mkdir()  # no adapter inside: skipped
    assert backends.resolve_adapter(tmp_path) == tmp_path / "checkpoint-10"
    (tmp_path / "adapter_config.json").write_text('{"r": 1}')
    assert backends.resolve_adapter(tmp_path) == tmp_path
    assert backends.resolve_adapter(None) is None
    with pytest.raises(ValueError, match="no adapter_config"):
        backends.resolve_adapter(tmp_path / "checkpoint-11")
    assert backends.adapter_rank(tmp_path) == 1


def test_vllm_sampling_arguments():
    """Greedy is temperature 0; n, seed and the sampled token's own log-prob reach vLLM."""
    greedy = backends.vllm_sampling_kwargs(backends.Sampling(max_new_tokens=4096))
    assert greedy["temperature"] == 0.0 and greedy["max_tokens"] == 4096 and greedy["n"] == 1
    sc = backends.vllm_sampling_kwargs(
        backends.Sampling(16, temperature=0.7, n=8, seed=3, logprobs=True)
    )
    assert sc["n"] == 8 and sc["seed"] == 3 and sc["logprobs"] == 0


def test_sampling_validation():
    with pytest.raises(ValueError, match="greedy"):
        backends.Sampling(8, temperature=0.0, n=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        backends.Sampling(0)
    with pytest.raises(ValueError, match="unknown backend"):
        backends.make_backend("sglang", "m")


def test_dcs_prompt_adds_idk_option():
    from rlsr.evaluation.run.dcs import IDK_TEXT, dcs_prompt, option_continuations

    messages, full, idk = dcs_prompt("Which?\nA) x\nB) y", {"A": "x", "B": "y"})
    assert idk == "C" and full["C"] == IDK_TEXT
    assert messages[0]["content"].count("A) x") == 1  # the stem's own option lines are not repeated
    assert option_continuations(full) == ["A) x", "B) y", "C) I don't know"]


@pytest.mark.parametrize("n", [3, 4])
def test_plot_grid_curve_matches_all_orderings(n):
    """curve_on_grid at coverage k/n equals the risk of {conf >= t} for the smallest covering t."""
    from rlsr.evaluation.reports.plots import curve_on_grid

    conf = np.array([0.9, 0.5, 0.5, 0.1][:n])
    for ok_tuple in set(permutations([True, False, True, False][:n])):
        ok = np.array(ok_tuple)
        grid = np.arange(1, n + 1) / n
        risk = curve_on_grid(conf, ok, grid)
        for k, r in zip(range(1, n + 1), risk, strict=True):
            t = sorted(conf, reverse=True)[k - 1]
            assert r == pytest.approx(1 - np.mean(ok[conf >= t]))


def test_plotted_risk_steps_cover_zero_to_one_even_for_one_tie_group(tmp_path):
    """The drawn risk-coverage step spans (0, 1] at each group's risk and agrees with
    curve_on_grid, also with every confidence missing (one tie group), where the raw points
    drawn with where="post" give the only point no width (an empty PNG)."""
    import matplotlib.image

    from rlsr.evaluation.reports.plots import curve_on_grid, curve_steps, plot_dataset_risk_coverage
    from rlsr.metrics import selective as M

    x, y = curve_steps(M.risk_coverage_curve(np.zeros(8), np.arange(8) == 0))
    assert x.tolist() == [0.0, 1.0] and y.tolist() == [0.875, 0.875]

    conf, ok = np.array([0.9, 0.5, 0.5, 0.1]), np.array([True, False, True, False])
    x, y = curve_steps(M.risk_coverage_curve(conf, ok))
    assert x[0] == 0.0 and x[-1] == 1.0
    # where="pre": y[i] holds on (x[i-1], x[i]]; compare with the grid used for seed averages.
    grid = np.array([0.1, 0.25, 0.4, 0.6, 0.75, 0.9, 1.0])
    drawn = y[np.searchsorted(x, grid, side="left")]
    np.testing.assert_allclose(drawn, curve_on_grid(conf, ok, grid))

    records = [{"confidence": None, "correct": i == 0, "scores": {}} for i in range(8)]
    path = plot_dataset_risk_coverage(records, ["verbalized"], tmp_path / "rc.png")
    pixels = matplotlib.image.imread(path)[..., :3]
    line = np.abs(pixels - np.array([0.12, 0.47, 0.71])).sum(axis=-1) < 0.15  # matplotlib C0
    assert line.sum() > 200  # a visible horizontal line, not just the legend swatch


def test_cli_input_errors_are_one_line_not_tracebacks(capsys, tmp_path):
    """Unknown datasets, a missing adapter or report folder are one-line errors, not Python
    tracebacks."""
    from rlsr.cli import main

    assert main(["evaluate", "--model", str(tmp_path), "--tasks", "nope",
                 "--output-dir", str(tmp_path / "ev")]) == 2  # fmt: skip
    assert capsys.readouterr().err.startswith("rlsr: error: unknown task 'nope'")
    assert main(["report", str(tmp_path / "missing"), "--output-dir", str(tmp_path / "rep")]) == 2
    assert "rlsr: error:" in capsys.readouterr().err
    assert main(["evaluate", "--model", "/no/such/model", "--tasks", "tiny",
                 "--output-dir", str(tmp_path / "ev")]) == 2  # fmt: skip
    assert capsys.readouterr().err.startswith("rlsr: error: --model /no/such/model: no such folder")


# --------------------------------------------------------------------------- provenance


def test_adapter_fingerprint_matches_sha256sum_and_follows_content(tmp_path, monkeypatch):
    import shutil
    import subprocess

    from rlsr.evaluation.run.provenance import adapter_fingerprint

    adapter = tmp_path / "a"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 1}')
    (adapter / "adapter_model.safetensors").write_bytes(bytes(range(256)) * 10)
    (adapter / "README.md").write_text("not part of the adapter")
    listing = subprocess.run(
        "sha256sum adapter_config.json adapter_model.safetensors | sha256sum",
        shell=True, cwd=adapter, capture_output=True, text=True, check=True,
    ).stdout.split()[0]  # fmt: skip
    monkeypatch.chdir(tmp_path)
    fp = adapter_fingerprint("a")  # a relative path is stored resolved
    assert fp["path"] == str(adapter.resolve()) and fp["sha256"] == listing
    assert set(fp["files"]) == {"adapter_config.json", "adapter_model.safetensors"}
    shutil.copytree(adapter, tmp_path / "b")
    assert adapter_fingerprint(tmp_path / "b")["sha256"] == listing  # same files, same hash
    (tmp_path / "b" / "adapter_model.safetensors").write_bytes(b"\x00" * 2560)
    assert adapter_fingerprint(tmp_path / "b")["sha256"] != listing
    with pytest.raises(FileNotFoundError, match="no adapter_config.json"):
        adapter_fingerprint(tmp_path)


def test_unjudged_samples_count_wrong_and_are_counted_apart():
    # 16 samples, 4 right, 4 the verifier could not judge (one written before as "invalid"), one
    # error: accuracy counts the 5 without a verdict as wrong (0.250) and says so beside it
    status = ["correct"] * 4 + ["incorrect"] * 7 + ["unjudged"] * 3 + ["invalid", "error"]
    records = [
        {"id": str(i), "correct": s == "correct", "verify_status": s, "format_ok": True,
         "answer": "a", "scores": {"verbalized": (i % 5) / 4}}
        for i, s in enumerate(status)
    ]  # fmt: skip
    metrics = compute_metrics(records, n_resamples=0)
    assert metrics["accuracy"] == 0.25
    assert (metrics["unjudged"], metrics["verifier_failures"]) == (4, 1)
    assert metrics["unjudged_rate"] == 0.25 and metrics["accuracy_judged"] == 4 / 11
    assert "judge_invalid" not in metrics
    assert no_verdict_note(metrics) == (
        " (4 of 16 unjudged, 1 verifier failure, counted wrong; accuracy on the 11 judged 0.364)"
    )
    assert no_verdict_note(compute_metrics(records[:11], n_resamples=0)) == ""


class _Scripted:
    """A backend that answers the gold for the questions in ``right`` and "no" otherwise,
    always at confidence 0.9 (no model)."""

    eval_batch_size = 3
    tokenizer = None

    def __init__(self, golds: dict[str, str], right: set[str]):
        self.golds, self.right = golds, right

    def render(self, messages):
        return messages[-1]["content"]

    def generate(self, prompts, sampling):
        from rlsr.generation.backends import Generation

        out = []
        for p in prompts:
            answer = self.golds[p] if p in self.right else "no"
            text = (f"<think>t</think><answer>{answer}</answer><analysis>a</analysis>"
                    "<confidence>0.9</confidence>")  # fmt: skip
            out.append([Generation(text=text, token_ids=[1], finish_reason="stop")])
        return out


def test_progress_bar_shows_the_running_accuracy_of_the_file(tmp_path, monkeypatch):
    """The progress bar's acc is the accuracy of every sample written so far (resumed ones
    included), ending at the accuracy metrics.json reports; showing the last group's (here 0.0
    after a first group at 1.0) disagreed with the summary line printed after it."""
    from rlsr.data.loading import load_examples
    from rlsr.evaluation.run import runner
    from rlsr.verifiers import get_verifier

    shown = []

    class Bar:
        def update(self, n):
            pass

        def set_postfix(self, **kw):
            shown.append(kw["acc"])

        def close(self):
            pass

    monkeypatch.setattr(runner, "_progress", lambda *a, **k: Bar())
    examples = load_examples("tiny", limit=6)
    prompts = [m[-1]["content"] for m in examples["prompt"]]
    backend = _Scripted(dict(zip(prompts, examples["answer"], strict=True)), set(prompts[:3]))
    settings = runner.EvalSettings(batch_size=3, fallbacks=False, bootstrap=0, plot=False)
    kw = dict(verifier=get_verifier("exact_match"), verifier_name="exact_match",
              settings=settings, dataset_name="tiny")  # fmt: skip
    metrics = runner.evaluate_dataset(backend, examples, tmp_path / "run", **kw)
    assert shown == ["1.000", "0.500"] and metrics["accuracy"] == 0.5
    # resumed: the 6 saved samples count; the 2 new ones (both right) join them
    more = load_examples("tiny", limit=8)
    backend.golds.update({m[-1]["content"]: a for m, a in zip(more["prompt"], more["answer"],
                                                               strict=True)})  # fmt: skip
    backend.right |= {m[-1]["content"] for m in more["prompt"][6:]}
    shown.clear()
    metrics = runner.evaluate_dataset(backend, more, tmp_path / "run", **kw)
    assert shown == ["0.625"] and metrics["accuracy"] == 0.625


def test_deployment_provenance_refuses_a_system_prompt_it_cannot_name(tmp_path):
    """deployment.json names the system prompt the validation samples were rendered with, so
    ``rlsr serve`` renders the same one and checks a --system-prompt against it: a shipped
    prompt's text is named, a text rlsr does not know (a task's own prompt whose task was not
    loaded) is refused with the --tasks-dir fix. Catches a provenance that records null for it,
    which left serve without the certified prompt and its mismatch check without a reference."""
    from rlsr.core.prompts import get_system_prompt

    def records(text):
        return [{"prompt": [{"role": "system", "content": text}, {"role": "user", "content": "q"}],
                 "correct": True, "confidence": 0.9}]  # fmt: skip

    kw = {"scorer": "verbalized", "target": 0.8, "delta": 0.1, "model": "m"}
    shipped = records(get_system_prompt("simple"))
    named = deployment.deployment_provenance(tmp_path, shipped, shipped, **kw)
    assert named["system_prompt"] == "simple"
    unknown = records("You name capitals.")
    with pytest.raises(ValueError, match="--tasks-dir DIR"):
        deployment.deployment_provenance(tmp_path, unknown, unknown, **kw)
