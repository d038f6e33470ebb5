"""An example reward method from outside rlsr (docs/methods.md): the format reward plus the Brier
score of the confidence, i.e. RLCR without its correctness column. It shows the plugin mechanism;
it is not a method we recommend or evaluated.

    PYTHONPATH=examples/my_method python train.py --config-dir examples/my_method \\
        recipe=tiny method=brier_only

``method/brier_only.yaml`` beside this file names it (``method.plugin: brier_method:METHOD``).
"""

from __future__ import annotations

import numpy as np

from rlsr.equations import rewards as R
from rlsr.method.methods import MethodEntry, check_plain_reward


def brier_only(correct, confidence, format_ok, settings):
    """[format, Brier score of the confidence] over one pooled batch (an example plugin).

    ``correct`` is what the reward credits (with ``method.correct_requires_format``, the default,
    a completion that fails the format check is already False here); ``confidence`` is NaN where
    none was parsed; ``settings`` is the run's ``method`` section (``rlsr.config.MethodSettings``).
    Returns one unweighted column per entry of ``METHOD.columns``.
    """
    return np.stack(
        [R.format_reward(format_ok), R.brier_reward(correct, confidence, format_ok)], axis=1
    )


METHOD = MethodEntry(
    name="brier_only",
    columns=("format_reward", "brier_reward"),
    reward=brier_only,
    weights=("format_weight", "method_weight"),
    validate=check_plain_reward,
)
