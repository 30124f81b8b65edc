"""The HPA baseline follows the Kubernetes algorithm; a static fleet stays put."""

from __future__ import annotations

import math

from ascend_fleet.simulate.metrics import MetricStore, Scrape
from ascend_fleet.simulate.model import SERVING, STARTING, FleetConfig, FleetView, ReplicaView
from ascend_fleet.simulate.policies import HpaPolicy, desired_replicas, hpa_replicas


def test_desired_is_ceil_of_current_times_utilization_over_target():
    assert desired_replicas(3, 0.95, 0.70, 0.10) == math.ceil(3 * 0.95 / 0.70) == 5
    assert desired_replicas(4, 0.20, 0.70, 0.10) == math.ceil(4 * 0.20 / 0.70) == 2


def test_within_the_tolerance_nothing_changes():
    assert desired_replicas(3, 0.70 * 1.09, 0.70, 0.10) == 3
    assert desired_replicas(3, 0.70 * 0.91, 0.70, 0.10) == 3
    assert desired_replicas(3, 0.70 * 1.11, 0.70, 0.10) == 4


def test_replicas_without_a_metric_damp_a_scale_up():
    # Two busy replicas and two still loading: counted at 0 %, the mean is 0.5 of target 0.7 -> no scale-up
    # beyond the four that exist.
    assert hpa_replicas(4, [1.0, 1.0], 2, 0.70, 0.10) == 4
    # Without the loading ones, the same two busy replicas would ask for ceil(2 x 1.0 / 0.7) = 3.
    assert hpa_replicas(2, [1.0, 1.0], 0, 0.70, 0.10) == 3


def view(
    now: float, desired: int, utilizations: list[float], store: MetricStore, starting: int = 0
) -> FleetView:
    store.add(Scrape(now, {i: (u, 0.0) for i, u in enumerate(utilizations)}))
    replicas = [ReplicaView(i, SERVING, 0.0, 0.0) for i in range(len(utilizations))]
    replicas += [ReplicaView(len(utilizations) + i, STARTING, now, None) for i in range(starting)]
    return FleetView(now, desired, tuple(replicas), store, FleetConfig(min_replicas=1, max_replicas=8))


def test_scale_down_waits_for_the_stabilization_window():
    hpa, store = HpaPolicy(), MetricStore(3600)
    assert hpa.decide(view(15.0, 4, [0.9] * 4, store)).replicas == math.ceil(4 * 0.9 / 0.7)
    # Load drops: the recommendation is 2, but the highest of the last 300 s (6) holds until it ages out.
    answers = {t: hpa.decide(view(t, 4, [0.3] * 4, store)).replicas for t in range(30, 331, 15)}
    assert answers[300] == 6
    assert answers[330] == math.ceil(4 * 0.3 / 0.7) == 2


def test_scale_up_is_limited_to_four_replicas_or_double_per_period():
    hpa, store = HpaPolicy(), MetricStore(3600)
    assert hpa.decide(view(15.0, 1, [1.0], store)).replicas == 2  # ceil(1 / 0.7) = 2, within the limit
    hpa, store = HpaPolicy(target=0.1), MetricStore(3600)
    assert hpa.decide(view(15.0, 1, [1.0], store)).replicas == 5  # wants 10, gets 1 + 4
