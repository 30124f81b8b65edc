"""Which object a reconcile pass acts on while the watch has not delivered its own status write."""

from ascend_fleet.reconcile.object_loop import acting_view


def obj(version: str, ready: int, generation: int = 1) -> dict:
    return {
        "metadata": {"name": "a", "resourceVersion": version, "generation": generation},
        "spec": {"parallelism": {"data": 1}},
        "status": {"readyReplicas": ready},
    }


def test_until_the_watch_delivers_our_write_the_pass_acts_on_what_the_write_returned():
    written = obj("12", 0)
    view, still = acting_view(obj("10", 0) | {"status": {}}, written)
    assert still is written
    assert view["metadata"]["resourceVersion"] == "12"  # the next status write is guarded by our version
    assert view["status"] == {"readyReplicas": 0}
    view["status"]["readyReplicas"] = 1
    assert written["status"] == {"readyReplicas": 0}  # a copy: the pass's changes stay its own


def test_once_the_watch_has_caught_up_its_object_is_used_and_the_write_forgotten():
    newer = obj("13", 1)
    assert acting_view(newer, obj("12", 0)) == (newer, None)
    same = obj("12", 0)
    assert acting_view(same, obj("12", 0)) == (same, None)
    assert acting_view(same, None) == (same, None)


def test_opaque_versions_count_as_caught_up_only_when_equal():
    view, still = acting_view(obj("b", 0), obj("a", 1))
    assert still is not None and view["status"] == {"readyReplicas": 1}
    assert acting_view(obj("a", 0), obj("a", 1))[1] is None
