"""Repository tools outside the ``rlsr`` library (not installed with the package).

``tools.tiny`` holds everything of the tiny models and tiny tasks that a run does not need: the
committed weights (``tools/tiny/weights``), their builders, warm-up and probes, the tiny task
generator and the seed study; ``tools.engine_check`` compares a vLLM engine's weights with the
policy (the GPU acceptance run's check). The tests (``pytest`` puts the repository root on the path:
pyproject.toml, ``pythonpath``), scripts and benchmarks import it from a clone. What a run needs,
finding the tiny models and their hash check, stays in the library (``rlsr.data.tiny_models``).
"""
