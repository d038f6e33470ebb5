"""``rlsr serve``: an OpenAI-compatible chat endpoint that answers at or above a certified
confidence threshold and abstains below it (docs/serving.md; modules: docs/architecture.md).
"""

__all__ = ["DEFAULT_ABSTAIN_MESSAGE", "DEFAULT_RULE"]

# The defaults rlsr serve's flags show (declared here, light, so its --help loads no engine)
DEFAULT_ABSTAIN_MESSAGE = "I am not confident enough to answer this question."
DEFAULT_RULE = "clopper_pearson"  # the row of deployment.json served
