"""How long the server-mode held-out evaluation may take, and whether a planned one can fit.

With ``grpo.vllm_mode=server`` the main process alone sends the held-out requests to TRL's vLLM
server while the other processes wait in a collective that ``grpo.ddp_timeout`` ends
(``rlsr.evaluation.heldout.evaluator``). The requests therefore get ``server_eval_bound(ddp_timeout)``
seconds in all (``rlsr.generation.server_backend`` enforces it per request), and a held-out size
whose worst case cannot fit that bound even at a generous generation rate is refused when the run
is planned (``check_server_eval_fits``), before any model loads.
"""

from __future__ import annotations

from collections.abc import Mapping

from rlsr.core.checks import ConfigError

__all__ = [
    "ASSUMED_SERVER_TOKENS_PER_S",
    "EVAL_RESERVE_S",
    "EVAL_SHARE_OF_DDP_TIMEOUT",
    "check_server_eval_fits",
    "server_eval_bound",
    "server_eval_tokens",
]

# Of grpo.ddp_timeout, the share the requests may use: the rest is left for what the main
# process does after the last request while the others still wait (verifying, writing the
# samples, joining and summarising the metrics) and for clock skew between the processes.
EVAL_SHARE_OF_DDP_TIMEOUT = 0.8
EVAL_RESERVE_S = 60.0

# The generation rate assumed at plan time when heldout.server_tokens_per_s is null: new tokens per
# second of the whole vLLM server, all requests together. Chosen high on purpose (the check
# refuses only what cannot fit even at this rate): train.slurm starts one server with
# --data-parallel-size 1 and --tensor-parallel-size RLSR_VLLM_TP (1 by default), and we expect one
# GPU decoding a 7-8B model at full batch to generate fewer new tokens per second than this (an
# assumption, not measured: no GPU here). A faster server is declared with
# heldout.server_tokens_per_s.
ASSUMED_SERVER_TOKENS_PER_S = 20_000.0


def server_eval_bound(ddp_timeout_s: float) -> float:
    """Seconds the server-mode held-out evaluation's requests may take, all together:
    ``0.8 * ddp_timeout - 60`` (1,380 s for TRL's default 1,800 s); the other processes wait in
    a collective that ``ddp_timeout`` ends. ``ValueError`` when that leaves nothing."""
    bound = EVAL_SHARE_OF_DDP_TIMEOUT * float(ddp_timeout_s) - EVAL_RESERVE_S
    if bound <= 0:
        raise ValueError(
            f"grpo.ddp_timeout={ddp_timeout_s} s leaves no time for the server-mode held-out "
            f"evaluation (its requests get {EVAL_SHARE_OF_DDP_TIMEOUT} x ddp_timeout - "
            f"{EVAL_RESERVE_S:.0f} s); raise grpo.ddp_timeout"
        )
    return bound


def server_eval_tokens(items: int, samples_per_item: int, max_new_tokens: int) -> int:
    """New tokens one held-out evaluation asks of the server at most, its worst case (every
    answer as long as ``max_new_tokens``, which an untrained policy at step 0 can do):
    ``items x samples_per_item x max_new_tokens``. Not counted, so the estimate errs towards
    accepting: the Sec. C.3 fallbacks (at most two short continuations per answer that misses a
    tag) and the log-prob scorer's prefill-only requests."""
    return int(items) * int(samples_per_item) * int(max_new_tokens)


def check_server_eval_fits(
    items: Mapping[str, int],
    samples_per_item: int,
    max_new_tokens: int,
    ddp_timeout_s: float,
    tokens_per_s: float | None,
    *,
    section: str = "grpo",
    samples_note: str = "",
) -> None:
    """Refuse (``ConfigError`` with the numbers and the fields to change) a server-mode held-out
    evaluation whose worst case (``server_eval_tokens``) at ``tokens_per_s`` (None:
    ``ASSUMED_SERVER_TOKENS_PER_S``) takes longer than ``server_eval_bound(ddp_timeout_s)``.
    ``items``: questions per dataset that can be counted without loading it (a dataset whose
    size is unknown is left out, towards accepting)."""
    timeout_field = f"{section}.ddp_timeout"
    try:
        bound = server_eval_bound(ddp_timeout_s)
    except ValueError as err:
        raise ConfigError(timeout_field, f"{err} (heldout.backend=vllm_server).") from None
    rate = ASSUMED_SERVER_TOKENS_PER_S if tokens_per_s is None else float(tokens_per_s)
    total_items = sum(items.values())
    tokens = server_eval_tokens(total_items, samples_per_item, max_new_tokens)
    seconds = tokens / rate
    if seconds <= bound:
        return
    per_dataset = ", ".join(f"{name} {n}" for name, n in items.items())
    rate_note = (
        "heldout.server_tokens_per_s" if tokens_per_s is not None
        else "the assumed rate of one vLLM server; declare a measured one with "
        "heldout.server_tokens_per_s"
    )  # fmt: skip
    # the ddp_timeout that would hold it: 0.8 x T - 60 >= seconds
    need_timeout = (seconds + EVAL_RESERVE_S) / EVAL_SHARE_OF_DDP_TIMEOUT
    raise ConfigError(
        "heldout.limit",
        f"the held-out evaluation through the vLLM server (heldout.backend=vllm_server) cannot fit "
        f"its time bound: {total_items:,} questions ({per_dataset}) x {samples_per_item} "
        f"sample(s) per question{samples_note} x heldout.max_new_tokens {max_new_tokens:,} = "
        f"{tokens:,} new tokens at most; at {rate:,.0f} tokens/s ({rate_note}) that is "
        f"{seconds:,.0f} s > {bound:,.0f} s, the bound of {EVAL_SHARE_OF_DDP_TIMEOUT} x "
        f"{timeout_field} {ddp_timeout_s:,.0f} s - {EVAL_RESERVE_S:.0f} s (the other processes "
        f"wait that long for the main one). Lower heldout.limit or heldout.max_new_tokens (or "
        f"heldout.consistency_k), raise {timeout_field} to at least {need_timeout:,.0f}, or set "
        "heldout.every=0 and evaluate the checkpoints with `rlsr evaluate`.",
    )
