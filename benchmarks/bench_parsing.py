"""Benchmark ``rlsr.core.parsing.parse_response`` on megabyte inputs built to make a parser blow up.

The inputs are the ones ``tests/test_parsing.py`` checks for correctness (repeated open tags, a
million digits, a million unicode digits, ...). Each row is the best of ``--repeats`` parses
(both format specs, as the test runs them) beside a baseline measured in the same run: one
linear regex pass over the same text (``re.finditer("<", text)``, consumed). The parser is
linear time (one scan with a literal alternation of the tag names), so the ratio stays a small
constant; a backtracking or quadratic parser would take seconds to hours here.

Usage: ``.venv/bin/python benchmarks/bench_parsing.py [--repeats 5]``. Prints a markdown table
(append it to benchmarks/RESULTS.md with the machine, date and load).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from datetime import date

from rlsr.core.parsing import ANSWER_CONFIDENCE_FORMAT, FULL_FORMAT, parse_response

INPUTS = {
    "'<answer>' x 100,000": "<answer>" * 100_000,
    "'</answer>' x 100,000": "</answer>" * 100_000,
    "'<answer></answer>' x 60,000": "<answer></answer>" * 60_000,
    "'<confidence>' + 10^6 nines": "<confidence>" + "9" * 10**6,
    "... + '</confidence>'": "<confidence>" + "9" * 10**6 + "</confidence>",
    "'<confidence>0.' + 10^6 ones + close": "<confidence>0." + "1" * 10**6 + "</confidence>",
    "'<think>' + 10^6 spaces + close": "<think>" + " " * 10**6 + "</think>",
    "'<' x 10^6": "<" * 10**6,
    "full layout + 10^6 spaces inside": "<think></think><answer>x</answer>"
    + " " * 10**6
    + "<analysis></analysis>",
    "10^6 Arabic-Indic zeros": "\u0660" * 10**6,
}
_LT = re.compile("<")


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"## Parsing pathological inputs (`benchmarks/bench_parsing.py`, {date.today()})\n")
    load = os.getloadavg()
    print(f"Machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} (1 min) at the start; best "
          f"of {args.repeats}; baseline: one `re.finditer('<', text)` pass.\n")  # fmt: skip
    print("| input | parse (both specs) | baseline | ratio |")
    print("| --- | --- | --- | --- |")
    for label, text in INPUTS.items():
        parse = _best(lambda t=text: [parse_response(t, s) for s in (FULL_FORMAT, ANSWER_CONFIDENCE_FORMAT)], args.repeats)  # fmt: skip
        scan = _best(lambda t=text: sum(1 for _ in _LT.finditer(t)), args.repeats)
        print(f"| {label} | {parse * 1e3:.1f} ms | {scan * 1e3:.1f} ms | {parse / scan:.1f} |")


if __name__ == "__main__":
    main()
