#!/usr/bin/env python
"""Diagnostic: can the toy model learn the look-up the `distractor` variant needs? (docs/toy.md)

Trains the toy warm-up model (``examples.toy.warmup``: same model, batch, optimizer and schedule)
on a configurable version of the distractor task and prints, every ``--eval-every`` steps, greedy
accuracy on 300 held-out prompts: with the fact present, with it missing, on present prompts
that list two or more facts (needs name -> digit binding), and how often a missing prompt is
answered with the listed distractor's digit (1.0 = the model never notices that the fact is
missing). Nothing is cached or saved; this script only measures.

    python examples/toy/distractor_probe.py --facts 2-3 --steps 4000          # binding
    python examples/toy/distractor_probe.py --facts 1-1 --steps 3000          # presence only
    python examples/toy/distractor_probe.py --facts 1-1 --target presence     # 1 / 0 answer
    python examples/toy/distractor_probe.py --facts 1-1 --target presence --upper-query

``--target presence`` answers 1 when the fact is present and 0 when not (deterministic; chance
loss is ln 2 on that token), with a fixed confidence 0.5, so nothing but the look-up is left to
learn. ``--target query`` (a control) answers the queried name's index
mod 10: reading the queried name alone, no comparison. ``--upper-query`` writes the queried name in upper case (its own token), so matching it
to the fact's name is not an identity match of one token with itself.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from examples.toy.task import DIGITS, NAMES, ToyExample  # noqa: E402
from examples.toy.tokenizer import build_toy_tokenizer  # noqa: E402
from examples.toy.warmup import (  # noqa: E402
    WarmupConfig,
    build_model,
    completion_batch,
    completion_text,
    greedy_complete,
)

UPPER = tuple(n.upper() for n in NAMES)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--facts", default="1-2", help="facts per prompt, LO-HI (the variant: 1-2)")
    p.add_argument("--target", choices=("task", "presence", "query"), default="task")
    p.add_argument("--upper-query", action="store_true")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument(
        "--hidden-size", type=int, default=128, help="heads scale with it (32 dims each)"
    )
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--rope-theta", type=float, default=None, help="default: Qwen2's 10000")
    p.add_argument("--p-missing", type=float, default=0.5)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_example(rng: random.Random, args, lo: int, hi: int) -> ToyExample:
    """The distractor construction of ``examples.toy.task`` with LO..HI facts per prompt."""
    names = rng.sample(NAMES, hi + 1)
    target, others = names[0], names[1:]
    answer = rng.choice(DIGITS)
    answerable = rng.random() >= args.p_missing
    facts = ([(target, answer)] if answerable else []) + [(n, rng.choice(DIGITS)) for n in others]
    facts = facts[: rng.randint(lo, hi)]
    rng.shuffle(facts)
    query = target.upper() if args.upper_query else target
    question = f"facts: {' ; '.join(f'{n}={d}' for n, d in facts)} ; q: {query}"
    if args.target == "presence":
        answer = "1" if answerable else "0"
    elif args.target == "query":  # control: the queried name alone decides the answer
        answer = str(NAMES.index(target) % 10)
    return ToyExample("probe", question, answer, answerable)


def tokenizer_for(args):
    tok = build_toy_tokenizer()
    if args.upper_query:
        tok.add_tokens(list(UPPER))  # added tokens are split off before the pre-tokenizer
    return tok


def batch(tok, examples, rng, confidences):
    """Targets as the warm-up's, with a confidence drawn from ``confidences`` per row."""
    rows = []
    for ex in examples:
        prompt = tok(ex.question, add_special_tokens=False).input_ids
        comp = tok(completion_text(ex.answer, rng.choice(confidences)), add_special_tokens=False)
        rows.append((prompt, [*comp.input_ids, tok.eos_token_id]))
    return completion_batch(tok, rows)


def main(argv=None) -> None:
    args = parse_args(argv)
    lo, hi = (int(x) for x in args.facts.split("-"))
    torch.set_num_threads(1)
    tok = tokenizer_for(args)
    heads = args.hidden_size // 32
    cfg = WarmupConfig(
        variant="distractor",
        seed=args.seed,
        num_layers=args.layers,
        hidden_size=args.hidden_size,
        num_heads=heads,
        num_kv_heads=max(1, heads // 2),
        intermediate_size=2 * args.hidden_size,
    )
    model = build_model(tok, cfg)
    if args.rope_theta is not None:
        model.config.rope_parameters = {"rope_type": "default", "rope_theta": args.rope_theta}
        torch.manual_seed(args.seed)
        model = type(model)(model.config)
    confidences = ("0.5",) if args.target != "task" else tuple(f"0.{k}" for k in range(1, 10))
    opt = torch.optim.AdamW(
        model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay
    )
    warm = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(  # the warm-up's schedule: linear, cosine to 10 %
        opt,
        lambda s: (
            (s + 1) / warm
            if s < warm
            else 0.1 + 0.45 * (1 + math.cos(math.pi * (s - warm) / max(1, args.steps - warm)))
        ),
    )
    rng, eval_rng = random.Random(f"probe/{args.seed}"), random.Random(f"probe-eval/{args.seed}")
    heldout = [make_example(eval_rng, args, lo, hi) for _ in range(300)]
    multi = [ex for ex in heldout if ex.answerable and ex.question.count("=") >= 2]
    missing = [ex for ex in heldout if not ex.answerable]
    listed = [  # the missing prompts with the (first) distractor's digit as the "answer"
        ToyExample(ex.id, ex.question, ex.question.split("=")[1].strip()[0], True) for ex in missing
    ]
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        model.train()
        examples = [make_example(rng, args, lo, hi) for _ in range(cfg.batch_size)]
        loss = model(**batch(tok, examples, rng, confidences)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            r = greedy_complete(model, tok, heldout)
            row = {
                "step": step,
                "seconds": round(time.perf_counter() - start),
                "loss": round(loss.item(), 3),
                "acc_present": round(r["accuracy_present"], 3),
                "acc_missing": round(r["accuracy_missing"], 3),
                "acc_present_2plus_facts": round(greedy_complete(model, tok, multi)["accuracy"], 3)
                if multi
                else None,
                "missing_answered_with_listed_digit": round(
                    greedy_complete(model, tok, listed)["accuracy"], 3
                )
                if args.target == "task"
                else None,
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
