#!/usr/bin/env python
"""Rebuild the shipped tiny models (tools/tiny/weights) and their MANIFEST.json.

    python tools/tiny/build.py            # rebuild, check, write the fixtures
    python tools/tiny/build.py --check    # rebuild in a temp folder, compare, write nothing
    python tools/tiny/build.py --only tiny-missing-warm   # just recipe=tiny's model,
                                                   # from the shipped tiny-format-warm
    python tools/tiny/build.py --only tiny-candidates-warm    # just recipe=tiny-candidates's
    python tools/tiny/build.py --only tiny-candidates-split   # just recipe=tiny-split's

The tiny models are part of the product (``train.py recipe=tiny`` trains ``tiny-missing-warm``,
``recipe=tiny-format`` ``tiny-warm``) and of the tests. They are shipped rather than built per machine because weights drawn or trained here
depend on the CPU's float numerics (AVX2 / AVX-512 / ARM, thread count): the same procedure
gives different bytes, and a model that behaves differently, on each machine.

Steps: build the random ``tiny-qwen2`` (``tools.tiny.models.build_tiny_model``), fine-tune it on
the tag format (``train_format_warm``), sample the warm model at temperature 1 on every tiny
train prompt (``sampled_behaviour``) and refuse to ship it outside ``WARM_BANDS``; fine-tune that
one on the ``tiny-missing`` train split (``train_missing_warm``), measure it greedy on the
validation split (``missing_gate``; neither trained on nor recipe=tiny's held-out test) and refuse
to ship it outside ``MISSING_GATE``, measure its confidence lean sampled at temperature 1 on the
same split (``sampled_missing_lean``); fine-tune ``tiny-format-warm`` on the ``tiny-candidates`` train
split (``train_candidates_warm``), gate it greedy on that task's validation split (``candidates_gate``,
``CANDIDATES_GATE``) and measure its sampled confidence per tier (``sampled_candidates_lean``); then
write the files' sha256
and the measured behaviour to MANIFEST.json. Commit the result; a rebuilt copy
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from rlsr.data import tiny_models as shipped  # noqa: E402
from tools.tiny import models as tm  # noqa: E402

WEIGHTS = Path(__file__).resolve().parent / "weights"  # what this clone commits

SAMPLES_PER_PROMPT = 8


def check_gate(gate: dict, bounds: dict, *, model: str, measured: str, prefix: str) -> None:
    """Stop (nothing written) unless every figure of ``gate`` lies in its ``bounds`` range and
    every greedy decision wins by at least ``tm.WARM_MIN_GREEDY_MARGIN``; the message names the
    model, the figure, its range, how it was ``measured`` and the constants of
    tools/tiny/models.py to change, then every figure of the gate."""
    checks = {**bounds, "greedy_margin_min": (tm.WARM_MIN_GREEDY_MARGIN, float("inf"))}
    for key, (lo, hi) in checks.items():
        if not lo <= gate[key] <= hi:
            raise SystemExit(
                f"{model} fails its gate: {key} = {gate[key]:.4g}, needs [{lo}, {hi}] "
                f"({measured}). Change {prefix}* in tools/tiny/models.py; nothing was written. "
                f"{json.dumps(gate)}"
            )


def _greedy_on(gate: dict, model: str) -> str:
    return f"greedy on the {gate['prompts']} {model.removesuffix('-warm')} validation prompts"


def build_missing(out: Path, base: Path) -> dict:
    """``tiny-missing-warm`` from ``base`` (a ``tiny-format-warm``) into ``out``; returns its
    manifest entry without the file hashes (raises when the gate fails)."""
    t0 = time.perf_counter()
    tm.train_missing_warm(out, base=base)
    seconds = time.perf_counter() - t0
    gate = tm.missing_gate(out, split="validation")
    check_gate(gate, tm.MISSING_GATE, model="tiny-missing-warm",
               measured=_greedy_on(gate, "tiny-missing-warm"), prefix="MISSING_")  # fmt: skip
    lean = tm.sampled_missing_lean(out, split="validation")
    return {
        "greedy_tiny_missing_validation": gate,
        "sampled_tiny_missing_validation": lean,
        "training": {
            "base": "tiny-format-warm",
            "steps": tm.MISSING_WARM_STEPS,
            "batch": tm.MISSING_WARM_BATCH,
            "learning_rate": tm.MISSING_WARM_LR,
            "seed": tm.MISSING_WARM_SEED,
            "thoughts": {
                "listed": tm.MISSING_THOUGHTS[True],
                "missing": tm.MISSING_THOUGHTS[False],
            },
            "confidences": list(tm.CONFIDENCES),
            "confidence_weights": {
                "listed": list(tm.MISSING_CONFIDENCE_WEIGHTS[True]),
                "missing": list(tm.MISSING_CONFIDENCE_WEIGHTS[False]),
            },
            "seconds": round(seconds, 1),
        },
    }


def build_candidates(out: Path, base: Path) -> dict:
    """``tiny-candidates-warm`` from ``base`` (a ``tiny-format-warm``) into ``out``; returns its
    manifest entry without the file hashes (raises when the gate fails)."""
    t0 = time.perf_counter()
    tm.train_candidates_warm(out, base=base)
    seconds = time.perf_counter() - t0
    gate = tm.candidates_gate(out, split="validation")
    check_gate(gate, tm.CANDIDATES_GATE, model="tiny-candidates-warm",
               measured=_greedy_on(gate, "tiny-candidates-warm"), prefix="CANDIDATES_")  # fmt: skip
    if len(gate["confidences"]) != 1:
        raise SystemExit(
            f"tiny-candidates-warm fails its gate: greedy confidences {gate['confidences']} on the "
            "tiny-candidates validation prompts, want one value. Nothing was written."
        )
    lean = tm.sampled_candidates_lean(out, split="validation")
    return {
        "greedy_tiny_candidates_validation": gate,
        "sampled_tiny_candidates_validation": lean,
        "training": {
            **_candidates_training(),
            "confidences": list(tm.CONFIDENCES),
            "confidence_weights_every_row": list(tm.CANDIDATES_CONFIDENCE_WEIGHTS),
            "rehearsal": "tiny train rows (3 facts, one asked), a quarter as many per batch, "
            "answered with the asked fact after the thought 'look'",
            "seconds": round(seconds, 1),
        },
    }


def _candidates_training() -> dict:
    """The warm-up settings both tiny-candidates models share (MANIFEST.json's ``training``)."""
    return {
        "base": "tiny-format-warm",
        "steps": tm.CANDIDATES_WARM_STEPS,
        "batch": tm.CANDIDATES_WARM_BATCH,
        "learning_rate": tm.CANDIDATES_WARM_LR,
        "seed": tm.CANDIDATES_WARM_SEED,
        "thoughts": dict(tm.CANDIDATES_THOUGHTS),
    }


def build_split(out: Path, base: Path) -> dict:
    """``tiny-candidates-split`` from ``base`` (a ``tiny-format-warm``) into ``out``; returns its
    manifest entry without the file hashes (raises when the gate fails: greedy
    ``candidates_gate`` and sampled ``sampled_candidates_lean`` on the validation split,
    ``tm.split_gate_failures``). The greedy margin is recorded, not gated: a 50 / 50 target on
    k=2 and k=4 leaves the greedy confidence token a near tie by design."""
    t0 = time.perf_counter()
    tm.train_candidates_split(out, base=base)
    seconds = time.perf_counter() - t0
    gate = tm.candidates_gate(out, split="validation")
    sampled = tm.sampled_candidates_lean(out, split="validation")
    misses = tm.split_gate_failures(gate, sampled)
    if misses:
        raise SystemExit(
            f"tiny-candidates-split fails its gate: {'; '.join(misses)} (validation split). "
            "Change SPLIT_* in tools/tiny/models.py; nothing was written. "
            f"{json.dumps({'greedy': gate, 'sampled': sampled})}"
        )
    return {
        "greedy_tiny_candidates_validation": gate,
        "sampled_tiny_candidates_validation": sampled,
        "gate": {
            "greedy": {k: list(v) for k, v in tm.SPLIT_GATE.items()},
            "sampled_share_each_level": list(tm.SPLIT_SHARE_BAND),
            "sampled_max_unparsed": tm.SPLIT_MAX_UNPARSED,
        },
        "training": {
            **_candidates_training(),
            "confidences_per_tier": {k: list(v) for k, v in tm.SPLIT_CONFIDENCES.items()},
            "rehearsal": "as tiny-candidates-warm's",
            "seconds": round(seconds, 1),
        },
    }


# The models --only rebuilds from the shipped tiny-format-warm, and how.
ONLY = {
    "tiny-missing-warm": build_missing,
    "tiny-candidates-warm": build_candidates,
    "tiny-candidates-split": build_split,
}


def _hashes(folder: Path) -> dict:
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    return {"files": {f: shipped.file_sha256(folder / f) for f in files}}


def build(out: Path) -> dict:
    """Build the three models under ``out``; returns the manifest (raises when a gate fails)."""
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
    check_gate(behaviour, tm.WARM_BANDS, model="the format-warm model", prefix="WARM_",
               measured=f"{behaviour['completions']} completions sampled at temperature 1")  # fmt: skip
    missing = build_missing(out / "tiny-missing-warm", base=out / "tiny-format-warm")
    candidates = build_candidates(out / "tiny-candidates-warm", base=out / "tiny-format-warm")
    split = build_split(out / "tiny-candidates-split", base=out / "tiny-format-warm")
    models = {name: _hashes(out / name) for name in shipped.SHIPPED_MODELS}
    models["tiny-missing-warm"].update(missing)
    models["tiny-candidates-warm"].update(candidates)
    models["tiny-candidates-split"].update(split)
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
    p.add_argument(
        "--only",
        choices=sorted(ONLY),
        help="rebuild just this model, from the shipped tiny-format-warm (the others stay)",
    )
    args = p.parse_args(argv)
    if args.only:
        return _only(args.only, args.check)
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
            target = WEIGHTS / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(Path(tmp) / name, target)
    (WEIGHTS / shipped.MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {WEIGHTS}")
    return 0


def _only(name: str, check: bool) -> int:
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        entry = ONLY[name](Path(tmp) / name, base=shipped.tiny_warm_model_path())
        entry = {**_hashes(Path(tmp) / name), **entry}
        for key, value in entry.items():
            if key.startswith(("greedy_", "sampled_")):
                print(json.dumps(value))
        manifest = shipped.shipped_manifest()
        if check:
            same = manifest["models"].get(name, {}).get("files") == entry["files"]
            print(f"{name}: {'identical to' if same else 'differs from'} the shipped copy")
            return 0
        target = WEIGHTS / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(Path(tmp) / name, target)
    manifest["models"][name] = entry
    (WEIGHTS / shipped.MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
