"""train.py for the server-mode tests (tests/test_vllm_server_cpu.py), with the NCCL boundary
replaced: ``python tests/vllm_server_trainer.py OVERRIDES...`` (also as RLSR_TRAIN_SCRIPT).

TRL's server mode has two channels: HTTP (health, model id, generation, prefix-cache reset) and
an NCCL group through which the trainer pushes weights. NCCL needs CUDA; on a CPU
``VLLMClient.init_communicator`` raises NotImplementedError. The only test doubles here:

* ``VLLMClient.init_communicator``: records the device instead of joining the NCCL group;
* ``VLLMClient.update_named_params``: records what each weight sync would broadcast (names,
  dtypes, shapes, and that the streamed tensors are the merged LoRA policy) instead of
  broadcasting. Everything around it is real: TRL's parameter walk (PEFT merge/unmerge), the
  prefix-cache reset request to the server.

``VLLMClient.generate`` (TRL's rollout request) is wrapped, not replaced: each call is recorded
(prompts, completions per prompt) and passed on to the real method, so a test can tell TRL's
rollout requests from the held-out evaluation's on the same server. Likewise recorded, per
process: ``ServerBackend.generate`` (the held-out requests) and what
``HeldOutEvaluator.evaluate_step`` returns. Records go to $RLSR_TEST_DIR/trainer_side.json
(rank 0) and trainer_side-rankR.json (rank R > 0).

Test-only timing: urllib3's back-off cap is lowered from 120 s to 0.2 s, so TRL's five retries
against a dead server take about a second instead of a minute (the error is the same).
With RLSR_TEST_KILL_SERVER_AT_STEP=K the vLLM server (process group in RLSR_TEST_SERVER_PGID)
is killed with SIGKILL when optimizer step K ends, i.e. while training is running.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _record(**values) -> None:
    rank = os.environ.get("RANK", "0")  # set by torch.distributed.run; one file per process
    name = "trainer_side.json" if rank == "0" else f"trainer_side-rank{rank}.json"
    path = Path(os.environ["RLSR_TEST_DIR"]) / name
    data = json.loads(path.read_text()) if path.exists() else {}
    for key, value in values.items():
        data.setdefault(key, []).append(value)
    path.write_text(json.dumps(data))


def _install_doubles() -> None:
    import transformers
    from trl.generation.vllm_client import VLLMClient
    from urllib3.util.retry import Retry

    Retry.DEFAULT_BACKOFF_MAX = 0.2

    def init_communicator(self, device=0):
        _record(init_communicator=str(device), server_model=self.model)

    def update_named_params(self, metadata, named_params):
        names = [m[0] for m in metadata]
        streamed = list(named_params)  # runs TRL's walk: merge adapter, yield, unmerge
        assert [n for n, _ in streamed] == names, "metadata and streamed tensors disagree"
        _record(sync=len(names), lora_in_names=any("lora" in n for n in names))

    real_generate = VLLMClient.generate

    def generate(self, prompts, *args, **kwargs):
        output = real_generate(self, prompts, *args, **kwargs)
        _record(rollouts=[len(prompts), len(output["completion_ids"])])
        return output

    from rlsr.evaluation.heldout.evaluator import HeldOutEvaluator
    from rlsr.generation.server_backend import ServerBackend

    real_backend_generate = ServerBackend.generate
    real_evaluate_step = HeldOutEvaluator.evaluate_step

    def backend_generate(self, prompts, sampling):
        _record(server_backend=len(prompts))
        return real_backend_generate(self, prompts, sampling)

    def evaluate_step(self, step):
        scalars = real_evaluate_step(self, step)
        _record(heldout=[step, scalars])
        return scalars

    ServerBackend.generate = backend_generate
    HeldOutEvaluator.evaluate_step = evaluate_step
    VLLMClient.init_communicator = init_communicator
    VLLMClient.update_named_params = update_named_params
    VLLMClient.generate = generate

    kill_at = int(os.environ.get("RLSR_TEST_KILL_SERVER_AT_STEP", "0"))
    if kill_at:

        class KillServer(transformers.TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == kill_at:
                    os.killpg(int(os.environ["RLSR_TEST_SERVER_PGID"]), signal.SIGKILL)
                    _record(killed_at=state.global_step)

        original_train = transformers.Trainer.train

        def train(self, *args, **kwargs):
            self.add_callback(KillServer())
            return original_train(self, *args, **kwargs)

        transformers.Trainer.train = train


if __name__ == "__main__":
    _install_doubles()
    sys.argv = [str(ROOT / "train.py"), *sys.argv[1:]]
    runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
