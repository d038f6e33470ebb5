"""Train with RLSR / RLCR / RLVR on TRL's GRPOTrainer (or the SFT baseline, method=sft, on TRL's
SFTTrainer). Hydra entry point.

    python train.py recipe=tiny                                   # CPU smoke run, ~1 minute
    accelerate launch --cpu train.py recipe=tiny                  # same, through accelerate
    accelerate launch --config_file recipes/accelerate/ddp.yaml train.py recipe=hotpot method=rlsr
    accelerate launch ... train.py recipe=bigmath method=rlcr model=llama3.1-8b grpo.learning_rate=1e-5

The configuration tree lives in recipes/ (docs/training.md). The configuration is composed and
checked with light modules only (Hydra, omegaconf, rlsr.config, the method registry), before
torch, transformers or TRL are imported and before any model or dataset is loaded; a bad value
prints one line naming the field and the fix and exits with status 2 (within ~1-2 s).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from pathlib import Path

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlsr.config import ConfigError, describe_hydra_error, force_add_overrides
from rlsr.method.run_plan import RunPlan, plan_from_config
from rlsr.run.run_layout import checkpoint_folders
from rlsr.verifiers.base import VerifierFailure

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("rlsr.train")

STARTED = time.monotonic()  # the summary's wall time counts from here (torch, TRL imports included)
CONFIG_ERROR_EXIT = 2
RUN_ERROR_EXIT = 1


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0


def save_resolved_config(cfg: DictConfig, output_dir: str) -> Path:
    """Write the resolved configuration beside the checkpoints (``output_dir/config.yaml``)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    OmegaConf.save(cfg, path, resolve=True)
    return path


def checked_plan(cfg: DictConfig) -> RunPlan:
    """The run plan of the composed config (``rlsr.method.run_plan.plan_from_config``; its notes
    printed), or one ``config error:`` line and exit 2."""
    try:
        plan = plan_from_config(cfg)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
    except OmegaConfBaseException as err:  # e.g. a mandatory value (???) left unset
        print(f"config error: {describe_hydra_error(err)}", file=sys.stderr)
    else:
        for note in plan.notes:
            print(note, flush=True)
        return plan
    sys.exit(CONFIG_ERROR_EXIT)


@hydra.main(version_base="1.3", config_path="recipes", config_name="config")
def main(cfg: DictConfig) -> int:
    plan = checked_plan(cfg)
    settings = plan.settings
    if _is_main_process():
        path = save_resolved_config(cfg, settings.output_dir)
        print(f"[rlsr] resolved config: {path}", flush=True)

    # The trainer imports torch, transformers and TRL (5-10 s): only once the config is valid,
    # so a typo is answered before that (benchmarks/bench_config_errors.py).
    from rlsr.train.training import run_summary, run_training

    try:
        trainer = run_training(plan)
    except ConfigError as err:  # data-dependent checks (e.g. every prompt too long)
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)
    except VerifierFailure as err:  # a step's pool had too many items without a verdict
        print(f"error: {err}", file=sys.stderr)
        sys.exit(RUN_ERROR_EXIT)
    except Exception as err:
        message = vllm_server_failure(err, settings.grpo, settings.output_dir)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(RUN_ERROR_EXIT)
    if _is_main_process():  # where everything is, the held-out AURC, the next commands
        steps = None if trainer is None else trainer.state.global_step
        summary = run_summary(plan, seconds=time.monotonic() - STARTED, steps=steps)
        print(summary, flush=True)
    return 0


_ERRNO = re.compile(r"\[Errno -?\d+\][^'\")]*")
_URL_PATH = re.compile(r"url: (\S+)")


def vllm_server_failure(err: BaseException, grpo: dict, output_dir: str) -> str | None:
    """One line for a vLLM-server failure in ``vllm_mode=server``, else None (re-raise).

    Start-up on a machine without CUDA: ``VLLMClient.init_communicator`` raises
    NotImplementedError (NCCL weight sync); the line says so and names the alternatives.

    TRL's ``VLLMClient`` retries a failed request (urllib3: 5 tries, ~60 s of back-off), then
    raises ``requests.exceptions.ConnectionError`` from deep inside ``requests``, or a bare
    ``Exception("Request failed: <status>, <body>")`` for an HTTP error. The line names the
    server URL, the endpoint and the cause, the newest checkpoint, and how to resume.
    """
    if not (grpo.get("use_vllm") and grpo.get("vllm_mode") == "server"):
        return None
    chain, cause = [], err
    while cause is not None and len(chain) < 10:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    try:
        from requests.exceptions import RequestException
    except ImportError:  # no requests: TRL's client cannot have raised
        return None

    url = grpo.get("vllm_server_base_url") or (
        f"http://{grpo.get('vllm_server_host', '0.0.0.0')}:{grpo.get('vllm_server_port', 8000)}"
    )
    if any(isinstance(e, NotImplementedError) and "CUDA" in str(e) for e in chain):
        return (
            "grpo.vllm_mode=server: the trainer reached the vLLM server at "
            f"{url}, but TRL pushes weights to it over NCCL, which needs a CUDA GPU in the "
            "training process. Train on GPUs, or use grpo.vllm_mode=colocate (or "
            "grpo.use_vllm=false) here."
        )
    lost = next((e for e in chain if isinstance(e, RequestException)), None)
    http = next((e for e in chain if str(e).startswith("Request failed:")), None)
    if lost is None and http is None:
        return None
    if lost is not None and "can't be reached" in str(lost):  # VLLMClient.check_server
        timeout = grpo.get("vllm_server_timeout", 240)
        return (
            f"no vLLM server answered at {url}/health within grpo.vllm_server_timeout="
            f"{timeout} s. Start it first (docs/slurm.md: `vllm serve MODEL ...`), check "
            "grpo.vllm_server_host/port, or raise grpo.vllm_server_timeout for a slow start."
        )
    if lost is not None:
        text = str(lost)
        path = _URL_PATH.search(text)
        errno = _ERRNO.search(text)
        what = f"{type(lost).__name__}: {errno.group(0).strip() if errno else text[:160]}"
        where = f" ({path.group(1)})" if path else ""
        cause_text = f"stopped answering{where}: {what}, after TRL's retries"
    else:
        cause_text = f"answered with an error: {str(http)[:200]}"
    checkpoints = checkpoint_folders(output_dir)
    resume = (
        f"the newest checkpoint is {checkpoints[-1][1]}; rerun the same command (resume=auto) "
        "to continue from it"
        if checkpoints
        else "no checkpoint was saved yet; rerun the same command to start again"
    )
    one_line = " ".join(cause_text.split())
    return (
        f"the vLLM server at {url} {one_line}. Check the server's log (crashed, killed, out of "
        f"memory?), restart it, then {resume}."
    )


def cli() -> None:
    """Run ``main`` with one-line errors for problems Hydra finds while composing the config.

    Plain ``key=value`` overrides become ``++key=value`` so unknown keys reach our validation
    (closest-match suggestions, GRPOConfig fields the recipes do not list). Hydra is told to
    re-raise (``HYDRA_FULL_ERROR``) so an unknown recipe/method or a malformed override prints
    ``config error: ...`` and exits 2 instead of a multi-line report; other errors keep their
    traceback. A user who set ``HYDRA_FULL_ERROR`` gets Hydra's full output as before.
    """
    recipes = Path(__file__).resolve().parent / "recipes"
    groups = [d.name for d in recipes.iterdir() if d.is_dir()]
    sys.argv = [sys.argv[0], *force_add_overrides(sys.argv[1:], groups)]
    user_wants_full_error = bool(os.environ.get("HYDRA_FULL_ERROR"))
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        main()
    except (HydraException, OmegaConfBaseException) as err:
        if user_wants_full_error:
            raise
        print(f"config error: {describe_hydra_error(err)}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)


if __name__ == "__main__":
    cli()
