"""The synthetic load model of the simulated engines: pure math and the scenario file schema."""

import pytest

from ascend_fleet_dev.fleet.scenario import (
    Curve,
    FragmentationModel,
    Profile,
    Scenario,
    ScenarioError,
)

NS, INF = "default", "qwen-7b"


def ramp_scenario(**kwargs) -> Scenario:
    return Scenario.from_dict(
        {
            "noise": 0,
            "inferences": {
                f"{NS}/{INF}": {
                    "demand": {"start": 0.5, "phases": [{"to": 3.0, "over": "30s"}, {"hold": "1min"}]},
                    "fragmentation": {"start": 0.0, "per_minute": 0.06, "replicas": {1: {"per_minute": 0.3}}},
                    **kwargs,
                }
            },
        }
    )


def test_curve_interpolates_and_holds_its_ends():
    curve = Curve(((0.0, 0.5), (30.0, 3.0), (90.0, 3.0)))
    assert curve.at(-5) == 0.5
    assert curve.at(15) == pytest.approx(1.75)
    assert curve.at(60) == 3.0
    assert curve.at(1000) == 3.0


def test_repeating_curve_loops_and_steps_are_instant():
    curve = Curve(((0.0, 1.0), (10.0, 1.0), (10.0, 2.0), (20.0, 2.0)), repeat=True)
    assert curve.at(9.9) == 1.0
    assert curve.at(10.5) == 2.0
    assert curve.at(25) == 1.0


def test_utilization_is_demand_shared_by_ready_replicas():
    scenario = ramp_scenario()
    assert scenario.sample(0, NS, INF, 0, 0, ready_replicas=1).utilization == 0.5
    assert scenario.sample(15, NS, INF, 0, 0, ready_replicas=2).utilization == pytest.approx(1.75 / 2)
    assert scenario.sample(60, NS, INF, 0, 0, ready_replicas=4).utilization == 0.75
    assert scenario.sample(60, NS, INF, 0, 0, ready_replicas=2).utilization == 1.0


def test_queue_grows_only_with_demand_beyond_the_replicas():
    scenario = ramp_scenario(max_running_requests=10)
    busy = scenario.sample(60, NS, INF, 0, 0, ready_replicas=2)
    assert (busy.requests_running, busy.requests_waiting) == (10, 5)
    calm = scenario.sample(60, NS, INF, 0, 0, ready_replicas=3)
    assert (calm.requests_running, calm.requests_waiting) == (10, 0)
    assert busy.kv_cache_usage > scenario.sample(0, NS, INF, 0, 0, ready_replicas=2).kv_cache_usage


def test_no_ready_replica_counts_as_one():
    assert ramp_scenario().sample(0, NS, INF, 0, 0, ready_replicas=0).utilization == 0.5


def test_fragmentation_grows_with_pod_age_and_resets_with_a_new_pod():
    scenario = ramp_scenario()
    assert scenario.sample(60, NS, INF, 0, pod_started_at=0, ready_replicas=2).fragmentation == pytest.approx(
        0.06
    )
    leaking = scenario.sample(60, NS, INF, 1, pod_started_at=0, ready_replicas=2)
    assert leaking.fragmentation == pytest.approx(0.3)
    recreated = scenario.sample(60, NS, INF, 1, pod_started_at=59, ready_replicas=2)
    assert recreated.fragmentation == pytest.approx(0.005)
    assert leaking.slack >= leaking.fragmentation


def test_fragmentation_is_capped():
    assert FragmentationModel(start=0.0, per_minute=1.0, max=0.4).at(3600) == 0.4


def test_alloc_retries_never_decrease_while_a_pod_lives():
    scenario = ramp_scenario()
    counts = [scenario.sample(t, NS, INF, 1, 0, 2).alloc_retries for t in range(0, 300, 7)]
    assert counts == sorted(counts)
    assert counts[-1] > 0


def test_hbm_follows_utilization():
    scenario = Scenario.constant(1.0, hbm_total_bytes=1000, hbm_static_fraction=0.5, hbm_dynamic_fraction=0.3)
    idle = scenario.sample(0, NS, INF, 0, 0, ready_replicas=1_000_000)
    busy = scenario.sample(0, NS, INF, 0, 0, ready_replicas=1)
    assert (idle.hbm_total_bytes, idle.hbm_used_bytes, busy.hbm_used_bytes) == (1000, 500, 800)


def test_core_types_and_hbm_bandwidth_follow_utilization_and_saturate_bandwidth_first():
    scenario = Scenario.constant(1.0)
    idle = scenario.sample(0, NS, INF, 0, 0, ready_replicas=1_000_000).cores
    half = scenario.sample(0, NS, INF, 0, 0, ready_replicas=2).cores
    busy = scenario.sample(0, NS, INF, 0, 0, ready_replicas=1).cores
    for name in ("aicube", "aivector", "aicpu", "hbm_bandwidth"):
        assert getattr(idle, name) < getattr(half, name) < getattr(busy, name) <= 1.0, name
    # Decode is memory-bound: at full AI Core load the bandwidth is near its peak, the matrix unit is not.
    assert busy.hbm_bandwidth >= 0.9 and busy.aicube <= 0.6
    # Whole percentages, as npu-smi prints them.
    for value in (half.aicube, half.aivector, half.aicpu, half.hbm_bandwidth):
        assert value * 100 == pytest.approx(round(value * 100), abs=1e-9)


def test_a_chip_that_prints_no_cube_or_vector_line_reports_them_as_absent():
    scenario = Scenario.from_dict({"noise": 0, "inferences": {"*": {"demand": 1.0, "chip": "ascend910a"}}})
    sample = scenario.sample(0, NS, INF, 0, 0, ready_replicas=1)
    assert (sample.cores.aicube, sample.cores.aivector) == (None, None)
    assert sample.cores.aicpu is not None and sample.cores.hbm_bandwidth is not None
    a3 = Scenario.from_dict({"inferences": {"*": {"demand": 1.0, "chip": "ascend910_93"}}})
    assert a3.sample(0, NS, INF, 0, 0, ready_replicas=1).cores.aicube is not None


def test_noise_is_small_deterministic_and_per_replica():
    first = Scenario.constant(1.0, noise=0.05)
    second = Scenario.constant(1.0, noise=0.05)
    samples = [first.sample(t, NS, INF, r, 0, 2).utilization for t in range(20) for r in (0, 1)]
    assert samples == [second.sample(t, NS, INF, r, 0, 2).utilization for t in range(20) for r in (0, 1)]
    assert all(abs(value - 0.5) <= 0.05 for value in samples)
    assert len(set(samples)) > 10


def test_origin_shifts_scenario_time():
    scenario = ramp_scenario()
    scenario.start(1000.0)
    assert scenario.demand(1015.0, NS, INF) == pytest.approx(1.75)


def test_profiles_match_exact_then_name_then_wildcard_else_idle():
    scenario = Scenario(
        {
            "*": Profile(demand=Curve(((0, 1.0),))),
            INF: Profile(demand=Curve(((0, 2.0),))),
            f"prod/{INF}": Profile(demand=Curve(((0, 3.0),))),
        }
    )
    assert [scenario.demand(0, ns, INF) for ns in ("prod", "dev")] == [3.0, 2.0]
    assert scenario.demand(0, "dev", "other") == 1.0
    assert Scenario().demand(0, "dev", "other") == 0.0


def test_overrides_pin_values_per_replica_and_clear():
    scenario = Scenario.constant(1.0)
    scenario.set(NS, INF, utilization=0.9)
    scenario.set(NS, INF, replica=1, fragmentation=0.2, queue=7)
    zero, one = (scenario.sample(0, NS, INF, r, 0, 4) for r in (0, 1))
    assert (zero.utilization, zero.fragmentation) == (0.9, 0.01)
    assert (one.utilization, one.fragmentation, one.requests_waiting) == (0.9, 0.2, 7)
    assert scenario.sample(0, "other", INF, 0, 0, 4).utilization == 0.25
    scenario.set(NS, INF, replica=1, utilization=0.1)
    assert scenario.sample(0, NS, INF, 1, 0, 4).fragmentation == 0.2
    scenario.clear(NS, INF)
    assert scenario.sample(0, NS, INF, 1, 0, 4).utilization == 0.25


def test_override_rejects_values_out_of_range():
    with pytest.raises(ValueError, match="utilization is a ratio"):
        Scenario().set(NS, INF, utilization=85)


def test_demand_as_points_and_as_constant():
    scenario = Scenario.from_dict(
        {"noise": 0, "inferences": {"a": {"demand": [[0, 1], ["10s", 3]]}, "b": {"demand": 2}}}
    )
    assert scenario.demand(5, NS, "a") == 2.0
    assert scenario.demand(99, NS, "b") == 2.0


def test_demo_scenario_peaks_leaks_then_falls():
    demo = Scenario.demo()
    two_replicas = [demo.sample(t, NS, INF, 0, 0, ready_replicas=2).utilization for t in range(20, 80)]
    assert min(two_replicas) > 0.85
    lull = [demo.sample(t, NS, INF, 0, 0, ready_replicas=2).utilization for t in range(92, 178)]
    assert max(lull) < 0.3
    assert demo.sample(45, NS, INF, 1, 0, 2).fragmentation > 0.15
    assert demo.sample(45, NS, INF, 0, 0, 2).fragmentation < 0.05


def test_scenario_file_round_trip(tmp_path):
    path = tmp_path / "load.yaml"
    path.write_text(
        "seed: 3\nnoise: 0\ninferences:\n  prod/llm:\n    demand: {start: 2, phases: [{hold: 5s}]}\n"
    )
    scenario = Scenario.from_file(path)
    assert (scenario.seed, scenario.demand(0, "prod", "llm")) == (3, 2.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "inferences:\n  a:\n    demand: {phases: [{to: 2}]}\n",
            r"inferences\.a\.demand\.phases\[0\]: expected \{hold",
        ),
        (
            "inferences:\n  a:\n    demnad: 1\n",
            r"inferences\.a: unknown field\(s\) demnad; allowed: chip, demand",
        ),
        ("inferences:\n  a:\n    demand: [[10, 1], [5, 2]]\n", "point times must not decrease"),
        ("inferences:\n  a:\n    fragmentation: {replicas: {first: {}}}\n", "keys are replica indexes"),
        ("noise: 2\n", "noise: expected a fraction between 0 and 1"),
        (
            "inferences:\n  a: {chip: ascend310p}\n",
            r"inferences\.a\.chip: expected one of ascend910a, ascend910b, ascend910_93, got 'ascend310p'",
        ),
        ("inferences:\n  a: {demand: {phases: [{hold: soon}]}}\n", "is not a duration"),
        ("- just\n- a list\n", "the top level: expected a mapping, got list"),
        ("inferences: {a: {demand: [1\n", "not valid YAML"),
    ],
)
def test_bad_scenario_files_say_where_and_why(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=message) as caught:
        Scenario.from_file(path)
    assert str(path) in str(caught.value)


def test_missing_scenario_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read the scenario file"):
        Scenario.from_file(tmp_path / "missing.yaml")
