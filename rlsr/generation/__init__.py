"""Generation shared by ``rlsr evaluate`` (``rlsr.evaluation``) and ``rlsr serve``
(``rlsr.serving``): the backends (``backends``: transformers and vLLM; ``endpoint``: any
OpenAI-compatible endpoint over ``http_client``, rlsr's one such client; ``server_backend``: TRL's
vLLM server in training), the vLLM engine arguments (``engine_args``), the OpenAI wire format
(``openai_api``) and the Sec. C.3 fallback steps (``fallbacks``). docs/architecture.md has the map.
"""

__all__ = ["ENDPOINT_BACKENDS"]

# rlsr evaluate's --backend values that generate through an OpenAI-compatible endpoint, and which
# endpoint of the server each calls (declared here, light, for the command line's choices)
ENDPOINT_BACKENDS = {"openai-completions": "completions", "openai-chat": "chat"}
