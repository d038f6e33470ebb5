#!/usr/bin/env python
"""Rebuild the shipped tiny models (rlsr/data/fixtures/models) and their MANIFEST.json.

    python scripts/build_tiny_models.py            # rebuild, check, write the fixtures
    python scripts/build_tiny_models.py --check    # rebuild in a temp folder, compare, write nothing

The tiny models are part of the product (``train.py recipe=tiny`` trains ``tiny-warm``) and of
the tests. They are shipped rather than built per machine because weights drawn or trained here
depend on the CPU's float numerics (AVX2 / AVX-512 / ARM, thread count): the same procedure
gives different bytes, and a model that behaves differently, on each machine.

Steps: build the random ``tiny-qwen2`` (``tools.tiny_models.build_tiny_model``), fine-tune it on
the tag format (``train_format_warm``), sample the warm model at temperature 1 on every tiny
train prompt (``sampled_behaviour``) and refuse to ship it outside ``WARM_BANDS``; then write the
files' sha256 and the measured behaviour to MANIFEST.json. Commit the result; a rebuilt copy
need not match the old hashes byte for byte on another machine (that is the point of shipping).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlsr import tiny_models as shipped  # noqa: E402
from tools import tiny_models as tm  # noqa: E402

SAMPLES_PER_PROMPT = 8


def build(out: Path) -> dict:
    """Build both models under ``out``; returns the manifest (raises when the gate fails)."""
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    tm.build_tiny_model(out / "tiny-qwen2")
    tm.train_format_warm(out / "tiny-format-warm", base=out / "tiny-qwen2")
    seconds = time.perf_counter() - t0
    behaviour = tm.sampled_behaviour(
        out / "tiny-format-warm", samples_per_prompt=SAMPLES_PER_PROMPT
    )
    margins = tm.greedy_margins(out / "tiny-format-warm", limit=tm.GREEDY_PROMPTS)
    behaviour["greedy_margin_min"] = min(margins)
    behaviour["greedy_margin_median"] = sorted(margins)[len(margins) // 2]
    checks = {**tm.WARM_BANDS, "greedy_margin_min": (tm.WARM_MIN_GREEDY_MARGIN, float("inf"))}
    for key, (lo, hi) in checks.items():
        if not lo <= behaviour[key] <= hi:
            raise SystemExit(
                f"the format-warm model fails its gate: {key} = {behaviour[key]:.4g}, needs "
                f"[{lo}, {hi}] ({behaviour['completions']} completions sampled at temperature "
                f"1). Change WARM_* in tools/tiny_models.py; nothing was written."
            )
    models = {}
    for name in shipped.SHIPPED_MODELS:
        folder = out / name
        files = sorted(p.name for p in folder.iterdir() if p.is_file())
        models[name] = {"files": {f: shipped.file_sha256(folder / f) for f in files}}
    models["tiny-format-warm"]["behaviour_temperature_1"] = behaviour
    models["tiny-format-warm"]["training"] = {
        "lookup_steps": tm.WARM_LOOKUP_STEPS,
        "steps": tm.WARM_STEPS,
        "full_every": tm.WARM_FULL_EVERY,
        "p_gold": tm.WARM_P_GOLD,
        "batch": tm.WARM_BATCH,
        "learning_rate": tm.WARM_LR,
        "seed": tm.WARM_SEED,
        "confidences": list(tm.CONFIDENCES),
    }
    import transformers

    return {
        "built_with": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "machine": platform.machine(),
            "processor": platform.processor() or "unknown",
            "build_seconds": round(seconds, 1),
        },
        "settings": tm.TINY_MODEL_DEFAULTS,
        "models": models,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="rebuild and compare; write nothing")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = build(Path(tmp))
        print(json.dumps(manifest["models"]["tiny-format-warm"]["behaviour_temperature_1"]))
        if args.check:
            old = shipped.shipped_manifest()["models"]
            for name in shipped.SHIPPED_MODELS:
                same = old[name]["files"] == manifest["models"][name]["files"]
                print(f"{name}: {'identical to' if same else 'differs from'} the shipped copy")
            return 0
        for name in shipped.SHIPPED_MODELS:
            target = shipped.SHIPPED_DIR / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(Path(tmp) / name, target)
    (shipped.SHIPPED_DIR / shipped.MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {shipped.SHIPPED_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
