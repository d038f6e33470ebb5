"""End-to-end tests of ``rlsr evaluate`` / ``rlsr report`` / ``rlsr deploy`` on the tiny model.

Real components throughout: the tiny random Qwen2 model (rlsr.data.tiny_models), a PEFT LoRA adapter,
the transformers backend, the registry's loaders and verifiers, the tiny model as LLM judge.
Nothing is mocked. The random model rarely emits tags, so the Sec. C.3 fallbacks fire naturally.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from itertools import permutations
from pathlib import Path

import numpy as np
import pytest

from rlsr.cli import evaluate_cli
from rlsr.cli import main as rlsr_main
from rlsr.core.parsing import parse_response
from rlsr.evaluation.run.runner import EvalSettings, summarise
from rlsr.evaluation.run.samples_io import append_samples, read_samples
from rlsr.evaluation.run.summary import compute_metrics
from rlsr.run.eval_protocol import PROTOCOL_FIELDS
from rlsr.serving.threshold import provenance_mismatches

pytestmark = pytest.mark.timeout(300)

FAST = [
    "--max-new-tokens",
    "8",
    "--fallback-max-new-tokens",
    "4",
    "--bootstrap",
    "20",
    "--no-progress",
]


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A fake training output dir: two LoRA checkpoints; the later one must be picked."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("train_run")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = get_peft_model(base, LoraConfig(r=1, lora_alpha=32, target_modules="all-linear"))
    model.save_pretrained(root / "checkpoint-2")
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # a non-zero adapter, so it changes the outputs
    model.save_pretrained(root / "checkpoint-10")
    return root


@pytest.fixture(scope="module")
def evaluated(tiny_model_dir, run_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("eval") / "rlsr-seed0"
    argv = ["evaluate", "--model", str(tiny_model_dir), "--adapter", str(run_dir),
            "--tasks", "tiny", "--output-dir", str(out), "--limit", "6", "--batch-size", "4",
            "--scorers", "verbalized,logprob,consistency", "--consistency-k", "2", *FAST]  # fmt: skip
    assert rlsr_main(argv) == 0
    return out


def brute_force_summary(records: list[dict]) -> dict:
    """The metrics.json summary computed from samples by brute force, from docs/metrics.md's
    definitions (not rlsr.metrics.selective): a missing confidence is 0.0; ties are resolved by averaging
    over every order of the samples that sorts confidences descending."""
    conf = [0.0 if r["confidence"] is None else r["confidence"] for r in records]
    ok = [float(bool(r["correct"])) for r in records]
    n = len(records)
    orders = [p for p in permutations(range(n))
              if all(conf[p[i]] >= conf[p[i + 1]] for i in range(n - 1))]  # fmt: skip

    def mean_over_orders(statistic) -> float:
        return float(np.mean([statistic(p) for p in orders]))

    def top_accuracy(p, m: int) -> float:
        return float(np.mean([ok[i] for i in p[:m]]))

    edges = np.linspace(0, 1, 11)  # bins [edge_b, edge_b+1), outer edges at -inf / +inf
    bins = [sum(c >= e for e in edges[1:10]) for c in conf]
    ece = sum(
        len(members) / n * abs(np.mean([ok[i] for i in members]) - np.mean([conf[i] for i in members]))
        for b in range(10) if (members := [i for i in range(n) if bins[i] == b])
    )  # fmt: skip
    pairs = [(i, j) for i in range(n) for j in range(n) if ok[i] and not ok[j]]
    auroc = (np.mean([1.0 if conf[i] > conf[j] else 0.5 if conf[i] == conf[j] else 0.0
                      for i, j in pairs]) if pairs else None)  # fmt: skip
    return {
        "accuracy": float(np.mean(ok)),
        "aurc": mean_over_orders(lambda p: np.mean([1 - top_accuracy(p, k) for k in range(1, n + 1)])),
        "acc@10": mean_over_orders(lambda p: top_accuracy(p, math.ceil(0.10 * n))),
        "acc@25": mean_over_orders(lambda p: top_accuracy(p, math.ceil(0.25 * n))),
        "acc@50": mean_over_orders(lambda p: top_accuracy(p, math.ceil(0.50 * n))),
        "ece": float(ece),
        "brier": float(np.mean([(c - o) ** 2 for c, o in zip(conf, ok, strict=True)])),
        "auroc": auroc,
    }  # fmt: skip


def assert_summary_matches(metrics: dict, records: list[dict]) -> None:
    expected = brute_force_summary(records)
    got = {"accuracy": metrics["accuracy"], **metrics["scorers"]["verbalized"]}
    for key, value in expected.items():
        assert got[key] == (None if value is None else pytest.approx(value, abs=1e-12)), key


def test_metrics_json_summary_matches_brute_force(evaluated, tmp_path):
    """metrics.json equals a brute-force recomputation, not only the compute_metrics that wrote
    it (which would pass a summary filing the 25 % value under acc@10). Checked on the run's own
    samples and on
    the same samples with chosen confidences (ties, a missing one) and correctness, written
    through the same summarise() that `rlsr evaluate` calls."""
    d = evaluated / "tiny"
    records = read_samples(d / "samples.jsonl")
    assert_summary_matches(json.loads((d / "metrics.json").read_text()), records)

    chosen = [(0.9, True), (0.7, True), (0.7, False), (0.3, True), (0.3, False), (None, False)]
    edited = [{**r, "confidence": c, "correct": ok, "scores": {"verbalized": c}}
              for r, (c, ok) in zip(records, chosen, strict=True)]  # fmt: skip
    append_samples(tmp_path / "samples.jsonl", edited)
    settings = EvalSettings(bootstrap=0, progress=False, plot=False)
    summarise(tmp_path, settings, "tiny")
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    expected = brute_force_summary(edited)
    assert (expected["acc@10"], expected["acc@25"], expected["acc@50"]) == (1.0, 0.75, 2 / 3)
    assert_summary_matches(metrics, edited)


def test_evaluate_writes_every_file_and_metrics_match_samples(evaluated, run_dir):
    run = json.loads((evaluated / "run.json").read_text())
    adapter = (run_dir / "checkpoint-10").resolve()
    assert run["adapter"] == str(adapter)
    # sha256 of the `sha256sum adapter_config.json adapter_model.safetensors` listing
    listing = "".join(
        f"{hashlib.sha256((adapter / name).read_bytes()).hexdigest()}  {name}\n"
        for name in ("adapter_config.json", "adapter_model.safetensors")
    )
    assert run["adapter_sha256"] == hashlib.sha256(listing.encode()).hexdigest()
    d = evaluated / "tiny"
    assert (d / "risk_coverage.png").stat().st_size > 1000
    records = read_samples(d / "samples.jsonl")
    assert [r["id"] for r in records] == [f"tiny-test-{i}" for i in range(6)]
    for r in records:
        assert {
            "prompt",
            "response",
            "answer",
            "confidence",
            "correct",
            "format_ok",
            "fallbacks",
        } <= set(r)
        assert set(r["scores"]) == {"verbalized", "logprob", "consistency"}
        assert r["scores"]["verbalized"] == r["confidence"]
        assert r["num_tokens"] <= 8
        assert len(r["consistency_answers"]) == 2
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["schema_version"] == 1 and metrics["n"] == 6
    assert set(metrics["scorers"]) == {"verbalized", "logprob", "consistency"}
    recomputed = compute_metrics(
        records, scorers=("verbalized", "logprob", "consistency"), n_resamples=20
    )
    for scorer, values in recomputed["scorers"].items():
        for key in ("aurc", "ece", "acc@10", "acc@25", "acc@50", "brier", "missing_confidence"):
            assert metrics["scorers"][scorer][key] == pytest.approx(values[key]), (scorer, key)
        assert metrics["scorers"][scorer]["ci"]["aurc"] == pytest.approx(values["ci"]["aurc"])
    assert metrics["accuracy"] == pytest.approx(np.mean([r["correct"] for r in records]))
    assert metrics["fallbacks"]["answer"] == sum("answer" in r["fallbacks"] for r in records)


def test_fallbacks_are_recorded_for_responses_without_tags(evaluated):
    records = read_samples(evaluated / "tiny" / "samples.jsonl")
    untagged = [r for r in records if parse_response(r["response"]).answer is None]
    assert untagged, "the random tiny model should produce responses without <answer>"
    for r in records:
        parsed = parse_response(r["response"])
        assert ("answer" in r["fallbacks"]) == (parsed.answer is None)
        if parsed.answer is None:
            assert "answer" in r["fallback_text"]
            assert r["format_ok"] is False
        if parsed.confidence is None:
            # either the answer fallback's text carried a confidence, or the confidence fallback ran
            assert "confidence" in r["fallbacks"] or r["confidence"] is not None
        else:
            assert "confidence" not in r["fallbacks"]


def test_adapter_changes_outputs_and_resume_after_crash(tiny_model_dir, run_dir, tmp_path):
    from rlsr.data.loading import load_examples
    from rlsr.evaluation.run.runner import EvalSettings, evaluate_dataset
    from rlsr.generation.backends import TransformersBackend, resolve_adapter
    from rlsr.verifiers import get_verifier

    examples = load_examples("tiny", limit=7)
    backend = TransformersBackend(str(tiny_model_dir), resolve_adapter(run_dir), batch_size=3)
    settings = EvalSettings(max_new_tokens=8, fallback_max_new_tokens=4, batch_size=3,
                            bootstrap=0, progress=False, plot=False)  # fmt: skip
    kw = dict(
        verifier=get_verifier("exact_match"),
        verifier_name="exact_match",
        settings=settings,
        dataset_name="tiny",
    )

    def crash_at_second_batch(k: int) -> None:
        if k == 1:
            raise KeyboardInterrupt("simulated crash")

    crashed = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        evaluate_dataset(backend, examples, crashed, before_batch=crash_at_second_batch, **kw)
    samples = crashed / "samples.jsonl"
    first_batch = samples.read_text()
    assert len(first_batch.splitlines()) == 3
    with open(samples, "a") as fh:  # a write cut off mid-line by the crash
        fh.write('{"id": "tiny-test-3", "response": "half a rec')
    evaluate_dataset(backend, examples, crashed, **kw)
    resumed = samples.read_text()
    assert resumed.startswith(first_batch)
    ids = [r["id"] for r in read_samples(samples)]
    assert ids == [f"tiny-test-{i}" for i in range(7)]  # nothing lost, nothing twice

    fresh = tmp_path / "fresh"
    evaluate_dataset(backend, examples, fresh, **kw)
    assert read_samples(samples) == read_samples(fresh / "samples.jsonl")  # greedy: identical

    base = TransformersBackend(str(tiny_model_dir), batch_size=3)
    evaluate_dataset(base, examples, tmp_path / "base", **kw)
    base_responses = [r["response"] for r in read_samples(tmp_path / "base" / "samples.jsonl")]
    assert base_responses != [r["response"] for r in read_samples(fresh / "samples.jsonl")]


def test_llm_judge_path_with_tiny_judge(tiny_model_dir, tmp_path):
    from rlsr.core.prompts import render_judge_prompt
    from rlsr.verifiers import quote_answer

    out = tmp_path / "judged"
    argv = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "tiny", "--output-dir", str(out),
            "--limit", "4", "--verifier", "tiny=llm_judge", "--judge-model", str(tiny_model_dir),
            "--judge-backend", "transformers", *FAST]  # fmt: skip
    assert rlsr_main(argv) == 0
    records = read_samples(out / "tiny" / "samples.jsonl")
    metrics = json.loads((out / "tiny" / "metrics.json").read_text())
    for r in records:
        assert r["verify_status"] in {"correct", "incorrect", "unjudged", "missing"}
        if r["answer"] is not None:
            assert isinstance(r["judge_output"], str)
    assert metrics["unjudged"] == sum(r["verify_status"] == "unjudged" for r in records)
    # The judge saw question + gold + the quoted extracted answer only, never the response.
    from rlsr.data.loading import load_examples
    from rlsr.evaluation.run.judge import RecordingJudge, backend_judge_fn
    from rlsr.evaluation.run.runner import EvalSettings, evaluate_dataset
    from rlsr.generation.backends import TransformersBackend
    from rlsr.verifiers import LLMJudgeVerifier

    backend = TransformersBackend(str(tiny_model_dir))
    judge = RecordingJudge(backend_judge_fn(backend))
    settings = EvalSettings(max_new_tokens=8, fallback_max_new_tokens=4, bootstrap=0,
                            progress=False, plot=False)  # fmt: skip
    evaluate_dataset(backend, load_examples("tiny", limit=4), tmp_path / "api",
                     verifier=LLMJudgeVerifier(judge), verifier_name="llm_judge", settings=settings,
                     judge=judge, dataset_name="tiny")  # fmt: skip
    api_records = read_samples(tmp_path / "api" / "samples.jsonl")
    expected = [render_judge_prompt(r["question"], r["gold"], quote_answer(r["answer"], 1000))
                for r in api_records if r["answer"] is not None]  # fmt: skip
    assert judge.last_prompts == expected and expected
    assert [r["judge_output"] for r in api_records if r["answer"] is not None] == judge.last_outputs
    assert [r["response"] for r in api_records] == [r["response"] for r in records]


def _write_medqa(folder: Path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("validation", "test"):
        with open(folder / f"{split}.jsonl", "w") as fh:
            for i in range(n):
                options = {k: f"drug {k.lower()}{i}" for k in "ABCD"}
                row = {"id": f"{split}-{i}", "question": f"Patient {i} has fever. Which drug?",
                       "options": options, "answer_idx": "ABCD"[int(rng.integers(4))]}  # fmt: skip
                fh.write(json.dumps(row) + "\n")


def test_deployment_and_dcs_on_mcq(tiny_model_dir, tmp_path, capsys):
    """Also a regression: `--tasks medqa --deployment-target` evaluated the test split twice
    (as `medqa` and `medqa@test`). `medqa` (its default split, test) serves deployment.

    The random tiny model states no confidence, so the deployment of `rlsr evaluate` is refused
    (evaluated results kept); the samples are then given confidences (the only edit: what a
    model that states them would have written) and `rlsr deploy` certifies from them."""
    data = tmp_path / "medqa"
    _write_medqa(data, 5, 0)
    out = tmp_path / "deploy"
    argv = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "medqa", "--output-dir", str(out),
            "--data-path", f"medqa={data}", "--dcs", "--deployment-target", "0.5", *FAST]  # fmt: skip
    assert rlsr_main(argv) == 2
    assert "no verbalized confidence in any of its 5 samples" in capsys.readouterr().err
    assert not (out / "deployment.json").exists()
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["medqa", "medqa@validation"]
    assert sorted(json.loads((out / "summary.json").read_text())) == ["medqa", "medqa@validation"]
    for job, split in (("medqa@validation", "validation"), ("medqa", "test")):
        records = read_samples(out / job / "samples.jsonl")
        assert [r["id"] for r in records] == [f"{split}-{i}" for i in range(5)]
        for i, r in enumerate(records):
            r["scores"]["verbalized"] = r["confidence"] = (i + 1) / 5
        (out / job / "samples.jsonl").unlink()
        append_samples(out / job / "samples.jsonl", records)
    val = read_samples(out / "medqa@validation" / "samples.jsonl")
    for r in val:
        d = r["dcs"]
        assert set(d["log_likelihoods"]) == set("ABCDE")  # E = the IDK option
        assert d["p_correct"] + d["p_wrong"] + d["p_idk"] == pytest.approx(1.0)
        assert d["score"] == pytest.approx((d["p_correct"] - d["p_wrong"]) * (1 - d["p_idk"]))
    metrics = json.loads((out / "medqa@validation" / "metrics.json").read_text())
    assert metrics["dcs"]["n"] == 5
    argv = ["deploy", "--validation", str(out / "medqa@validation"), "--test", str(out / "medqa"),
            "--deployment-target", "0.5", "--output-dir", str(tmp_path / "dep")]  # fmt: skip
    assert rlsr_main(argv) == 0
    deployment = json.loads((tmp_path / "dep" / "deployment.json").read_text())
    assert [row["rule"] for row in deployment["rows"]] == [
        "plain",
        "clopper_pearson",
        "plain+temperature",
    ]
    assert "τ" in (tmp_path / "dep" / "deployment.md").read_text()
    # the deployment of the same samples as rlsr evaluate --deployment-target makes it
    args = argparse.Namespace(deployment_splits="validation,test", deployment_task="medqa",
                              deployment_target=0.5, deployment_delta=0.1,
                              allow_train_split=False)  # fmt: skip
    evaluate_cli._deploy_from_dirs(out, args, [("medqa@validation", "medqa", "validation"),
                                               ("medqa", "medqa", "test")])  # fmt: skip
    again = json.loads((out / "deployment.json").read_text())
    assert again["rows"] == deployment["rows"]
    # provenance for `rlsr serve`: what the threshold was computed from, and what it promises
    prov = deployment["provenance"]
    assert prov["model"] == str(Path(tiny_model_dir).resolve()) and prov["adapter"] is None
    assert (prov["validation_source"], prov["test_source"]) == ("medqa@validation", "medqa@test")
    assert (prov["n_validation"], prov["n_test"], prov["scorer"]) == (5, 5, "verbalized")
    assert prov["system_prompt"] == "long"  # medqa's registry prompt, read from the samples
    assert prov["decoding"] == {"max_new_tokens": 8, "temperature": 0.0, "top_p": 1.0,
                                "fallbacks": True, "fallback_max_new_tokens": 4}  # fmt: skip
    # ... and the whole protocol it was certified under (rlsr serve rebuilds its decoding from it)
    assert set(prov["protocol"]) == set(PROTOCOL_FIELDS) - {"system_prompt"}
    assert {k: prov["protocol"][k] for k in prov["decoding"]} == prov["decoding"]
    assert (prov["target_accuracy"], prov["delta"]) == (0.5, 0.1)
    assert again["provenance"]["model"] == prov["model"]
    assert all(row["guarantee"] for row in deployment["rows"])
    # ... which `rlsr serve` compares with what it is asked to serve
    assert provenance_mismatches(prov, model=str(tiny_model_dir), adapter=None) == []
    assert provenance_mismatches(prov, model=str(tmp_path), adapter=None)


def test_report_over_two_evaluation_dirs(evaluated, tiny_model_dir, tmp_path):
    second = evaluated.parent / "rlsr-seed1"
    argv = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "tiny", "--output-dir", str(second),
            "--limit", "6", "--temperature", "0.7", "--seed", "1", *FAST]  # fmt: skip
    assert rlsr_main(argv) == 0
    base = evaluated.parent / "base"
    assert rlsr_main(["evaluate", "--model", str(tiny_model_dir), "--tasks", "tiny",
                      "--output-dir", str(base), "--limit", "6", *FAST]) == 0  # fmt: skip
    prefix = tmp_path / "report"
    assert (
        rlsr_main(
            [
                "report",
                str(evaluated),
                str(second),
                "--label",
                f"BASE={base}",
                "--output-dir",
                str(prefix),
            ]
        )
        == 0
    )
    md = (prefix / "report.md").read_text()
    assert "| rlsr |" in md and "| BASE |" in md and "±" in md  # two seeds -> mean ± std
    assert (prefix / "report_risk_coverage.png").stat().st_size > 1000
    # Tab. 2 (controlled gap over the 6 shared questions) and Fig. 3 (densities) on real samples.
    assert "| tiny | rlsr |" in md.split("## Controlled confidence gap")[1]
    assert (prefix / "report_confidence_density.png").stat().st_size > 1000
    import csv

    rows = list(csv.DictReader(open(prefix / "report.csv")))
    metrics = [json.loads((d / "tiny" / "metrics.json").read_text()) for d in (evaluated, second)]
    accuracies = [m["accuracy"] for m in metrics]
    row = next(r for r in rows if r["method"] == "rlsr" and r["dataset"] == "tiny"
               and r["metric"] == "accuracy")  # fmt: skip
    assert float(row["mean"]) == pytest.approx(np.mean(accuracies))
    assert float(row["std"]) == pytest.approx(np.std(accuracies, ddof=1), nan_ok=True)
    assert row["runs"] == "2"
    # the random tiny model states no confidence: its confidence metrics are n/a, not the
    # numbers of every answer tied at 0 (docs/evaluation.md, "Runs that give no confidence")
    assert all(m["scorers"]["verbalized"]["missing_confidence"] == m["n"] for m in metrics)
    row = next(r for r in rows if r["method"] == "rlsr" and r["dataset"] == "tiny"
               and r["metric"] == "aurc")  # fmt: skip
    assert math.isnan(float(row["mean"])) and row["runs"] == "2"
    per_dataset = md.split("## Per dataset")[1].split("![")[0]
    (line,) = [x for x in per_dataset.splitlines() if x.startswith("| tiny (ID) | rlsr | 6 |")]
    assert line.endswith("| n/a | n/a | n/a | n/a | n/a |")


def test_score_matches_generation_logprobs_and_left_padding(tiny_model_dir):
    """Teacher-forced ``score`` of a greedy continuation equals the log-probs recorded while
    generating it, also when the batch mixes prompt lengths (left padding must not leak)."""
    from rlsr.generation.backends import Sampling, TransformersBackend

    backend = TransformersBackend(str(tiny_model_dir), batch_size=3)
    prompts = [
        backend.render([{"role": "user", "content": q}])
        for q in ("hi", "what is 2 + 2?", "x " * 30)
    ]
    gens = [g[0] for g in backend.generate(prompts, Sampling(6, logprobs=True))]
    alone = backend.generate(prompts[:1], Sampling(6))[0][0]
    assert alone.token_ids == gens[0].token_ids  # batching with longer prompts changes nothing
    checked = 0
    for prompt, gen in zip(prompts, gens, strict=True):
        if backend.tokenizer(gen.text, add_special_tokens=False)["input_ids"] != gen.token_ids:
            continue  # text does not re-tokenize to the same ids; nothing to compare
        scored = backend.score([prompt], [gen.text])[0]
        np.testing.assert_allclose(scored, gen.logprobs, atol=1e-4)
        checked += 1
    assert checked >= 1


def test_model_alias_tiny_resolves_to_the_local_tiny_model(tiny_model_dir, run_dir, tmp_path):
    """`--model tiny` / `tiny-warm` name the models of recipe=tiny (as model.name_or_path does in
    training), so the documented tiny evaluation needs no cache path. Without the alias the name
    went to the hub and failed."""
    out = tmp_path / "alias"
    argv = ["evaluate", "--model", "tiny", "--adapter", str(run_dir), "--tasks", "tiny",
            "--output-dir", str(out), "--limit", "2", "--no-fallbacks", *FAST]  # fmt: skip
    assert rlsr_main(argv) == 0
    assert len(read_samples(out / "tiny" / "samples.jsonl")) == 2


def test_output_dir_of_another_configuration_is_refused_unless_overwrite(
    tiny_model_dir, run_dir, tmp_path, capsys
):
    """Another configuration into a folder holding results is refused (one line naming the
    fields), --overwrite moves the old results aside when the run starts, and the same
    configuration resumes. Catches a run with an adapter into a folder of base-model results
    that exits 0, mixes both runs' samples in one samples.jsonl and relabels run.json, and a
    failing run that overwrites run.json."""
    out = tmp_path / "ev"
    base = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "tiny", "--output-dir",
            str(out), "--limit", "2", *FAST]  # fmt: skip
    assert rlsr_main(base) == 0
    samples, run_file = out / "tiny" / "samples.jsonl", out / "run.json"
    before = (samples.read_text(), run_file.read_text())
    capsys.readouterr()

    def refused(argv, *fields):
        assert rlsr_main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(
            f"rlsr: error: --output-dir {out} holds results of another configuration ("
        ), err
        for field in fields:
            assert field in err[0]
        assert "--overwrite" in err[0]
        assert (samples.read_text(), run_file.read_text()) == before  # nothing touched

    refused([*base, "--adapter", str(run_dir)], "adapter_sha256: none -> ")
    refused([*base, "--max-new-tokens", "9"], "max_new_tokens: 8 -> 9")
    refused([*base, "--system-prompt", "long"], "system_prompt: none -> 'long'")
    # a failing run (missing data file) with --overwrite moves nothing and writes nothing
    assert rlsr_main([*base, "--overwrite", "--data-path", f"tiny={tmp_path / 'no.jsonl'}"]) == 2
    assert (samples.read_text(), run_file.read_text()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["ev"]

    # the same configuration resumes (a larger --limit is not a different configuration)
    assert rlsr_main([*base[: -len(FAST)], "--limit", "3", *FAST]) == 0
    assert samples.read_text().startswith(before[0])
    assert len(read_samples(samples)) == 3

    assert rlsr_main([*base, "--adapter", str(run_dir), "--overwrite"]) == 0
    (old,) = [p for p in tmp_path.iterdir() if p.name.startswith("ev.old-")]
    assert len(read_samples(old / "tiny" / "samples.jsonl")) == 3  # the base run, moved aside
    assert json.loads((old / "run.json").read_text())["adapter"] is None
    run = json.loads(run_file.read_text())
    assert run["adapter"] == str((run_dir / "checkpoint-10").resolve())
    assert len(read_samples(samples)) == 2  # only the adapter run's samples
