"""Dataset registry, loaders and prompts (rlsr.data), offline on fixtures in the upstream schemas.

Fixtures (rlsr/data/fixtures/upstream/<name>/<split>.jsonl) are hand-written rows with the
column names and types of the published copies (read from damanimehul/RLCR data/*/
dataset_info.json); they go through the same ``load_examples(name, path=...)`` path users hit.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import datasets
import pytest

from rlsr.core.prompts import LONG_SYSTEM_PROMPT, SIMPLE_SYSTEM_PROMPT, SYSTEM_PROMPTS
from rlsr.data import (
    GROUPS,
    REGISTRY,
    get_spec,
    group_system_prompt,
    resolve_tasks,
    tasks_system_prompt,
)
from rlsr.data.formatting import (
    FORMATTERS,
    USER_PROMPT_TEMPLATE,
    count_hotpot_paragraphs,
    parse_rendered_options,
    render_hotpot_problem,
)
from rlsr.data.loading import (
    FIXTURES_DIR,
    DatasetUnavailableError,
    load_examples,
    row_verification_inputs,
    verification_inputs,
)
from tools.tiny.data import (
    CANDIDATE_TIERS,
    CANDIDATES_NONE_TIER,
    MISSING_SPLIT_FACTS,
    MISSING_SPLIT_OBJECTS,
    TINY_CANDIDATES_SIZES,
    TINY_MISSING_SIZES,
    TINY_SIZES,
    candidates_tier,
    generate_tiny,
    generate_tiny_candidates,
    tier_name,
    write_tiny,
)

os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
datasets.disable_progress_bars()

UPSTREAM = FIXTURES_DIR / "upstream"
HUB_DATASETS = [n for n, s in REGISTRY.items() if s.hf_id is not None]


def fixture(name: str, **kw) -> datasets.Dataset:
    return load_examples(name, path=UPSTREAM / name, **kw)


# --- registry -----------------------------------------------------------------------------

# (default split, its published size) per dataset: paper Sec. C.4.1, C.5.1, C.6.1; UtilityBench, arXiv 2610.25924.
PAPER_SIZES = {
    "hotpot_modified": {"train": 20000, "test": 500},
    "hotpot_vanilla": {"test": 1000},
    "bigmath_digits": {"test": 1000},
    "math500": {"test": 500},
    "gsm8k": {"test": 1319},
    "trivia": {"test": 2000},
    "simpleqa": {"test": 4326},
    "commonsenseqa": {"test": 1221},
    "gpqa": {"test": 448},
    "medqa": {"train": 10178, "validation": 1272, "test": 1273},
    "utilitybench": {"train": 15000},
    "tiny": {"train": 200, "test": 50},
    "tiny-missing": {"train": 200, "validation": 100, "test": 100},
    "tiny-candidates": {"train": 200, "validation": 80, "test": 80},
}
# Sec. C.2 (C.6.1 for MedQA: letter match in the deployment study).
PAPER_VERIFIERS = {
    "hotpot_modified": "exact_match",
    "hotpot_vanilla": "exact_match",
    "bigmath_digits": "math",
    "math500": "math",
    "gsm8k": "math",
    "trivia": "llm_judge",
    "simpleqa": "llm_judge",
    "commonsenseqa": "llm_judge",
    "gpqa": "llm_judge",
    "medqa": "mcq",
    "utilitybench": "llm_judge",
    "tiny": "exact_match",
    "tiny-missing": "exact_match",
    "tiny-candidates": "exact_match",
}


def test_registry_covers_paper_datasets_with_sizes_and_verifiers():
    assert set(REGISTRY) == set(PAPER_SIZES)
    for name, sizes in PAPER_SIZES.items():
        spec = get_spec(name)
        for split, n in sizes.items():
            assert spec.sizes[split] == n, (name, split)
        assert spec.verifier == PAPER_VERIFIERS[name]
        assert spec.split in spec.sizes and spec.size == spec.sizes[spec.split]
        assert spec.formatter in FORMATTERS
        assert spec.system_prompt in SYSTEM_PROMPTS
    assert set(get_spec("commonsenseqa").alt_verifiers) == {"mcq"}
    assert set(get_spec("gpqa").alt_verifiers) == {"mcq"}
    assert get_spec("medqa").alt_verifiers == ("llm_judge",)


def test_system_prompts_follow_paper():
    """C.1/C.5: long prompt for HotPotQA(-Modified), simple for Big-Math; C.6.2: MedQA long."""
    long_ones = {n for n, s in REGISTRY.items() if s.system_prompt == "long"}
    assert long_ones == {"hotpot_modified", "hotpot_vanilla", "medqa"}
    assert group_system_prompt("hotpot-ood") == "long"
    assert group_system_prompt("bigmath-ood") == "simple"
    with pytest.raises(ValueError, match="unknown group"):
        group_system_prompt("math")


def test_a_list_of_groups_keeps_the_training_prompt():
    """Sec. C.5: `hotpot-id,hotpot-ood` is one HotPotQA-trained model's evaluation, so every
    dataset (math500 and gpqa included, whose own prompt is "simple") gets the long prompt."""
    assert tasks_system_prompt("hotpot-id,hotpot-ood") == "long"
    assert tasks_system_prompt(["bigmath-id", "trivia"]) == "simple"
    assert tasks_system_prompt("hotpot-ood") == "long"
    assert tasks_system_prompt("math500,gsm8k") is None
    with pytest.raises(ValueError, match="different training domains.*--system-prompt"):
        tasks_system_prompt("hotpot-id,bigmath-ood")


def test_groups_match_section_4_1_and_table_1():
    # Tab. 1 caption: 2 ID / 6 OOD for HotPotQA, 3 ID / 5 OOD for BigMath.
    assert GROUPS["hotpot-id"] == ("hotpot_modified", "hotpot_vanilla")
    assert set(GROUPS["hotpot-ood"]) == {
        "simpleqa",
        "trivia",
        "gpqa",
        "math500",
        "gsm8k",
        "commonsenseqa",
    }
    assert set(GROUPS["bigmath-id"]) == {"bigmath_digits", "math500", "gsm8k"}
    assert set(GROUPS["bigmath-ood"]) == {
        "hotpot_vanilla",
        "trivia",
        "simpleqa",
        "commonsenseqa",
        "gpqa",
    }
    for domain in ("hotpot", "bigmath"):
        assert not set(GROUPS[f"{domain}-id"]) & set(GROUPS[f"{domain}-ood"])
    assert get_spec("gsm8k").groups == ("hotpot-ood", "bigmath-id")


def test_resolve_tasks():
    assert resolve_tasks("hotpot-id") == ["hotpot_modified", "hotpot_vanilla"]
    assert resolve_tasks("gsm8k, math500,gsm8k") == ["gsm8k", "math500"]
    assert resolve_tasks(["bigmath-id", "tiny"]) == [
        "bigmath_digits",
        "math500",
        "gsm8k",
        "tiny",
    ]
    with pytest.raises(ValueError, match="unknown task 'mmlu'"):
        resolve_tasks("gsm8k,mmlu")
    with pytest.raises(ValueError, match="no task named"):
        resolve_tasks(" , ")


# --- loading: every dataset from its upstream-schema fixture --------------------------------


@pytest.mark.parametrize("name", HUB_DATASETS)
def test_fixture_loads_into_contract(name):
    spec = get_spec(name)
    ds = fixture(name, split=spec.split)
    assert len(ds) >= 1
    assert ds.column_names[:6] == ["id", "prompt", "question", "answer", "answers", "verifier"]
    ids = ds["id"]
    assert len(set(ids)) == len(ids) and all(isinstance(i, str) and i for i in ids)
    system = SYSTEM_PROMPTS[spec.system_prompt]
    for row in ds:
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["prompt"][0]["content"] == system
        user = row["prompt"][1]["content"]
        assert user.startswith("\n\nPROBLEM: ") and user.endswith("\n\n")
        assert row["verifier"] == spec.verifier
        assert (
            isinstance(row["answers"], list)
            and row["answer"] in row["answers"]
            or name == ("utilitybench")
        )
        assert row["question"]
        if name in ("commonsenseqa", "gpqa", "medqa"):
            options = json.loads(row["options"])
            assert row["answer_letter"] in options
            for letter, text in options.items():
                assert f"{letter}) {text}" in user
        if name != "utilitybench":
            assert row["answer"]


def test_contract_values_per_schema(tmp_path):
    trivia = fixture("trivia")[0]
    assert trivia["answer"] == "Mars" and trivia["answers"] == ["Mars", "Planet Mars", "mars"]
    assert trivia["id"] == "tc_9001" and trivia["question"].startswith("Which planet")
    math = fixture("math500")[0]
    assert math["answer"] == "\\frac{5}{6}" and math["id"] == "test/prealgebra/9001.json"
    assert fixture("gsm8k")[2]["answer"] == "4.5"
    assert fixture("bigmath_digits")[0]["id"] == "bigmath_digits-test-0"
    csqa = fixture("commonsenseqa")[0]
    assert csqa["answer"] == "Option B which is : entrance hall"
    assert csqa["answer_letter"] == "B" and set(json.loads(csqa["options"])) == set("ABCDE")
    gpqa = fixture("gpqa")[2]
    # a multi-line option text survives the A)-D) parsing
    assert json.loads(gpqa["options"])["D"] == "ATP synthase" and gpqa["answer_letter"] == "D"
    medqa = fixture("medqa", split="validation")[1]
    assert medqa["answer"] == "C) Vitamin C" and medqa["answer_letter"] == "C"
    assert medqa["question"] == "Which vitamin deficiency causes scurvy?"
    other = load_examples("medqa", path=UPSTREAM / "medqa_questions_schema")[0]
    assert other["prompt"][1]["content"] == medqa["prompt"][1]["content"]
    assert other["answer"] == medqa["answer"]
    ub = fixture("utilitybench")
    assert ub["answerable"] == [True, False, True] and ub["cost"] == [6.5, 0.4, 1.1]
    assert ub[1]["answer"] == "" and ub[1]["answers"] == []
    # explicit types: a batch of only unanswerable rows (empty answers) cannot change them
    lines = (UPSTREAM / "utilitybench" / "train.jsonl").read_text().splitlines()
    (tmp_path / "train.jsonl").write_text(lines[1] + "\n")
    only_unanswerable = load_examples("utilitybench", path=tmp_path)
    assert only_unanswerable["answers"] == [[]]
    assert only_unanswerable.features["answers"].feature.dtype == "string"
    assert only_unanswerable.features["cost"].dtype == "float64"


def test_hotpot_prompt_has_question_instruction_and_eight_paragraphs():
    for name in ("hotpot_modified", "hotpot_vanilla"):
        for row in fixture(name):
            user = row["prompt"][1]["content"]
            assert f"Question: {row['question']} \n\n" in user
            assert "verified with exact match score" in user
            assert count_hotpot_paragraphs(user) == 8
            assert row["prompt"][0]["content"] == LONG_SYSTEM_PROMPT
    assert sorted(fixture("hotpot_modified", split="train")["gold_removed"]) == [0, 1, 2]
    assert fixture("hotpot_vanilla")["gold_removed"] == [0, 0, 0]


def test_hotpot_raw_distractor_rows_render_all_paragraphs(tmp_path):
    raw = datasets.load_dataset(
        "json", data_files=str(UPSTREAM / "hotpotqa_distractor" / "train.jsonl"), split="train"
    )
    raw.save_to_disk(str(tmp_path / "raw"))
    ds = load_examples("hotpot_vanilla", path=tmp_path / "raw")
    assert ds[0]["question"] == raw[0]["question"]
    assert count_hotpot_paragraphs(ds[0]["prompt"][1]["content"]) == 10


def test_render_hotpot_problem_layout():
    text = render_hotpot_problem("Q?", ["a", "b", "c"], [["s1", "s2"], ["t1"], ["u1"]], ["b"])
    assert text.startswith("Question: Q? \n\n Your answer will be verified")
    assert "Paragraph 0 \n\n s1\ns2 \n\n----" in text and "Paragraph 1 \n\n u1 \n\n" in text
    assert "t1" not in text and count_hotpot_paragraphs(text) == 2


def test_parse_rendered_options():
    problem = "Stem with A) inline mention\nA) one\nB) two\nlines\nC) three\n"
    assert parse_rendered_options(problem) == {"A": "one", "B": "two\nlines", "C": "three"}
    assert parse_rendered_options("no options here") == {}


def test_system_prompt_override_limit_and_split():
    ds = fixture("gsm8k", system_prompt="long", limit=2)
    assert len(ds) == 2 and ds[0]["prompt"][0]["content"] == LONG_SYSTEM_PROMPT
    assert len(fixture("bigmath_digits", split="train")) == 2
    with pytest.raises(ValueError, match="system_prompt must be one of"):
        fixture("gsm8k", system_prompt="medium")
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        fixture("gsm8k", limit=0)
    with pytest.raises(FileNotFoundError, match="no split 'validation'"):
        fixture("gsm8k", split="validation")


def test_column_mapping_override_and_missing_column_message(tmp_path):
    rows = [{"query": "What is 1+1?", "gold": "2", "answerable_flag": 1, "L": 3.0}]
    path = tmp_path / "ub.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"column 'question' \(for field 'problem'\).*columns="):
        load_examples("utilitybench", path=path)
    ds = load_examples(
        "utilitybench",
        path=path,
        columns={"problem": "query", "answer": "gold", "answerable": "answerable_flag"},
    )
    row = ds[0]
    assert row["question"] == "What is 1+1?" and row["answer"] == "2"
    assert row["answerable"] is True and row["cost"] == 3.0  # cost found under candidate "L"
    assert row["id"] == "utilitybench-train-0"


def test_local_layouts_parquet_save_to_disk_and_data_dir(tmp_path, monkeypatch):
    raw = datasets.load_dataset(
        "json", data_files=str(UPSTREAM / "trivia" / "test.jsonl"), split="train"
    )
    reference = fixture("trivia")
    # Parquet file, and a folder of <split>.parquet
    raw.to_parquet(str(tmp_path / "test.parquet"))
    assert load_examples("trivia", path=tmp_path / "test.parquet")["id"] == reference["id"]
    assert load_examples("trivia", path=tmp_path)["answers"] == reference["answers"]
    # save_to_disk DatasetDict under RLSR_DATA_DIR/<name>
    datasets.DatasetDict({"test": raw}).save_to_disk(str(tmp_path / "dd" / "trivia"))
    monkeypatch.setenv("RLSR_DATA_DIR", str(tmp_path / "dd"))
    with pytest.warns(UserWarning, match="3 rows, the published copy has 2000"):
        assert load_examples("trivia")["question"] == reference["question"]
    with pytest.warns(UserWarning):
        assert load_examples("trivia", data_dir=tmp_path / "dd", limit=1)["id"] == ["tc_9001"]
    (tmp_path / "x.txt").write_text("{}")
    with pytest.raises(ValueError, match="unsupported data file"):
        load_examples("trivia", path=tmp_path / "x.txt")


def test_hub_unreachable_error_names_id_and_command(monkeypatch, tmp_path):
    monkeypatch.delenv("RLSR_DATA_DIR", raising=False)
    with pytest.raises(DatasetUnavailableError) as info:
        load_examples("hotpot_modified", split="train")
    message = str(info.value)
    assert "'mehuldamani/hotpot_qa'" in message
    assert "rlsr tasks download hotpot_modified --out DIR" in message
    assert "load_dataset('mehuldamani/hotpot_qa', split='train')" in message
    assert "RLSR_DATA_DIR" in message
    with pytest.raises(ValueError, match="unknown task"):
        load_examples("hotpot")


# --- tiny ---------------------------------------------------------------------------------


def test_tiny_bundled_offline_and_regenerable(tmp_path):
    train = load_examples("tiny", split="train")
    test = load_examples("tiny")
    assert (len(train), len(test)) == (TINY_SIZES["train"], TINY_SIZES["test"])
    assert not set(train["question"]) & set(test["question"])  # no test leak into train
    for row in test:
        target = re.search(r"What color is the (\w+)\?", row["question"]).group(1)
        assert f"the {target} is {row['answer']}" in row["question"]  # answer is in the facts
        assert row["verifier"] == "exact_match"
        assert row["prompt"][0]["content"] == SIMPLE_SYSTEM_PROMPT
    write_tiny(tmp_path)
    for split in TINY_SIZES:
        bundled = (FIXTURES_DIR / "tiny" / f"{split}.jsonl").read_bytes()
        assert (tmp_path / f"{split}.jsonl").read_bytes() == bundled
    assert generate_tiny(5, seed=1) == generate_tiny(5, seed=1) != generate_tiny(5, seed=2)


def test_tiny_missing_half_listed_half_unanswerable_and_regenerable(tmp_path):
    """recipe=tiny's data: in exactly half of each split the asked object's color is stated;
    in the other half the facts are "none" (the answer, drawn at random, is nowhere in the
    prompt), so whether an answer can be right is visible from the prompt."""
    for split, n in TINY_MISSING_SIZES.items():
        rows = [json.loads(line) for line in (FIXTURES_DIR / "tiny-missing" / f"{split}.jsonl")
                .read_text().splitlines()]  # fmt: skip
        assert len(rows) == n and sum(r["listed"] for r in rows) == n // 2
        for r in rows:
            target = re.search(r"What color is the (\w+)\?", r["question"]).group(1)
            stated = f"the {target} is {r['answer']}" in r["question"]
            assert stated == r["listed"] and (r["listed"] or "Facts: none." in r["question"])
    assert len(load_examples("tiny-missing")) == TINY_MISSING_SIZES["test"]
    write_tiny(tmp_path, missing=True)
    for split in TINY_MISSING_SIZES:
        bundled = (FIXTURES_DIR / "tiny-missing" / f"{split}.jsonl").read_bytes()
        assert (tmp_path / f"{split}.jsonl").read_bytes() == bundled


def test_tiny_missing_held_out_prompts_never_appear_in_train():
    """No validation or test prompt of the bundled tiny-missing (listed or "Facts: none.") is a
    training prompt: listed questions state facts of their split's share of the (object, color)
    pairs and "none" questions ask about their split's objects, both disjoint across splits.
    Catches a held-out set that a per-prompt memory of the training questions would score (the
    20 "Facts: none." prompts of one shared object list), and a validation split leaking into
    train."""
    rows = {split: [json.loads(line) for line in (FIXTURES_DIR / "tiny-missing" / f"{split}.jsonl")
                    .read_text().splitlines()] for split in TINY_MISSING_SIZES}  # fmt: skip
    for split, rs in rows.items():
        for r in rs:
            obj = re.search(r"What color is the (\w+)\?", r["question"]).group(1)
            if r["listed"]:
                assert (obj, r["answer"]) in MISSING_SPLIT_FACTS[split], (split, r)
            else:
                assert obj in MISSING_SPLIT_OBJECTS[split], (split, r)
    questions = {split: {r["question"] for r in rs} for split, rs in rows.items()}
    for a, b in (("train", "validation"), ("train", "test"), ("validation", "test")):
        assert not questions[a] & questions[b], (a, b)
        assert not set(MISSING_SPLIT_OBJECTS[a]) & set(MISSING_SPLIT_OBJECTS[b]), (a, b)
        assert not set(MISSING_SPLIT_FACTS[a]) & set(MISSING_SPLIT_FACTS[b]), (a, b)
    ids = [r["id"] for rs in rows.values() for r in rs]
    assert len(ids) == len(set(ids))


def test_tiny_candidates_tiers_are_what_the_docs_say_and_splits_share_no_prompt(tmp_path):
    """recipe=tiny-candidates's data, each split: a quarter of its questions per tier, the prompt
    listing 1, 2 or 4 distinct candidate colors ("Facts: the ball is red or blue.") or none; the
    first-named candidate the answer in exactly 100 / 70 / 30 % of the tier's questions
    (CANDIDATE_TIERS, what the docs' predicted AURCs assume), the answer otherwise another listed
    candidate, so the first is always the likeliest; (object, first candidate) from the split's
    share of the facts and "none" objects from the split's objects, so no validation or test
    prompt is a training prompt. The files are what the generator writes. Catches a tier whose
    realised accuracy drifts from its p, a held-out prompt seen in training, or bundled files
    that no longer match the code."""
    rows = {split: [json.loads(line) for line in (FIXTURES_DIR / "tiny-candidates" / f"{split}.jsonl")
                    .read_text().splitlines()] for split in TINY_CANDIDATES_SIZES}  # fmt: skip
    assert CANDIDATE_TIERS == {1: 1.0, 2: 0.7, 4: 0.3}
    for split, rs in rows.items():
        n = TINY_CANDIDATES_SIZES[split]
        assert len(rs) == n
        for k in [*CANDIDATE_TIERS, CANDIDATES_NONE_TIER]:
            tier = tier_name(k)
            picked = [r for r in rs if r["tier"] == tier]
            assert len(picked) == n // 4, (split, tier)
            assert all(candidates_tier(r["question"]) == tier for r in picked)
            if tier == CANDIDATES_NONE_TIER:
                for r in picked:
                    assert r["question"].startswith("Facts: none. ") and r["candidates"] == []
                    obj = re.search(r"What color is the (\w+)\?", r["question"]).group(1)
                    assert obj in MISSING_SPLIT_OBJECTS[split], (split, r)
                continue
            first_right = 0
            for r in picked:
                obj, listed = re.fullmatch(
                    r"Facts: the (\w+) is ([\w ]+)\. What color is the \1\?", r["question"]
                ).groups()
                listed = listed.split(" or ")
                assert listed == r["candidates"] and len(set(listed)) == k, r
                assert (obj, listed[0]) in MISSING_SPLIT_FACTS[split], (split, r)
                assert r["answer"] in listed
                first_right += r["answer"] == listed[0]
            assert first_right == round(CANDIDATE_TIERS[k] * n / 4), (split, tier, first_right)
    questions = {split: {r["question"] for r in rs} for split, rs in rows.items()}
    for a, b in (("train", "validation"), ("train", "test"), ("validation", "test")):
        assert not questions[a] & questions[b], (a, b)
    ids = [r["id"] for rs in rows.values() for r in rs]
    assert len(ids) == len(set(ids))
    assert len(load_examples("tiny-candidates")) == TINY_CANDIDATES_SIZES["test"]
    write_tiny(tmp_path, candidates=True)
    for split in TINY_CANDIDATES_SIZES:
        bundled = (FIXTURES_DIR / "tiny-candidates" / f"{split}.jsonl").read_bytes()
        assert (tmp_path / f"{split}.jsonl").read_bytes() == bundled
    with pytest.raises(ValueError, match="not a tiny-candidates question"):
        candidates_tier("Facts: the ball is red or blue or green. What color is the ball?")
    with pytest.raises(ValueError, match="multiple of 4"):
        generate_tiny_candidates(30)


# --- chat template -------------------------------------------------------------------------


def test_prompt_renders_through_real_chat_template(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    for name in ("hotpot_modified", "gpqa", "tiny"):
        row = (load_examples(name) if name == "tiny" else fixture(name))[0]
        text = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        system, user = row["prompt"][0]["content"], row["prompt"][1]["content"]
        assert text.index(system) < text.index(user)
        assert text.endswith("<|im_start|>assistant\n")
        ids = tok.apply_chat_template(row["prompt"], tokenize=True, add_generation_prompt=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        assert tok.decode(ids) == text  # round trip: nothing lost in tokenisation
    assert USER_PROMPT_TEMPLATE.format(problem="X") == "\n\nPROBLEM: X\n\n"


# --- verifiers wired per dataset ------------------------------------------------------------


def _fake_judge(prompts: list[str]) -> list[str]:
    """Stands in for the judge LLM (no model can answer here): YES iff the quoted prediction
    equals one of the ground truths after lowercasing, or starts with the gold option letter."""
    out = []
    for p in prompts:
        gold = re.search(r"Ground Truth Answer: (.*) Predicted Answer: ", p, re.S).group(1)
        pred = json.loads(re.search(r"Predicted Answer: (\".*\") Is the", p, re.S).group(1))
        golds = [g.strip().lower() for g in gold.split(" / ")]
        letter = re.match(r"(?:Option )?([A-E])\b", gold)
        hit = pred.strip().lower() in golds or bool(letter and pred.strip() == letter.group(1))
        out.append("YES" if hit else "NO")
    return out


def _verifier(name: str):
    from rlsr.verifiers import get_verifier

    if name == "llm_judge":
        return get_verifier(name, judge_fn=_fake_judge)
    if name == "math":
        return get_verifier(name, num_workers=0)
    return get_verifier(name)


def _cases(name: str, row: dict, verifier: str) -> tuple[str, str | None, str | None]:
    """(correct, wrong, malformed) predictions for one row."""
    if verifier == "mcq":
        options = json.loads(row["options"])
        wrong = next(k for k in options if k != row["answer_letter"])
        return f"The answer is {row['answer_letter']}", wrong, "none of these"
    if verifier == "math":
        return f"\\boxed{{{row['answer']}}}", "123456789", "\\frac{"
    if "options" in row:  # MCQ rows under the judge
        return row["answer_letter"], "Z", "<answer>"
    return (
        row["answers"][-1].upper() if verifier == "exact_match" else row["answers"][-1],
        ("definitely not it"),
        "",
    )


@pytest.mark.parametrize(
    "name,verifier",
    [(n, s.verifier) for n, s in REGISTRY.items() if n != "utilitybench"]
    + [(n, alt) for n, s in REGISTRY.items() for alt in s.alt_verifiers],
)
def test_dataset_verifier_correct_wrong_malformed(name, verifier):
    ds = load_examples(name, limit=3) if name.startswith("tiny") else fixture(name)
    ds = ds.select(range(min(2, len(ds))))
    inputs = verification_inputs(ds, verifier)
    predictions, expected = [], []
    for row in ds:
        good, bad, malformed = _cases(name, row, verifier)
        predictions += [good, bad, malformed, None]
        expected += [True, False, False, False]
    repeat = {k: [v for v in values for _ in range(4)] for k, values in inputs.items()}
    v = _verifier(verifier)
    try:
        result = v.verify_batch(predictions, **repeat)
    finally:
        v.close()
    assert list(result.correct) == expected, (name, verifier, predictions, result.status)


@pytest.mark.parametrize(
    "name,verifier", [("tiny", "exact_match"), ("gsm8k", "math"), ("medqa", "mcq")]
)
def test_row_verification_inputs_match_the_columnar_ones(name, verifier):
    """The trainer's row-wise inputs (TRL hands it dicts) equal the evaluator's columnar ones."""
    ds = load_examples(name, limit=3) if name == "tiny" else fixture(name)
    assert row_verification_inputs(ds.to_list(), verifier) == dict(
        verification_inputs(ds, verifier)
    )


def test_utilitybench_judge_and_verification_inputs():
    ds = fixture("utilitybench").select([0, 2])
    inputs = verification_inputs(ds)
    assert (
        inputs["golds"] == [["4 grams"], ["144"]]
        and inputs["questions"][1] == "What is 12 times 12?"
    )
    v = _verifier("llm_judge")
    assert list(v.verify_batch(["4 grams", "143"], **inputs).correct) == [True, False]
    with pytest.raises(ValueError, match="mcq"):
        verification_inputs(fixture("gsm8k"), "mcq")
    with pytest.raises(ValueError, match="unknown verifier"):
        verification_inputs(fixture("gsm8k"), "fuzzy")


# --- CLI ----------------------------------------------------------------------------------


def test_cli_lists_registry_and_shows_example(capsys):
    from rlsr.cli import main

    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for name, spec in REGISTRY.items():
        line = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert spec.verifier in line and (spec.hf_id or "bundled") in line
        assert f"{spec.size:,}" in line
    assert "hotpot-ood: math500, gsm8k, trivia, simpleqa, commonsenseqa, gpqa" in out
    assert main(["tasks", "show", "gpqa", "--path", str(UPSTREAM / "gpqa")]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["answer_letter"] == "C" and shown["verifier"] == "llm_judge"


def test_cli_list_says_what_is_available_here_and_how_to_get_the_rest(
    capsys, monkeypatch, tmp_path
):
    """The datasets table says which datasets load offline, and its hint uses the CLI's
    syntax (catches train.py's `data_dir=` syntax mixed into the CLI's)."""
    from rlsr.cli import main

    monkeypatch.delenv("RLSR_DATA_DIR", raising=False)
    (tmp_path / "trivia").mkdir()
    assert main(["tasks", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert header.rstrip().endswith("available here")
    column = header.index("available here")

    def available(name: str) -> str:
        return next(x for x in out.splitlines() if x.startswith(name + " "))[column:].strip()

    assert available("tiny") == "bundled"
    assert available("trivia") == str(tmp_path / "trivia")
    assert available("hotpot_modified") == "no"
    assert "--data-dir DIR" in out and "--data-path NAME=PATH" in out
    assert "rlsr tasks download NAMES --out DIR" in out and "data_dir=" not in out
    monkeypatch.setenv("RLSR_DATA_DIR", str(tmp_path))  # `rlsr tasks list` reads it too
    assert main(["tasks", "list"]) == 0
    assert str(tmp_path / "trivia") in capsys.readouterr().out


def test_hub_hint_uses_the_cli_flags(monkeypatch):
    monkeypatch.delenv("RLSR_DATA_DIR", raising=False)
    with pytest.raises(DatasetUnavailableError) as info:
        load_examples("hotpot_vanilla")
    message = str(info.value)
    assert (
        "--data-dir DIR" in message and "--data-path hotpot_vanilla=DIR/hotpot_vanilla" in message
    )
    assert "data_dir=" not in message and "path=DIR" not in message


def test_cli_download_offline_raises_clear_error(tmp_path, capsys):
    from rlsr.cli import main

    # The CLI prints the DatasetUnavailableError message (no traceback) and exits 2.
    assert main(["tasks", "download", "trivia", "--out", str(tmp_path)]) == 2
    assert "mehuldamani/trivia" in capsys.readouterr().err
    assert not (Path(tmp_path) / "trivia").exists()


def test_datasets_cli_reports_unknown_and_unreachable_datasets_without_traceback(
    capsys, monkeypatch
):
    """`rlsr tasks show hotpot_modified` offline ends in one line, not a traceback. The hub is
    put in offline mode (unreachable here anyway; offline mode fails at once, not after retries)."""
    import huggingface_hub.constants

    from rlsr.cli import main

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("RLSR_DATA_DIR", raising=False)
    assert main(["tasks", "show", "hotpot_modified"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlsr: error: could not load dataset 'hotpot_modified'")
    assert "rlsr tasks download hotpot_modified --out DIR" in err and "Traceback" not in err
    assert main(["tasks", "show", "nope"]) == 2
    assert capsys.readouterr().err.startswith("rlsr: error: unknown task 'nope'")
