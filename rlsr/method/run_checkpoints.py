"""The output layout and resume that ``RLSRTrainer`` and ``SFTAnswerTrainer`` share."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["RunCheckpoints"]


class RunCheckpoints:
    """Trainer mixin: save writes ``training_args.json`` instead of the pickled
    ``training_args.bin`` (loading a pickle runs code; nothing reads it back, resume uses
    ``trainer_state.json``); a multi-process CPU run's optimizer state loads on resume."""

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        super()._save(output_dir, state_dict=state_dict)
        folder = Path(output_dir if output_dir is not None else self.args.output_dir)
        (folder / "training_args.bin").unlink(missing_ok=True)
        (folder / "training_args.json").write_text(self.args.to_json_string())

    def _load_optimizer_and_scheduler(self, checkpoint):
        """HF Trainer's load with ``map_location`` ``cpu`` instead of ``cpu:0``: transformers 5.17
        maps ``optimizer.pt`` to ``args.device``, ``cpu:0`` for gloo processes, which torch 2.13's
        ``torch.load`` rejects ("don't know how to restore data location"), so a multi-process
        CPU run could not resume (tests/test_multinode.py)."""
        device = self.args.device
        if checkpoint is None or device.type != "cpu" or device.index is None:
            return super()._load_optimizer_and_scheduler(checkpoint)
        cached = self.args.__dict__  # TrainingArguments.device reads the cached _setup_devices
        cached["_setup_devices"] = torch.device("cpu")
        try:
            return super()._load_optimizer_and_scheduler(checkpoint)
        finally:
            cached["_setup_devices"] = device
