"""Prometheus metrics, one registry per app (so tests and several apps in a process stay apart).

Names follow Prometheus practice: base units (`_seconds`), counters end in `_total`.

The latency histograms are lava's own (`LoopHistogram`), exposed through prometheus_client's
registry like any other collector: they are observed about forty times per MAGMA-GEN batch (per
input, per backend call, per model step), all on the event loop's thread, where
prometheus_client's per-value locks cost more than the counting itself.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.samples import Sample

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 300)


class _Series:
    """One label set's observations: a count per bucket (not cumulative) and their sum."""

    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.created = time.time()  # prometheus_client's `_created` sample

    def observe(self, amount: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bucket (le is "less or equal").
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.total += amount


class LoopHistogram:
    """A Prometheus histogram for values observed on one thread (the event loop's): what
    prometheus_client's `Histogram` exposes, buckets included, without a lock per update."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Sequence[float], registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self._series: dict[tuple[str, ...], _Series] = {}
        if not self.labelnames:
            self._unlabelled = self.labels()
        registry.register(self)

    def labels(self, *values: str) -> _Series:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(self.bounds)
        return series

    def observe(self, amount: float) -> None:
        self._unlabelled.observe(amount)

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, series in list(self._series.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*self.bounds, float("inf")), list(series.counts), strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric(list(key), buckets, series.total)
            family.samples.append(Sample(f"{self.name}_created", dict(zip(self.labelnames, key, strict=True)),
                                         series.created))
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("lava_requests_total", "POST /v1/responses answered, by HTTP status",
                                ["status"], registry=r)
        self.request_seconds = LoopHistogram("lava_request_seconds", "Time to answer a /v1/responses request",
                                             buckets=LATENCY_BUCKETS, registry=r)
        self.decision_seconds = LoopHistogram("lava_decision_seconds", "Time to decide all candidates of one input",
                                              buckets=LATENCY_BUCKETS, registry=r)
        self.candidates = Counter("lava_candidates_total", "Candidates answered, by status and error code",
                                  ["status", "code"], registry=r)
        self.model_calls = Counter("lava_model_calls_total", "Model calls recorded in internal steps, by component",
                                   ["component"], registry=r)
        self.model_seconds = LoopHistogram("lava_model_call_seconds", "Duration of one model call",
                                           buckets=LATENCY_BUCKETS, registry=r)
        # Measured at lava's side of the seam, so it includes retries, queueing and the network,
        # and counts a call shared by n candidates once (model_call_seconds sees n steps).
        self.backend_seconds = LoopHistogram("lava_backend_call_seconds", "Time lava waited for one backend call",
                                             ["backend"], buckets=LATENCY_BUCKETS, registry=r)
        self.tokens = Counter("lava_tokens_total", "Model tokens, by kind (input, output, cached)", ["kind"],
                              registry=r)
        self.repairs = Counter("lava_parse_repairs_total", "Model answers that needed a repair call", registry=r)
        self.pending = Gauge("lava_requests_pending", "Requests being answered (the admission queue's depth)",
                             registry=r)
        self.in_flight = Gauge("lava_inputs_in_flight", "Inputs being decided or waiting for a slot", registry=r)
        # Read when scraped, rather than a locked update on every input's start and end.
        self.inputs_in_flight = 0
        self.in_flight.set_function(lambda: self.inputs_in_flight)
        # Labelled children looked up once: a GEN batch observes dozens of them per request.
        self._input_tokens, self._output_tokens, self._cached_tokens = (
            self.tokens.labels(kind) for kind in ("input", "output", "cached"))
        self._children: dict[tuple[Counter, tuple[str, ...]], Counter] = {}

    def observe_candidate(self, output: dict) -> None:
        self.observe_candidates([output])

    def observe_candidates(self, outputs: list[dict]) -> None:
        """A request's candidates, summed first: one locked update per counter and label instead of
        several per candidate (a GEN batch has 20), and each step read once. Model-call durations
        stay one observation each."""
        candidates: dict[tuple[str, str], int] = {}
        calls: dict[str, int] = {}
        repairs = input_tokens = output_tokens = cached_tokens = 0
        observe_call = self.model_seconds.observe
        for output in outputs:
            error = output.get("error") or {}
            labels = (output["status"], error.get("code", ""))
            candidates[labels] = candidates.get(labels, 0) + 1
            repaired = False
            for step in output.get("internal_steps") or ():
                component = str(step.get("component", ""))
                repaired = repaired or component.endswith(".repair")
                if "total_input_tokens" not in step:
                    continue
                calls[component] = calls.get(component, 0) + 1
                observe_call(float(step.get("duration_s", 0.0)))
                input_tokens += step.get("total_input_tokens", 0)
                output_tokens += step.get("total_output_tokens", 0)
                cached_tokens += step.get("total_cached_tokens", 0)
            repairs += repaired
        for labels, count in candidates.items():
            self._child(self.candidates, labels).inc(count)
        for component, count in calls.items():
            self._child(self.model_calls, (component,)).inc(count)
        if repairs:
            self.repairs.inc(repairs)
        self._input_tokens.inc(input_tokens)
        self._output_tokens.inc(output_tokens)
        self._cached_tokens.inc(cached_tokens)

    def _child(self, counter: Counter, labels: tuple[str, ...]) -> Counter:
        """`counter.labels(*labels)`, kept: prometheus_client validates and locks on every lookup."""
        key = (counter, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(*labels)
        return child

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["LATENCY_BUCKETS", "LoopHistogram", "Metrics"]
