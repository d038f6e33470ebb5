"""Examples outside the ``rlsr`` library (not installed with the package).

``examples.toy`` is the CPU toy reproduction (docs/toy.md; ``python examples/toy/toy_repro.py``);
``examples/my_method`` is a reward-method plugin (docs/methods.md). The tests import them from a
clone (pytest puts the repository root on the path: pyproject.toml, ``pythonpath``).
"""
