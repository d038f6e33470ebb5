"""The tiny models and tiny tasks of the repository (not installed with the package).

* ``weights/``: the four tiny Qwen2 models and ``MANIFEST.json`` (file hashes, build settings,
  measured behaviour), found and hash-checked at run time by ``rlsr.data.tiny_models``;
* ``models``: their builders, the format warm-up and the probes that measured them;
* ``build``: rebuilds ``weights/`` (``python -m tools.tiny.build``);
* ``data``: the generator of the bundled ``tiny``, ``tiny-missing`` and ``tiny-candidates``
  tasks (the JSONL files themselves ship in ``rlsr/data/fixtures/``: they are registry tasks);
* ``seeds``: the seed study of recipe=tiny and recipe=tiny-candidates.
"""
