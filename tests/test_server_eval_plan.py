"""A server-mode held-out evaluation that cannot fit its time bound is refused when the run is
planned (rlsr.config.heldout), before any model loads: its worst case
(questions x samples per question x heldout.max_new_tokens new tokens) at the assumed or declared
server rate must fit 0.8 x grpo.ddp_timeout - 60 s, the time the other processes wait. The
shipped recipes, with the server mode slurm/train.slurm sets on several nodes, are not refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_config import compose

from rlsr.config import ConfigError, from_dict
from rlsr.config.heldout import (
    ASSUMED_SERVER_TOKENS_PER_S,
    check_server_eval_fits,
    server_eval_bound,
    server_eval_tokens,
)
from rlsr.method.run_plan import plan_run

ROOT = Path(__file__).resolve().parents[1]
# recipe=toy is a one-process CPU recipe (grpo.use_cpu, transformers generation): no vLLM server.
RECIPES = sorted(p.stem for p in (ROOT / "recipes" / "recipe").glob("*.yaml") if p.stem != "toy")
METHODS = sorted(p.stem for p in (ROOT / "recipes" / "method").glob("*.yaml"))
# What train.slurm adds on several nodes (trainer_overrides): TRL's server mode.
SERVER = ("grpo.use_vllm=true", "grpo.vllm_mode=server", "grpo.vllm_server_host=127.0.0.1")
# train.slurm's default layout: 4 GPUs per training node (the recipes' pools divide by it).
PROCESSES = 4


@pytest.fixture(autouse=True)
def gpu_node(monkeypatch):
    """The recipes are planned as on a GPU node with vLLM installed: this machine has neither, so
    the two machine probes are the doubles (as tests/test_config.py pretends vllm is installed);
    every check of the plan itself is real."""
    import rlsr.core.launch as M

    real = M.module_available
    monkeypatch.setattr(M, "module_available", lambda name: name == "vllm" or real(name))
    monkeypatch.setattr(M, "cuda_available", lambda: True)


def _plan(*overrides: str):
    return plan_run(from_dict(compose(*overrides)), world_size=PROCESSES)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("recipe", RECIPES)
def test_shipped_recipes_in_server_mode_are_not_refused(recipe, method):
    plan = _plan(f"recipe={recipe}", f"method={method}", "heldout.every=20", *SERVER)
    if plan.section == "grpo":  # method=sft trains without rollouts: no vLLM server
        assert plan.heldout.backend == "vllm_server"


def test_the_bigmath_recipe_fits_with_its_numbers():
    """bigmath in server mode: 3 bigmath-id sets x 200 x 4,096 tokens = 2,457,600 tokens, 123 s at
    the assumed 20,000 tokens/s, within 1,380 s (TRL's ddp_timeout 1,800 s); it would need a
    server slower than 1,781 tokens/s to be refused."""
    plan = _plan("recipe=bigmath", *SERVER)
    assert plan.heldout.backend == "vllm_server" and len(plan.heldout.jobs) == 3
    tokens = server_eval_tokens(3 * 200, 1, plan.heldout.max_new_tokens)
    assert tokens == 2_457_600
    assert tokens / ASSUMED_SERVER_TOKENS_PER_S < server_eval_bound(1800) == 1380.0
    with pytest.raises(ConfigError, match="2,457,600 new tokens"):
        _plan("recipe=bigmath", *SERVER, "heldout.server_tokens_per_s=1780")


def test_all_questions_with_consistency_is_refused_with_the_numbers():
    """The issue's case: heldout.limit=null and the consistency scorer (K=8) on bigmath-id (1,000 +
    500 + 1,319 registered test questions): 2,819 x 9 x 4,096 = 103,919,616 tokens, 5,196 s at
    20,000 tokens/s > 1,380 s."""
    with pytest.raises(ConfigError) as err:
        _plan(
            "recipe=bigmath",
            *SERVER,
            "heldout.limit=null",
            "heldout.scorers=[verbalized,consistency]",
        )
    text = str(err.value)
    assert err.value.field == "heldout.limit"
    for part in ("2,819 questions (bigmath_digits 1000, math500 500, gsm8k 1319)",
                 "x 9 sample(s) per question (1 answer + heldout.consistency_k 8)",
                 "x heldout.max_new_tokens 4,096 = 103,919,616 new tokens",
                 "at 20,000 tokens/s", "5,196 s > 1,380 s", "grpo.ddp_timeout 1,800 s",
                 "heldout.limit", "heldout.max_new_tokens", "raise grpo.ddp_timeout to at least 6,570",
                 "heldout.server_tokens_per_s"):  # fmt: skip
        assert part in text, (part, text)
    # each named fix is accepted
    _plan("recipe=bigmath", *SERVER, "heldout.limit=null", "heldout.scorers=[verbalized,consistency]",
          "+grpo.ddp_timeout=6570")  # fmt: skip
    _plan(
        "recipe=bigmath", *SERVER, "heldout.limit=200", "heldout.scorers=[verbalized,consistency]"
    )
    _plan("recipe=bigmath", *SERVER, "heldout.limit=null", "heldout.scorers=[verbalized,consistency]",
          "heldout.server_tokens_per_s=80000")  # fmt: skip
    # the colocated engine and the transformers backend have no such bound (no collective wait)
    _plan("recipe=bigmath", "heldout.limit=null", "heldout.scorers=[verbalized,consistency]")


def test_a_ddp_timeout_that_leaves_no_time_is_refused_at_plan_time():
    with pytest.raises(ConfigError) as err:
        _plan("recipe=hotpot", *SERVER, "+grpo.ddp_timeout=60")
    assert err.value.field == "grpo.ddp_timeout" and "leaves no time" in str(err.value)


def test_a_bad_declared_rate_is_refused():
    with pytest.raises(ConfigError) as err:
        _plan("recipe=hotpot", *SERVER, "heldout.server_tokens_per_s=0")
    assert err.value.field == "heldout.server_tokens_per_s"


def test_sizes_that_cannot_be_counted_are_accepted():
    """heldout.limit=null and a local copy (heldout.data_path): its size is unknown without loading it,
    so the check counts only what it can (towards accepting)."""
    check_server_eval_fits({}, 9, 4096, 1800, None)
    with pytest.raises(ConfigError, match="1,000 questions"):
        check_server_eval_fits({"a": 1000}, 9, 4096, 1800, None)
