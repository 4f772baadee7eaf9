"""Prometheus metrics of a2rl's processes (the operator, the driver gateway): counters, gauges and
histograms with labels, rendered in the Prometheus text exposition format (version 0.0.4) that a
`/metrics` endpoint answers with.

Our own small registry rather than `prometheus_client`: the processes expose a few dozen series,
and the exposition format is a stable, documented text format
(https://prometheus.io/docs/instrumenting/exposition_formats/). Updates take one lock per metric,
so a hot path pays a dict lookup and an addition.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds: from a local call's milliseconds to an evaluation's minutes.
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    900.0,
)  # fmt: skip

LabelValues = tuple[str, ...]


class MetricError(ValueError):
    """A metric defined or used against its definition (a bad name, the wrong labels)."""


def _check_name(name: str) -> None:
    ok = name and (name[0].isalpha() or name[0] in "_:") and all(c.isalnum() or c in "_:" for c in name)
    if not ok:
        raise MetricError(f"not a Prometheus metric or label name: {name!r}")


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _labels_text(names: Sequence[str], values: Sequence[str], extra: tuple[str, str] | None = None) -> str:
    pairs = [f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True)]
    if extra is not None:
        pairs.append(f'{extra[0]}="{escape_label_value(extra[1])}"')
    return "{" + ",".join(pairs) + "}" if pairs else ""


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        _check_name(name)
        for label in labels:
            _check_name(label)
            if label.startswith("__") or label == "le":
                raise MetricError(f"reserved label name: {label!r}")
        self.name = name
        self.help = help_text
        self.label_names = tuple(labels)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> LabelValues:
        if set(labels) != set(self.label_names):
            raise MetricError(f"{self.name} takes the labels {list(self.label_names)}, got {sorted(labels)}")
        return tuple(str(labels[n]) for n in self.label_names)

    def header(self) -> list[str]:
        help_text = self.help.replace("\\", "\\\\").replace("\n", "\\n")
        return [f"# HELP {self.name} {help_text}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise NotImplementedError


class _Scalar(_Metric):
    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self._values: dict[LabelValues, float] = {}

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return [f"{self.name}{_labels_text(self.label_names, k)} {format_value(v)}" for k, v in items]


class Counter(_Scalar):
    """A count that only goes up (name it `..._total`)."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise MetricError(f"{self.name}: a counter cannot go down ({amount})")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(_Scalar):
    """A value that goes up and down, or is set from a fresh count (`set_all`)."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self.inc(-amount, **labels)

    def set_all(self, values: dict[LabelValues, float]) -> None:
        """Replace every series at once (a count recomputed from a listing: series that vanished go)."""
        for key in values:
            if len(key) != len(self.label_names):
                raise MetricError(f"{self.name} takes the labels {list(self.label_names)}, got {key}")
        with self._lock:
            self._values = {tuple(map(str, k)): float(v) for k, v in values.items()}


class Histogram(_Metric):
    """Observations counted into cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        labels: Sequence[str] = (),
        buckets: Iterable[float] = DEFAULT_BUCKETS,
    ) -> None:
        super().__init__(name, help_text, labels)
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        if not bounds or len(set(bounds)) != len(bounds):
            raise MetricError(f"{self.name}: buckets must be distinct and at least one")
        self.bounds = tuple(bounds)
        self._series: dict[LabelValues, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            counts, total = self._series.setdefault(key, ([0] * (len(self.bounds) + 1), [0.0]))
            index = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
            counts[index] += 1
            total[0] += value

    def count(self, **labels: str) -> int:
        with self._lock:
            series = self._series.get(self._key(labels))
            return sum(series[0]) if series else 0

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted((k, (list(c), t[0])) for k, (c, t) in self._series.items())
        lines: list[str] = []
        for key, (counts, total) in items:
            running = 0
            for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
                running += count
                labels = _labels_text(self.label_names, key, ("le", format_value(bound)))
                lines.append(f"{self.name}_bucket{labels} {running}")
            plain = _labels_text(self.label_names, key)
            lines.append(f"{self.name}_sum{plain} {format_value(total)}")
            lines.append(f"{self.name}_count{plain} {running}")
        return lines


class Registry:
    """The metrics one process exposes, rendered together."""

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}
        self._collectors: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def on_collect(self, collector: Callable[[], None]) -> None:
        """Call `collector` before each render: gauges recomputed from what the process holds."""
        with self._lock:
            self._collectors.append(collector)

    def _add(self, metric: _Metric) -> None:
        with self._lock:
            if metric.name in self._metrics:
                raise MetricError(f"metric {metric.name} is registered twice")
            self._metrics[metric.name] = metric

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        metric = Counter(name, help_text, labels)
        self._add(metric)
        return metric

    def gauge(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Gauge:
        metric = Gauge(name, help_text, labels)
        self._add(metric)
        return metric

    def histogram(
        self,
        name: str,
        help_text: str,
        labels: Sequence[str] = (),
        buckets: Iterable[float] = DEFAULT_BUCKETS,
    ) -> Histogram:
        metric = Histogram(name, help_text, labels, buckets)
        self._add(metric)
        return metric

    def render(self) -> str:
        with self._lock:
            collectors = list(self._collectors)
        for collector in collectors:
            collector()
        with self._lock:
            metrics = sorted(self._metrics.values(), key=lambda m: m.name)
        lines: list[str] = []
        for metric in metrics:
            lines += metric.header() + metric.samples()
        return "\n".join(lines) + "\n"
