"""Benchmark ``rlsr evaluate --from-samples`` on many external samples (default 100,000) against
the same verifier calls alone, measured in the same run.

A task of N distinct fact-lookup questions (rows shaped like the bundled ``tiny`` task, given as
``--data-path tiny=FILE``) and a plain JSONL of N tagged responses (right and wrong answers,
tied, missing confidences, unparseable responses) are written to a temporary folder. Timed:

* ``rlsr evaluate --from-samples`` end to end in this process (``rlsr.cli.main``; bootstrap off,
  as the bootstrap CIs cost the same for generated responses);
* its stages: reading the file, loading the task's rows (``load_examples``), matching, and
  parsing + verifying + writing + ``metrics.json`` (``score_external``);
* the baseline: the task's verifier on the same answers (one ``verify_batch`` call on the
  already-parsed answers with ``verification_inputs``), i.e. the verdicts alone; and, for scale,
  rlsr's parser alone on the same responses.

Usage: ``.venv/bin/python benchmarks/bench_from_samples.py [--n 100000]``; prints a markdown
table to append to benchmarks/RESULTS.md with the machine and date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import date
from pathlib import Path

from rlsr.cli import main as rlsr_main
from rlsr.data.loading import build_verifier, load_examples, verification_inputs
from rlsr.evaluation.run.external import TaskColumns, match_samples, read_external, score_external
from rlsr.evaluation.run.runner import EvalSettings
from rlsr.generation.fallbacks import read_response

COLORS = ("red", "blue", "green", "white", "black", "pink", "gray", "yellow")


def write_inputs(folder: Path, n: int) -> tuple[Path, Path]:
    """The task rows and the samples file of ``n`` questions."""
    rows, samples = [], []
    for i in range(n):
        gold = COLORS[i % len(COLORS)]
        question = f"Facts: item {i} is {gold}. What color is item {i}?"
        rows.append({"id": f"bench-{i}", "question": question, "answer": gold})
        answer = gold if i % 3 else COLORS[(i + 1) % len(COLORS)]
        conf = ("0.9", "0.5", "0.75", None)[i % 4]
        tail = "" if conf is None else f"<confidence>{conf}</confidence>"
        text = f"<think>look</think><answer>{answer}</answer><analysis>ok</analysis>{tail}"
        if i % 50 == 0:
            text = "no tags here"
        samples.append({"id": f"bench-{i}", "question": question, "response": text, "gold": gold})
    data, file = folder / "rows.jsonl", folder / "external.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    return data, file


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data, file = write_inputs(folder, args.n)
        _, cli = timed(lambda: rlsr_main([
            "evaluate", "--from-samples", str(file), "--tasks", "tiny", "--data-path",
            f"tiny={data}", "--output-dir", str(folder / "cli"), "--bootstrap", "0",
        ]))  # fmt: skip
        external, t_read = timed(lambda: read_external(file))
        examples, t_load = timed(lambda: load_examples("tiny", path=data))
        examples, t_columns = timed(lambda: TaskColumns.of(examples))
        indices, t_match = timed(lambda: match_samples(external, examples, "tiny", "test"))
        settings = EvalSettings(bootstrap=0, fallbacks=False, progress=False)
        verifier = build_verifier("tiny")
        _, t_score = timed(lambda: score_external(
            external, indices, examples, folder / "stages" / "tiny", verifier=verifier,
            verifier_name="exact_match", settings=settings, dataset_name="tiny",
        ))  # fmt: skip
        parsed, t_parse = timed(lambda: [read_response(s.response) for s in external.samples])
        answers = [p.answer for p in parsed]
        inputs = verification_inputs(examples, "exact_match")
        _, t_verify = timed(lambda: verifier.verify_batch(answers, **inputs))
    print(f"## `rlsr evaluate --from-samples`, {args.n:,} plain samples "
          f"(`benchmarks/bench_from_samples.py`, {date.today()})\n")  # fmt: skip
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; bootstrap off.\n")  # fmt: skip
    print("| step | seconds |\n| --- | ---: |")
    for name, value in (
        ("`rlsr evaluate --from-samples` end to end (in process)", cli),
        ("read the samples file", t_read),
        ("load the task's rows (`load_examples`)", t_load),
        ("the rows as Python columns (`TaskColumns.of`)", t_columns),
        ("match rows to the task", t_match),
        ("parse + verify + write the run files and plot", t_score),
        ("baseline: the verifier alone on the same answers (one `verify_batch`)", t_verify),
        ("for scale: rlsr's parser alone on the same responses", t_parse),
    ):
        print(f"| {name} | {value:.2f} |")


if __name__ == "__main__":
    main()
