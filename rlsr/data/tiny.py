"""The bundled ``tiny`` dataset: synthetic fact-lookup QA, deterministic by seed.

Each question lists three short facts ("the kettle is red") and asks for one of them, so the
answer is a single word in the prompt and exact match verifies it. Small enough for a CPU
GRPO run with the tiny model (recipe=tiny). Regenerate the bundled files with

    python -m rlsr.data.tiny --out rlsr/data/fixtures/tiny
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

__all__ = ["OBJECTS", "COLORS", "generate_tiny", "write_tiny", "TINY_SEED", "TINY_SIZES"]

OBJECTS = (
    "kettle", "lamp", "door", "chair", "book", "cup", "kite", "boat", "shoe", "coat",
    "ball", "clock", "vase", "desk", "hat", "bag", "bell", "box", "car", "fan",
)  # fmt: skip
COLORS = ("red", "blue", "green", "yellow", "black", "white", "pink", "gray")
TINY_SEED = 1234
TINY_SIZES = {"train": 200, "test": 50}


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


def write_tiny(out_dir: str | Path, *, seed: int = TINY_SEED) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` (sizes ``TINY_SIZES``) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for offset, (split, n) in enumerate(TINY_SIZES.items()):
        rows = generate_tiny(n, seed=seed + offset, id_prefix=f"tiny-{split}")
        path = out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        paths[split] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=TINY_SEED)
    args = parser.parse_args(argv)
    for split, path in write_tiny(args.out, seed=args.seed).items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
