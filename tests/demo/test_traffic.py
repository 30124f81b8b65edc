"""The routed-traffic figures `ascend-fleet dev --routing` shows, from what the client recorded (pure)."""

from __future__ import annotations

from ascend_fleet.api.v1alpha1 import Routing
from ascend_fleet_dev.demo import view
from ascend_fleet_dev.demo.traffic import Record, window

SEEDS = Routing.model_validate({"mode": "inferencePool"})  # the seeds' three classes


def test_window_counts_each_class_over_the_last_seconds():
    records = [
        Record(at=1.0, cls="short", status=200, first_token=0.2),  # before the window
        Record(at=5.0, cls="short", status=200, first_token=0.3),
        Record(at=6.0, cls="short", status=200, first_token=1.4),  # slow
        Record(at=7.0, cls="short", status=429, first_token=None),  # shed
        Record(at=8.0, cls="long", status=200, first_token=2.5),  # slow
        Record(at=9.0, cls="long", status=0, first_token=None, error="ClientConnectorError"),  # no answer
        Record(
            at=9.2, cls="long", status=0, first_token=0.1, error="ClientPayloadError after 200"
        ),  # broke off
        Record(at=9.5, cls="long", status=502, first_token=None),
        Record(at=9.6, cls="long", status=502, first_token=None),
    ]
    figures = {f.name: f for f in window(records, SEEDS, now=10.0, seconds=8.0)}
    assert [f.name for f in window(records, SEEDS, 10.0, 8.0)] == ["short", "medium", "long"]  # by priority
    short, medium, long = figures["short"], figures["medium"], figures["long"]
    assert short.per_second == 3 / 8 and short.slow_share == 1 / 2 and short.shed == 1 and short.failed == 0
    assert medium.per_second == 0 and medium.slow_share is None
    assert long.slow_share == 1.0 and long.failed == 4 and long.shed == 0
    # Each failure is named by what the client got, so a failed request in a log says what broke it.
    assert long.failures == "502 x2, ClientConnectorError, ClientPayloadError after 200"


def test_the_live_frame_and_the_log_line_show_routed_traffic():
    snapshot = view.Frame(
        elapsed=12,
        name="qwen",
        desired=2,
        ready=2,
        conditions={},
        traffic=[
            view.ClassFigures("short", 2, 3.5, 0.25, 1, 0),
            view.ClassFigures("long", 0, 0.5, None, 0, 2, "502 x2"),
        ],
        gateway="http://127.0.0.1:8080",
    )
    frame = "\n".join(view.frame(snapshot))
    assert "routed traffic, last 10 s (Envoy + endpoint picker at http://127.0.0.1:8080)" in frame
    assert "short" in frame and " 25.0%" in frame
    line = view.status_line(snapshot)
    assert "routed short 3.5/s 25.0% >1s 1 shed, long 0.5/s - >1s 2 failed (502 x2)" in line
    # Without routing nothing about traffic is shown.
    plain = view.Frame(elapsed=12, name="qwen", desired=2, ready=2, conditions={})
    assert "routed" not in "\n".join(view.frame(plain)) + view.status_line(plain)
