"""train.py that, in a Slurm job's first allocation, stops after saving checkpoint ``$RLSR_TEST_BLOCK_AT``
and waits (touching ``$RLSR_TEST_BLOCK_MARKER``) until the job is signalled: a pre-emption that
lands right after a checkpoint, on cue, for tests/test_slurm_real.py (``RLSR_TRAIN_SCRIPT``).
A requeued allocation (``SLURM_RESTART_COUNT`` > 0) is train.py unchanged."""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

import rlsr.train.training

ROOT = Path(__file__).resolve().parent.parent


class BlockAfterSave(TrainerCallback):
    """Waits forever in ``on_save`` (called once the checkpoint folder is complete)."""

    def __init__(self, step: int, marker: Path):
        self.step, self.marker = step, marker

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            self.marker.write_text(str(state.global_step))
            while True:
                time.sleep(1)


def main() -> None:
    if os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
        block = BlockAfterSave(int(os.environ["RLSR_TEST_BLOCK_AT"]),
                               Path(os.environ["RLSR_TEST_BLOCK_MARKER"]))  # fmt: skip
        run_training = rlsr.train.training.run_training
        rlsr.train.training.run_training = lambda settings, **kw: run_training(
            settings, **{**kw, "callbacks": [*(kw.get("callbacks") or []), block]}
        )
    sys.argv[0] = str(ROOT / "train.py")
    runpy.run_path(sys.argv[0], run_name="__main__")  # train.py exactly as `python train.py`


if __name__ == "__main__":
    main()
