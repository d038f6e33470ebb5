"""Two processes pool exactly: `torchrun --nproc_per_node 2` (gloo, CPU) vs one-process recompute.

This file is both the pytest test and the worker script torchrun runs (``__main__`` branch).
Each rank trains recipe=tiny-format for 2 optimizer steps on the format-warm tiny model (transformers
generation; vLLM is not installed on CPU) with a pool hook that dumps what it gathered. The test
then checks, in a single process:

* every rank saw the same pool, of size per_device x processes x grad_accum (= rlsr/pool_size);
* re-parsing and re-verifying the gathered completion texts here reproduces (correct,
  confidence, format_ok), and ``rlsr.equations.rewards`` on that pool reproduces the trainer's reward
  columns exactly;
* rows are grouped by prompt in blocks of G (TRL's ``view(-1, G)`` layout holds);
* the pool files (``pool_log.every=1``, written by rank 0 only) hold each step's whole pool in
  the gathered order, with the advantages TRL used gathered from both ranks (= reward minus its
  group mean, recomputed here);
* ranking per process instead of over the pool would have given different rewards;
* the pool is stated as ``pool_size`` and the gradient accumulation is derived from the world
  size: one and two processes (near-greedy decoding, ``top_k=1``) rank the same 16 completions of
  the same prompts in the same order and give identical rewards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ports import free_port

PER_DEVICE, POOL, PROCS, G, STEPS = 4, 16, 2, 4, 2


def _worker(out_dir: str, mode: str = "sampled") -> None:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_trainer_support import tiny_settings

    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import run_training

    rank = int(os.environ["RANK"])
    dumps: list[dict] = []

    from test_trainer_support import pool_record

    def hook(pool: dict) -> None:
        dumps.append(pool_record(pool))

    extra = {"top_k": 1} if mode == "greedy" else {}  # top-1 sampling: the argmax token
    settings = tiny_settings(
        Path(out_dir) / "run",
        max_steps=STEPS if mode == "sampled" else 1,
        per_device_train_batch_size=PER_DEVICE,
        num_generations=G,
        save_steps=1000,
        **extra,
    )
    settings.grpo.pop("gradient_accumulation_steps")  # derived from pool_size and the world size
    settings.pool_size = POOL
    if mode == "greedy":  # the designed 4-prompt dataset (_greedy_mixed_dataset): one pool
        settings.data.path = str(Path(out_dir).parent / "data")
    settings.resume = "never"
    if mode == "sampled":  # every pool on disk, from rank 0
        settings.pool_log.every = 1
    if mode == "heldout":  # held-out evaluation at steps 0 and 1, 20 questions sharded 10 + 10
        settings.heldout.every, settings.heldout.limit = 1, 20
    trainer = run_training(plan_run(settings), pool_hook=hook)
    pool_sizes = [h["rlsr/pool_size"] for h in trainer.state.log_history if "rlsr/pool_size" in h]
    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps(
            {
                "pools": dumps,
                "pool_sizes": pool_sizes,
                "accumulation": trainer.args.gradient_accumulation_steps,
            }
        )
    )


def _greedy_mixed_dataset(folder: Path) -> list[str]:
    """A 4-row tiny dataset whose one pool (4 prompts x G) mixes right and wrong greedy answers
    by construction: two train rows the shipped model answers right greedily, and two whose gold
    is "purple", a word it never writes. Greedy texts do not depend on the machine
    (test_tiny_model.py: every greedy decision wins by >= 1e-3 in logit). Returns the golds."""
    from test_trainer_support import format_warm_model

    from rlsr.core.parsing import parse_response
    from rlsr.data.loading import load_examples
    from tools.tiny.models import greedy_completions

    rows = load_examples("tiny", split="train", limit=16)
    greedy = greedy_completions(format_warm_model(), limit=16, max_new_tokens=40)
    right = [rows[i] for i, (text, _) in enumerate(greedy)
             if parse_response(text).answer == rows[i]["answer"]][:2]  # fmt: skip
    assert len(right) == 2, "the shipped model answers fewer than 2 of 16 prompts right"
    wrong = [rows[i] for i in range(len(rows)) if rows[i]["id"] not in {r["id"] for r in right}]
    chosen = [*right, *({**r, "answer": "purple"} for r in wrong[:2])]
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({k: r[k] for k in ("id", "question", "answer")}) for r in chosen]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    return [r["answer"] for r in chosen]


def _launch(out: Path, procs: int, mode: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs),
        "--master_port", str(free_port()), __file__, str(out), mode,
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    plan = f"[rlsr] pool {POOL} completions per optimizer step = {POOL // G} prompts x {G}"
    assert proc.stdout.count(plan) == 1, proc.stdout[-3000:]  # logged once, by rank 0
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(procs)]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pool_size_gives_the_same_pool_and_rewards_on_one_and_two_processes(tmp_path):
    """With pool_size the accumulation is derived: 16 = 4 x 1 x 4 = 4 x 2 x 2, and the same
    prompts in the same order give, with top-1 decoding, the same completions and identical
    rewards on one and two processes. Catches a fixed gradient_accumulation_steps, under which
    the pool (and every rank weight alpha = H_n - H_{n-r}) changes with the number of GPUs."""
    golds = _greedy_mixed_dataset(tmp_path / "data")
    one = _launch(tmp_path / "one", 1, "greedy")[0]
    two = _launch(tmp_path / "two", 2, "greedy")
    assert two[0] == two[1]
    assert (one["accumulation"], two[0]["accumulation"]) == (4, 2)
    assert one["pool_sizes"] == two[0]["pool_sizes"] == [float(POOL)]
    a, b = one["pools"][0], two[0]["pools"][0]
    assert a["golds"] == b["golds"]  # the same prompts, in the same (process) order
    assert a["texts"] == b["texts"]
    assert a["rewards"] == b["rewards"]
    # the pool's rewards are not all alike, by construction: two prompts right, two wrong
    assert sorted({g[0] for g in a["golds"]}) == sorted(set(golds))
    assert 0 < sum(a["correct"]) < len(a["correct"]) and len(set(map(str, a["rewards"]))) >= 2


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_processes_rank_the_whole_pool_exactly(tmp_path):
    from test_trainer_support import format_warm_model, recompute_pool_rewards

    from rlsr.equations.rewards import lifted_aurc_rewards
    from rlsr.verifiers import get_verifier

    format_warm_model()  # build the cached fixture once, before two ranks race for it
    ranks = _launch(tmp_path, PROCS, "sampled")
    assert ranks[0] == ranks[1], "ranks disagree on the pooled data or rewards"
    assert ranks[0]["accumulation"] == POOL // (PER_DEVICE * PROCS)
    pools = ranks[0]["pools"]
    assert len(pools) == STEPS
    expected_pool = POOL
    assert ranks[0]["pool_sizes"] == [float(expected_pool)] * STEPS

    verifier = get_verifier("exact_match")
    rankings_differ = False
    for pool in pools:
        assert pool["num_processes"] == PROCS
        n = len(pool["texts"])
        assert n == expected_pool == len(pool["rewards"])
        # Prompt groups are contiguous blocks of G rows (TRL reshapes with view(-1, G)).
        for start in range(0, n, G):
            assert all(g == pool["golds"][start] for g in pool["golds"][start : start + G])

        scored, confidence, expected = recompute_pool_rewards(pool, verifier)

        half = n // PROCS
        local = np.concatenate(
            [
                lifted_aurc_rewards(
                    scored[i * half : (i + 1) * half], confidence[i * half : (i + 1) * half]
                )
                for i in range(PROCS)
            ]
        ).astype(np.float32)
        rankings_differ |= not np.array_equal(local, expected[:, 1])
    assert rankings_differ, (
        "per-process ranking matched the pooled one on every step; weak test data"
    )

    # The pool files: each step once, rows in the gathered order, advantages from both ranks.
    from rlsr.method.pool_log import read_pool
    from rlsr.run.run_layout import pool_path, pool_steps

    run = tmp_path / "run"
    assert pool_steps(run) == [pool["step"] for pool in pools] == list(range(STEPS))
    assert not list((run / "pools").glob("*.tmp"))
    for pool in pools:
        rows = read_pool(pool_path(run, pool["step"]))
        assert [r["completion"] for r in rows] == pool["texts"]
        assert [r["gold"] for r in rows] == pool["golds"]
        assert [r["correct"] for r in rows] == pool["correct"]
        assert [r["confidence"] for r in rows] == pool["confidence"]
        logged = np.array([list(r["rewards"].values()) for r in rows], dtype=np.float32)
        np.testing.assert_array_equal(logged, np.array(pool["rewards"], dtype=np.float32))
        reward = np.array(pool["rewards"], dtype=np.float64) @ np.array([0.5, 0.5])
        grouped = reward.reshape(-1, G)
        centred = (grouped - grouped.mean(axis=1, keepdims=True)).reshape(-1)
        np.testing.assert_allclose([r["advantage"] for r in rows], centred, atol=1e-5)
        assert np.abs(centred).max() > 0.01  # not all equal: the order is checked


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_held_out_evaluation_is_sharded_across_processes_and_joined_once(tmp_path):
    """Two processes: each answers its own contiguous half of the held-out questions (shard
    sizes recorded in metrics.json), rank 0 joins them in dataset order and computes the
    metrics once; no per-rank folder is left behind (rlsr.evaluation.heldout.evaluator)."""
    from rlsr.data.loading import load_examples

    _launch(tmp_path / "two", 2, "heldout")
    folder = tmp_path / "two" / "run" / "eval" / "step-1" / "tiny"
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["in_training"]["processes"] == 2
    assert metrics["in_training"]["shard_sizes"] == [10, 10]
    assert metrics["n"] == 20
    ids = [json.loads(line)["id"] for line in (folder / "samples.jsonl").read_text().splitlines()]
    assert ids == list(load_examples("tiny", split="test", limit=20)["id"])
    assert not list(folder.glob("rank-*"))
    history = (tmp_path / "two" / "run" / "eval" / "history.jsonl").read_text().splitlines()
    assert [json.loads(h)["step"] for h in history] == [0, 1]  # the recipe also evaluates step 0


if __name__ == "__main__":
    _worker(*sys.argv[1:])
