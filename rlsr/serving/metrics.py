"""Prometheus metrics of ``rlsr serve`` (``GET /metrics``; docs/serving.md, "Operating it").

Written with the ecosystem's client library (``prometheus_client``, the ``serve`` extra) into a
registry of the app's own, so two apps in one process (tests) never share counts:

* ``rlsr_requests_total{outcome}``: chat completions by outcome, ``answered`` / ``abstained`` /
  ``error`` (any 4xx / 5xx of the chat route, the middleware's 401 and 429 included) /
  ``cancelled`` (the client went away first; its engine work was aborted).
* ``rlsr_confidence``: histogram of the score compared with tau (bins of 0.1; a missing
  confidence counts as 0, as in the decision).
* ``rlsr_answer_rate``: answered / (answered + abstained) since start, the realised coverage;
  ``rlsr_certified_coverage``: the threshold's validation coverage (what ``rlsr deploy`` measured
  at tau; absent with ``--tau``), so a dashboard can put the two side by side, as
  ``rlsr serve-report`` does with an interval; ``rlsr_tau``: the threshold served.
* ``rlsr_request_latency_seconds``: end-to-end latency of answered / abstained requests;
  ``rlsr_time_to_first_chunk_seconds``: of streamed ones, the time to the first chunk (the whole
  decision comes first, so it is about the end-to-end latency).
* ``rlsr_requests_in_flight``: chat completions accepted and not yet answered (waiting for or
  running on the engine); ``rlsr_max_queued_requests``: the bound past which 429 is answered;
  ``rlsr_engine_requests``: generation requests the engine holds for this server (in-process
  vLLM: its unfinished requests; upstream: calls waiting on it), fallbacks included: it returns
  to 0 once abandoned requests are aborted.

Nothing else is recorded: no question, answer, key or request id.
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
        self.confidence = Histogram(
            "rlsr_confidence", "Score compared with tau (missing confidence = 0).",
            buckets=CONFIDENCE_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "rlsr_request_latency_seconds", "End-to-end latency of answered / abstained requests.",
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.first_chunk_latency = Histogram(
            "rlsr_time_to_first_chunk_seconds", "Time to the first chunk of streamed requests.",
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        rate = Gauge(
            "rlsr_answer_rate", "Realised coverage: answered / (answered + abstained).",
            registry=self.registry,
        )  # fmt: skip
        rate.set_function(self._answer_rate)
        Gauge("rlsr_tau", "The threshold served.", registry=self.registry).set(tau)
        if certified_coverage is not None:
            Gauge(
                "rlsr_certified_coverage", "Validation coverage of the threshold (rlsr deploy).",
                registry=self.registry,
            ).set(certified_coverage)  # fmt: skip
        Gauge(
            "rlsr_requests_in_flight", "Chat completions accepted and not yet answered.",
            registry=self.registry,
        ).set_function(in_flight)  # fmt: skip
        if engine_requests is not None:
            Gauge(
                "rlsr_engine_requests", "Generation requests the engine holds for this server.",
                registry=self.registry,
            ).set_function(engine_requests)  # fmt: skip
        if max_queued_requests is not None:
            Gauge(
                "rlsr_max_queued_requests", "Bound on chat completions accepted at once.",
                registry=self.registry,
            ).set(max_queued_requests)  # fmt: skip
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
