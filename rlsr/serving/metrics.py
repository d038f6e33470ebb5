"""Prometheus metrics of ``rlsr serve`` (``GET /metrics``; docs/serving.md, "Operating it"), in a
registry of the app's own (two apps in one process never share counts):

* ``rlsr_requests_total{outcome}``: answered / abstained / error (any 4xx / 5xx of the chat
  route) / cancelled (the client went away; its engine work was aborted);
* ``rlsr_confidence``: the score compared with tau (a missing confidence counts as 0);
* ``rlsr_answer_rate`` (realised coverage) beside ``rlsr_certified_coverage`` (the threshold's
  validation coverage; absent with ``--tau``) and ``rlsr_tau``;
* ``rlsr_request_latency_seconds``; ``rlsr_time_to_first_chunk_seconds`` (streamed: the decision
  comes first, so about the same);
* ``rlsr_requests_in_flight``, ``rlsr_max_queued_requests`` (the 429 bound) and
  ``rlsr_engine_requests`` (generation requests the engine holds for this server, fallbacks
  included: back to 0 once abandoned requests are aborted).

No question, answer, key or request id is recorded.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ServeMetrics", "CONFIDENCE_BUCKETS", "LATENCY_BUCKETS"]

CONFIDENCE_BUCKETS = tuple(round(0.1 * k, 1) for k in range(11))
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ServeMetrics:
    """The metrics of one app. ``in_flight`` reads the middleware's count at scrape time."""

    def __init__(
        self,
        *,
        tau: float,
        certified_coverage: float | None,
        in_flight: Callable[[], int],
        max_queued_requests: int | None,
        engine_requests: Callable[[], int] | None = None,
    ) -> None:
        # optional dependency (the serve extra), imported where it is needed
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "rlsr_requests", "Chat completions by outcome.", ["outcome"], registry=self.registry
        )
        for outcome in ("answered", "abstained", "error", "cancelled"):
            self.requests.labels(outcome)  # exported at 0 from the start

        def histogram(name: str, doc: str, buckets):
            return Histogram(name, doc, buckets=buckets, registry=self.registry)

        def gauge(name: str, doc: str):
            return Gauge(name, doc, registry=self.registry)

        self.confidence = histogram(
            "rlsr_confidence", "Score compared with tau (missing confidence = 0).",
            CONFIDENCE_BUCKETS,
        )  # fmt: skip
        self.latency = histogram(
            "rlsr_request_latency_seconds", "End-to-end latency of answered / abstained requests.",
            LATENCY_BUCKETS,
        )  # fmt: skip
        self.first_chunk_latency = histogram(
            "rlsr_time_to_first_chunk_seconds", "Time to the first chunk of streamed requests.",
            LATENCY_BUCKETS,
        )  # fmt: skip
        gauge(
            "rlsr_answer_rate", "Realised coverage: answered / (answered + abstained)."
        ).set_function(self._answer_rate)
        gauge("rlsr_tau", "The threshold served.").set(tau)
        if certified_coverage is not None:
            gauge(
                "rlsr_certified_coverage", "Validation coverage of the threshold (rlsr deploy)."
            ).set(certified_coverage)
        gauge(
            "rlsr_requests_in_flight", "Chat completions accepted and not yet answered."
        ).set_function(in_flight)
        if engine_requests is not None:
            gauge(
                "rlsr_engine_requests", "Generation requests the engine holds for this server."
            ).set_function(engine_requests)
        if max_queued_requests is not None:
            gauge("rlsr_max_queued_requests", "Bound on chat completions accepted at once.").set(
                max_queued_requests
            )
        self._answered = 0
        self._abstained = 0

    def _answer_rate(self) -> float:
        n = self._answered + self._abstained
        return self._answered / n if n else float("nan")

    def decided(self, decision: str, score: float | None, seconds: float) -> None:
        """One answered or abstained request."""
        self.requests.labels(decision).inc()
        if decision == "answered":
            self._answered += 1
        else:
            self._abstained += 1
        self.confidence.observe(0.0 if score is None else score)
        self.latency.observe(seconds)

    def first_chunk(self, seconds: float) -> None:
        self.first_chunk_latency.observe(seconds)

    def error(self) -> None:
        self.requests.labels("error").inc()

    def cancelled(self) -> None:
        self.requests.labels("cancelled").inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition format and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
