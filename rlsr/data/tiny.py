"""The bundled ``tiny`` and ``tiny-missing`` datasets: synthetic fact-lookup QA, deterministic
by seed.

``tiny``: each question lists three short facts ("the kettle is red") and asks for one of them,
so the answer is a single word in the prompt and exact match verifies it (the trainer tests).

``tiny-missing`` (recipe=tiny): questions about one object; in half of them (``listed``) the
prompt states its color, in the other half the facts are ``none``: the color is drawn at random
and known to no one, so a model can only guess it (right 1 time in 8). Whether an answer can be
right is visible from the prompt, which is what a confidence that ranks must learn to read (as
the CPU toy's ``easy`` variant, docs/toy.md). Regenerate the bundled files with

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
]

OBJECTS = (
    "kettle", "lamp", "door", "chair", "book", "cup", "kite", "boat", "shoe", "coat",
    "ball", "clock", "vase", "desk", "hat", "bag", "bell", "box", "car", "fan",
)  # fmt: skip
COLORS = ("red", "blue", "green", "yellow", "black", "white", "pink", "gray")
TINY_SEED = 1234
TINY_SIZES = {"train": 200, "test": 50}
TINY_MISSING_SEED = 4321
TINY_MISSING_SIZES = {"train": 200, "test": 100}


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
    n: int, *, seed: int = TINY_MISSING_SEED, id_prefix: str = "tiny-missing"
) -> list[dict]:
    """``n`` rows ``{id, question, answer, listed}``, ``listed`` true for exactly ``n // 2`` of
    them (in random order). Listed: ``Facts: the kettle is red. What color is the kettle?``,
    answer its color. Missing: ``Facts: none. What color is the kettle?``, answer a color drawn
    uniformly from ``COLORS`` that the prompt does not show. The same ``seed`` gives the same
    rows."""
    if n < 0:
        raise ValueError(f"need n >= 0; got {n}.")
    rng = random.Random(seed)
    listed = [True] * (n // 2) + [False] * (n - n // 2)
    rng.shuffle(listed)
    rows = []
    for i, found in enumerate(listed):
        obj, color = rng.choice(OBJECTS), rng.choice(COLORS)
        facts = f"the {obj} is {color}" if found else "none"
        question = f"Facts: {facts}. What color is the {obj}?"
        rows.append(
            {"id": f"{id_prefix}-{i}", "question": question, "answer": color, "listed": found}
        )
    return rows


def write_tiny(
    out_dir: str | Path, *, seed: int | None = None, missing: bool = False
) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` of ``tiny`` (sizes ``TINY_SIZES``), or of
    ``tiny-missing`` when ``missing`` (``TINY_MISSING_SIZES``), into ``out_dir``."""
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
        rows = generate(n, seed=seed + offset, id_prefix=f"{prefix}-{split}")
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
