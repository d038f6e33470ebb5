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
held-out evaluation. Regenerate the bundled files with

    python -m rlsr.data.tiny --out rlsr/data/fixtures/tiny
    python -m rlsr.data.tiny --missing --out rlsr/data/fixtures/tiny-missing
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


def write_tiny(
    out_dir: str | Path, *, seed: int | None = None, missing: bool = False
) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` of ``tiny`` (sizes ``TINY_SIZES``), or the
    train / validation / test files of ``tiny-missing`` when ``missing``
    (``TINY_MISSING_SIZES``, each split on its ``MISSING_SPLIT_OBJECTS`` and
    ``MISSING_SPLIT_FACTS``), into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    generate, sizes, prefix = (
        (generate_tiny_missing, TINY_MISSING_SIZES, "tiny-missing")
        if missing
        else (generate_tiny, TINY_SIZES, "tiny")
    )
    if seed is None:
        seed = TINY_MISSING_SEED if missing else TINY_SEED
    paths = {}
    for offset, (split, n) in enumerate(sizes.items()):
        extra = (
            {"objects": MISSING_SPLIT_OBJECTS[split], "facts": MISSING_SPLIT_FACTS[split]}
            if missing
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
    parser.add_argument("--missing", action="store_true", help="tiny-missing instead of tiny")
    args = parser.parse_args(argv)
    for split, path in write_tiny(args.out, seed=args.seed, missing=args.missing).items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
