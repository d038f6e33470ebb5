"""Generation shared by ``rlsr evaluate`` (``rlsr.evaluation``) and ``rlsr serve``
(``rlsr.serving``), which import it as equals:

* ``backends``: the transformers and vLLM backends (rendered prompt text in, ``Generation`` out,
  teacher-forced ``score``), ``Sampling``, chat rendering and prompt encoding, LoRA adapter
  resolution, the vLLM sampling arguments ``rlsr serve``'s engines reuse;
* ``engine_args``: the vLLM engine arguments of both in-process engines (``rlsr evaluate
  --backend vllm``, ``rlsr serve``), sized to the machine on vLLM's CPU backend;
* ``openai_api``: the OpenAI-compatible wire format every HTTP client of a model server shares;
* ``endpoint``: any OpenAI-compatible endpoint as a backend (a hosted API, ``vllm serve``,
  ``rlsr serve``): ``rlsr evaluate --backend openai-completions|openai-chat``;
* ``http_client``: rlsr's one OpenAI-compatible client (the endpoint backend, ``rlsr serve
  --upstream``, the judge server): bounded, retrying requests and their journal
  (``requests.jsonl``);
* ``server_backend``: TRL's vLLM server as the held-out evaluation's backend in server mode;
* ``fallbacks``: the Sec. C.3 fallback steps (the record of a response, the context to continue
  when the answer or the confidence is missing, how a continuation is read).
"""

__all__ = ["ENDPOINT_BACKENDS"]

# rlsr evaluate's --backend values that generate through an OpenAI-compatible endpoint, and which
# endpoint of the server each calls (declared here, light, for the command line's choices)
ENDPOINT_BACKENDS = {"openai-completions": "completions", "openai-chat": "chat"}
