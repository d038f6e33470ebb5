"""Repository tools outside the ``rlsr`` library (not installed with the package).

``tools.tiny_models`` builds the tiny test models, trains the format-warm copy and measures it;
the tests (``pytest`` puts the repository root on the path: pyproject.toml, ``pythonpath``),
scripts and benchmarks import it from a checkout. What a run needs, the shipped models and their
hash check, stays in the library (``rlsr.tiny_models``).
"""
