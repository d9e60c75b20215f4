"""Prometheus metrics of one app (its own registry, so that several apps in one process, as in
the tests, never share counters). Served at /metrics in the text exposition format."""
from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("scratchformer_requests", "HTTP requests by route and status code",
                                ["route", "status"], registry=r)
        self.latency = Histogram("scratchformer_request_seconds", "request latency (seconds) by route",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("scratchformer_queue_depth", "requests waiting for a batch, by model and route",
                                 ["model", "route"], registry=r)
        self.batch_requests = Histogram("scratchformer_batch_requests", "requests run together in one batch",
                                        ["model", "route"], buckets=BATCH_BUCKETS, registry=r)
        self.batch_inputs = Histogram("scratchformer_batch_inputs", "inputs (texts) run together in one batch",
                                      ["model", "route"], buckets=BATCH_BUCKETS, registry=r)
        self.tokens = Counter("scratchformer_tokens", "tokens processed (input: read; output: generated)",
                              ["model", "kind"], registry=r)
        self.tokens_per_second = Gauge("scratchformer_tokens_per_second",
                                       "input tokens per second of the latest batch (rate(scratchformer_tokens_total) "
                                       "for a window)", ["model", "route"], registry=r)
        self.rejected = Counter("scratchformer_rejected", "requests refused at admission (429) by model",
                                ["model"], registry=r)
        self.streams = Gauge("scratchformer_active_streams", "generations in progress", ["model"], registry=r)

    def on_batch(self, model: str, route: str):
        def record(requests: int, inputs: int, tokens: int, seconds: float) -> None:
            self.batch_requests.labels(model, route).observe(requests)
            self.batch_inputs.labels(model, route).observe(inputs)
            self.tokens.labels(model, "input").inc(tokens)
            self.tokens_per_second.labels(model, route).set(tokens / max(seconds, 1e-9))
        return record

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
