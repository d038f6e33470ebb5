"""The bundled ``tiny`` and ``tiny-missing`` datasets: synthetic fact-lookup QA, deterministic
by seed.

``tiny``: each question lists three short facts ("the kettle is red") and asks for one of them,
so the answer is a single word in the prompt and exact match verifies it (the trainer tests).

``tiny-missing`` (recipe=tiny): questions about one object; in half of them (``listed``) the
prompt states its color, in the other half the facts are ``none``: the color is drawn at random
and known to no one, so a model can only guess it (right 1 time in 8). Whether an answer can be
right is visible from the prompt, which is what a confidence that ranks must learn to read (as
the CPU toy's ``easy`` variant, docs/toy.md). Its three splits share no prompt: a listed
question states one of the (object, color) facts of its split (``MISSING_SPLIT_FACTS``, the 160
pairs dealt 96 / 32 / 32), and a missing one asks about an object of its split
(``MISSING_SPLIT_OBJECTS``, 10 / 5 / 5 objects), so the held-out splits test new facts (listed)
and "Facts: none." for objects that training never asks "none" about (missing), not a per-prompt
memory. (A held-out missing question's object may appear in training's listed facts, and every
object appears in ``tiny``, the 3-fact data the base ``tiny-format-warm`` was tuned on.)
validation chooses thresholds (``rlsr deploy``) and gates the shipped warm model; test is the
held-out evaluation.

``tiny-hedged`` (recipe=tiny-hedged): a task on which a proper calibration reward and the released
lifted-AURC reward want different confidences (docs/training.md, "recipe=tiny-hedged"). Every
question belongs to one of four tiers, a quarter of each split each, and the prompt names its
tier: ``Facts, sure: the ball is red.``, ``Facts, plausible: ...``, ``Facts, uncertain: ...`` or
``Facts: none.``. The stated color is the answer in exactly ``HEDGED_TIERS[tier]`` of the tier's
questions of a split (1, 0.7, 0.3; otherwise the answer is one of the 7 other colors, uniformly),
so a model that answers the stated color is right with that probability and can only learn it
from the tier word; "none" is ``tiny-missing``'s missing question (a guess, right 1 time in 8).
Its splits use ``tiny-missing``'s facts and objects (``MISSING_SPLIT_FACTS``,
``MISSING_SPLIT_OBJECTS``), so no held-out prompt is a training prompt: held-out stated
questions state (object, color) facts training never states, held-out "none" questions ask
about objects training never asks "none" about.

Regenerate the bundled files with

    python -m rlsr.data.tiny --out rlsr/data/fixtures/tiny
    python -m rlsr.data.tiny --missing --out rlsr/data/fixtures/tiny-missing
    python -m rlsr.data.tiny --hedged --out rlsr/data/fixtures/tiny-hedged
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

__all__ = [
    "OBJECTS",
    "COLORS",
    "generate_tiny",
    "generate_tiny_missing",
    "write_tiny",
    "TINY_SEED",
    "TINY_SIZES",
    "TINY_MISSING_SEED",
    "TINY_MISSING_SIZES",
    "MISSING_SPLIT_OBJECTS",
    "MISSING_SPLIT_FACTS",
    "generate_tiny_hedged",
    "hedged_tier",
    "HEDGED_TIERS",
    "HEDGED_NONE_TIER",
    "TINY_HEDGED_SEED",
    "TINY_HEDGED_SIZES",
]

OBJECTS = (
    "kettle", "lamp", "door", "chair", "book", "cup", "kite", "boat", "shoe", "coat",
    "ball", "clock", "vase", "desk", "hat", "bag", "bell", "box", "car", "fan",
)  # fmt: skip
COLORS = ("red", "blue", "green", "yellow", "black", "white", "pink", "gray")
TINY_SEED = 1234
TINY_SIZES = {"train": 200, "test": 50}
TINY_MISSING_SEED = 4321
TINY_MISSING_SIZES = {"train": 200, "validation": 100, "test": 100}
# The objects each tiny-missing split asks "none" questions about, and the (object, color) facts
# its listed questions state: disjoint across splits, so no held-out prompt appears in train.
# Objects: every 4th goes to validation, the next to test. Facts: all 160 pairs, shuffled once
# (seed TINY_MISSING_SEED), dealt 96 / 32 / 32. (Dealing listed questions by object too left the
# look-up of the warm model at 48 % on the new objects: it forgot to copy colors it was not
# fine-tuned on; by fact it copies new pairs of objects it was fine-tuned on.)
MISSING_SPLIT_OBJECTS = {
    "train": tuple(o for i, o in enumerate(OBJECTS) if i % 4 in (0, 1)),
    "validation": tuple(o for i, o in enumerate(OBJECTS) if i % 4 == 2),
    "test": tuple(o for i, o in enumerate(OBJECTS) if i % 4 == 3),
}
_FACTS = [(o, c) for o in OBJECTS for c in COLORS]
random.Random(TINY_MISSING_SEED).shuffle(_FACTS)
MISSING_SPLIT_FACTS = {
    "train": tuple(_FACTS[:96]),
    "validation": tuple(_FACTS[96:128]),
    "test": tuple(_FACTS[128:]),
}
del _FACTS

# tiny-hedged: tier word -> the share of the tier's questions (per split, exactly) whose answer is
# the stated color. The fourth tier, "none", states nothing (a guess: 1 in 8 when the guess is
# fixed per object). 1 and 0.7 lie above the lifted-AURC reward's threshold 1/2, 0.3 and 1/8
# below, and all four are on (or nearest to a distinct point of) the 0.1 / 0.3 / 0.5 / 0.7 / 0.9
# confidence grid of the shipped models: calibration reports 0.9 / 0.7 / 0.3 / 0.1, the released
# reward's per-completion best response is 0.9 / 0.9 / 0.1 / 0.1.
HEDGED_TIERS = {"sure": 1.0, "plausible": 0.7, "uncertain": 0.3}
HEDGED_NONE_TIER = "none"
TINY_HEDGED_SEED = 5678
# 20 questions per tier in validation and test, 50 in train: 0.7 and 0.3 of each are whole.
TINY_HEDGED_SIZES = {"train": 200, "validation": 80, "test": 80}


def generate_tiny(
    n: int, *, seed: int = TINY_SEED, n_facts: int = 3, id_prefix: str = "tiny"
) -> list[dict]:
    """``n`` rows ``{id, question, answer}``; the same ``seed`` gives the same rows."""
    if n < 0 or n_facts < 1 or n_facts > len(OBJECTS):
        raise ValueError(f"need n >= 0 and 1 <= n_facts <= {len(OBJECTS)}; got {n}, {n_facts}.")
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        objects = rng.sample(OBJECTS, n_facts)
        colors = [rng.choice(COLORS) for _ in objects]
        target = rng.randrange(n_facts)
        facts = "; ".join(f"the {o} is {c}" for o, c in zip(objects, colors, strict=True))
        question = f"Facts: {facts}. What color is the {objects[target]}?"
        rows.append({"id": f"{id_prefix}-{i}", "question": question, "answer": colors[target]})
    return rows


def generate_tiny_missing(
    n: int,
    *,
    seed: int = TINY_MISSING_SEED,
    id_prefix: str = "tiny-missing",
    objects: tuple[str, ...] = OBJECTS,
    facts: tuple[tuple[str, str], ...] | None = None,
) -> list[dict]:
    """``n`` rows ``{id, question, answer, listed}``, ``listed`` true for exactly ``n // 2`` of
    them (in random order). Listed: ``Facts: the kettle is red. What color is the kettle?``, a
    fact drawn from ``facts`` (default: every (object, color) pair), answer its color. Missing:
    ``Facts: none. What color is the kettle?``, an object drawn from ``objects``, answer a color
    drawn uniformly from ``COLORS`` that the prompt does not show. The same ``seed`` gives the
    same rows."""
    facts = tuple((o, c) for o in OBJECTS for c in COLORS) if facts is None else facts
    if n < 0 or not objects or not facts:
        raise ValueError(f"need n >= 0 and some objects and facts; got {n}, {objects}, {facts}.")
    rng = random.Random(seed)
    listed = [True] * (n // 2) + [False] * (n - n // 2)
    rng.shuffle(listed)
    rows = []
    for i, found in enumerate(listed):
        if found:
            obj, color = rng.choice(facts)
        else:
            obj, color = rng.choice(objects), rng.choice(COLORS)
        stated = f"the {obj} is {color}" if found else "none"
        question = f"Facts: {stated}. What color is the {obj}?"
        rows.append(
            {"id": f"{id_prefix}-{i}", "question": question, "answer": color, "listed": found}
        )
    return rows


def hedged_tier(question: str) -> str:
    """The tier of a ``tiny-hedged`` question: its tier word (``HEDGED_TIERS``) or ``none``.
    Raises ``ValueError`` for a question of another shape."""
    if question.startswith("Facts: none."):
        return HEDGED_NONE_TIER
    for tier in HEDGED_TIERS:
        if question.startswith(f"Facts, {tier}: "):
            return tier
    raise ValueError(f"not a tiny-hedged question: {question!r}")


def generate_tiny_hedged(
    n: int,
    *,
    seed: int = TINY_HEDGED_SEED,
    id_prefix: str = "tiny-hedged",
    objects: tuple[str, ...] = OBJECTS,
    facts: tuple[tuple[str, str], ...] | None = None,
) -> list[dict]:
    """``n`` rows ``{id, question, answer, tier, stated}`` (in random order), ``n / 4`` per tier.

    Tier ``t`` of ``HEDGED_TIERS``: ``Facts, t: the kettle is red. What color is the kettle?``,
    a fact drawn from ``facts`` (default: every (object, color) pair), ``stated`` its color; the
    answer is the stated color in exactly ``HEDGED_TIERS[t] * n / 4`` of the tier's rows (which
    ones: drawn), otherwise one of the other colors, uniformly. Tier ``none``: ``Facts: none.
    What color is the kettle?``, an object drawn from ``objects``, the answer drawn uniformly
    from ``COLORS``, ``stated`` null. ``n / 4`` and every ``HEDGED_TIERS[t] * n / 4`` must be
    whole (``ValueError`` otherwise). The same ``seed`` gives the same rows."""
    facts = tuple((o, c) for o in OBJECTS for c in COLORS) if facts is None else facts
    per_tier = n // 4
    exact = [q * per_tier for q in HEDGED_TIERS.values()]
    if n < 0 or n % 4 or any(abs(x - round(x)) > 1e-9 for x in exact) or not objects or not facts:
        raise ValueError(
            f"need n a multiple of 4 with {list(HEDGED_TIERS.values())} x n/4 whole, and some "
            f"objects and facts; got n={n}."
        )
    rng = random.Random(seed)
    rows = []
    for tier, share in HEDGED_TIERS.items():
        right = [True] * round(share * per_tier) + [False] * (per_tier - round(share * per_tier))
        rng.shuffle(right)
        for is_stated in right:
            obj, stated = rng.choice(facts)
            answer = stated if is_stated else rng.choice([c for c in COLORS if c != stated])
            rows.append(
                {"question": f"Facts, {tier}: the {obj} is {stated}. What color is the {obj}?",
                 "answer": answer, "tier": tier, "stated": stated}
            )  # fmt: skip
    for _ in range(per_tier):
        obj = rng.choice(objects)
        rows.append(
            {"question": f"Facts: none. What color is the {obj}?", "answer": rng.choice(COLORS),
             "tier": HEDGED_NONE_TIER, "stated": None}
        )  # fmt: skip
    rng.shuffle(rows)
    return [{"id": f"{id_prefix}-{i}", **row} for i, row in enumerate(rows)]


_KINDS = {
    "tiny": (generate_tiny, TINY_SIZES, TINY_SEED),
    "tiny-missing": (generate_tiny_missing, TINY_MISSING_SIZES, TINY_MISSING_SEED),
    "tiny-hedged": (generate_tiny_hedged, TINY_HEDGED_SIZES, TINY_HEDGED_SEED),
}


def write_tiny(
    out_dir: str | Path, *, seed: int | None = None, missing: bool = False, hedged: bool = False
) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` of ``tiny`` (sizes ``TINY_SIZES``), or the
    train / validation / test files of ``tiny-missing`` when ``missing``
    (``TINY_MISSING_SIZES``) or of ``tiny-hedged`` when ``hedged`` (``TINY_HEDGED_SIZES``), each
    split of those two on its ``MISSING_SPLIT_OBJECTS`` and ``MISSING_SPLIT_FACTS``, into
    ``out_dir``."""
    if missing and hedged:
        raise ValueError("choose one of missing and hedged.")
    prefix = "tiny-missing" if missing else "tiny-hedged" if hedged else "tiny"
    generate, sizes, default_seed = _KINDS[prefix]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if seed is None:
        seed = default_seed
    paths = {}
    for offset, (split, n) in enumerate(sizes.items()):
        extra = (
            {"objects": MISSING_SPLIT_OBJECTS[split], "facts": MISSING_SPLIT_FACTS[split]}
            if missing or hedged
            else {}
        )
        rows = generate(n, seed=seed + offset, id_prefix=f"{prefix}-{split}", **extra)
        path = out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        paths[split] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=None, help="default: the bundled files' seed")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--missing", action="store_true", help="tiny-missing instead of tiny")
    kind.add_argument("--hedged", action="store_true", help="tiny-hedged instead of tiny")
    args = parser.parse_args(argv)
    written = write_tiny(args.out, seed=args.seed, missing=args.missing, hedged=args.hedged)
    for split, path in written.items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
