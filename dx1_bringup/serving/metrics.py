"""The server's Prometheus metrics (prometheus-client), one registry per server, updated after every step."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .engine import LLMEngine, TokenEvent

__all__ = ["ServingMetrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServingMetrics:
    """Latency histograms, queue and KV-cache gauges, and counters, labelled by device where it matters."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.ttft = Histogram("dx1_serving_time_to_first_token_seconds", "From arrival to a request's first token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("dx1_serving_inter_token_latency_seconds", "Between consecutive tokens of one sample",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("dx1_serving_request_latency_seconds", "From arrival to a request's last token",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.running = Gauge("dx1_serving_requests_running", "Sequences running", ["device"], registry=r)
        self.waiting = Gauge("dx1_serving_requests_waiting", "Sequences waiting (queued or preempted)", ["device"],
                             registry=r)
        self.swapped = Gauge("dx1_serving_requests_swapped", "Sequences preempted, their KV blocks in host memory",
                             ["device"], registry=r)
        self.kv_used = Gauge("dx1_serving_kv_blocks_used", "KV-cache blocks in use", ["device"], registry=r)
        self.kv_free = Gauge("dx1_serving_kv_blocks_free", "KV-cache blocks free", ["device"], registry=r)
        self.preemptions = Counter("dx1_serving_preemptions", "Sequences preempted (recomputed or swapped)", ["device"],
                                   registry=r)
        self.prefix_hits = Counter("dx1_serving_prefix_cache_hits", "Full blocks found in the prefix cache",
                                   ["device"], registry=r)
        self.prefix_queries = Counter("dx1_serving_prefix_cache_queries", "Full blocks looked up in the prefix cache",
                                      ["device"], registry=r)
        self.tokens = Counter("dx1_serving_generation_tokens", "Tokens generated", registry=r)
        self.finished = Counter("dx1_serving_requests_finished", "Samples ended, by reason", ["reason"], registry=r)
        self.busy = Counter("dx1_serving_device_busy_seconds", "Time the device spent in steps (utilisation: its rate)",
                            ["device"], registry=r)
        self.requests_rejected = Counter("dx1_serving_requests_rejected", "Requests refused, by HTTP status",
                                         ["status"], registry=r)
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int], float] = {}
        self._seen: dict[str, tuple[int, int, int, int]] = {}

    def observe_step(self, device: str, engine: LLMEngine, events: list[TokenEvent], seconds: float) -> None:
        """After one step on ``device``: latencies of its events, and the engine's queues and cache."""
        with self._lock:
            for e in events:
                key = (e.request_id, e.index)
                state = engine.requests.get(e.request_id)
                if key not in self._last:
                    arrival = state.arrival if state is not None else e.time
                    self.ttft.observe(e.time - arrival)
                else:
                    self.itl.observe(e.time - self._last[key])
                self._last[key] = e.time
                self.tokens.inc()
                if e.finish_reason is not None:
                    self.finished.labels(e.finish_reason).inc()
                    self._last.pop(key, None)
            s, b = engine.scheduler, engine.blocks
            self.running.labels(device).set(len(s.running))
            self.waiting.labels(device).set(len(s.waiting))
            self.swapped.labels(device).set(len(s.swapped))
            self.kv_used.labels(device).set(b.num_used)
            self.kv_free.labels(device).set(b.num_free)
            before = self._seen.get(device, (0, 0, 0, 0))
            now = (s.preemptions, b.prefix_hits, b.prefix_queries, engine.aborted)
            for counter, old, new in zip((self.preemptions, self.prefix_hits, self.prefix_queries), before, now,
                                         strict=False):
                counter.labels(device).inc(new - old)
            if now[3] > before[3]:
                self.finished.labels("abort").inc(now[3] - before[3])
            self._seen[device] = now
            self.busy.labels(device).inc(seconds)

    def observe_request(self, seconds: float) -> None:
        self.e2e.observe(seconds)
