"""``rlsr serve``: an OpenAI-compatible chat endpoint that answers at or above a certified
confidence threshold and abstains below it (docs/serving.md).

* ``policy``: the pure decision (score, tau -> answered / abstained) and the serving settings;
* ``threshold``: reading a ``deployment.json`` of ``rlsr deploy`` and checking its provenance;
* ``protocol``: OpenAI request validation and response / error bodies (pure);
* ``engine``: the generation engines (in-process vLLM ``AsyncLLM``, or an upstream server);
* ``respond``: one request end to end (render, generate, Sec. C.3 fallbacks, decide);
* ``decision_log``: the JSONL decision log and ``rlsr serve-report``'s table of it (the
  decisions and their realised coverage are ``rlsr.evaluation.deploy.decisions``');
* ``app``: the FastAPI application; the commands ``rlsr serve`` and
  ``rlsr serve-report``: ``rlsr.cli.serve_cli``.
"""

__all__ = ["DEFAULT_ABSTAIN_MESSAGE", "DEFAULT_RULE"]

# The defaults rlsr serve's flags show (declared here, light, so its --help loads no engine)
DEFAULT_ABSTAIN_MESSAGE = "I am not confident enough to answer this question."
DEFAULT_RULE = "clopper_pearson"  # the row of deployment.json served
