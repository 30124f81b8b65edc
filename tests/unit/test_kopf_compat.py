"""The one seam where the operator changes kopf: applied once, and only to a kopf it knows."""

import asyncio

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles

from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.handlers import kopf_compat
from ascend_fleet.handlers.kopf_compat import UnsupportedKopf
from ascend_fleet.handlers.operator import OPERATOR_RESTARTS, OperatorContext, RunOptions, run_operator


def registry_with_a_daemon() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.daemon("example.com", "v1", "things", registry=registry)
    async def daemon(**_) -> None:
        pass

    return registry


def daemon_finalizers(registry: kopf.OperatorRegistry) -> list:
    return [h.requires_finalizer for h in registry._spawning._handlers]


def test_the_installed_kopf_is_the_one_pyproject_pins():
    assert kopf_compat.supported(kopf_compat.installed_kopf())


def test_installed_once_kopf_keeps_its_own_methods_and_daemons_need_no_finalizer():
    first, second = registry_with_a_daemon(), registry_with_a_daemon()
    assert daemon_finalizers(first) == [True]  # kopf as shipped: a daemon puts a finalizer on its object
    kopf_compat.install(first)
    patched = aiotoggles.ToggleSet.make_toggle
    kopf_compat.install(second)
    kopf_compat.install(second)
    assert aiotoggles.ToggleSet.make_toggle is patched  # not wrapped again
    shipped = getattr(aiotoggles.ToggleSet, kopf_compat.SHIPPED)
    assert shipped["make_toggle"] is not patched  # kopf's own method, not a patched one kept as "shipped"
    assert daemon_finalizers(first) == daemon_finalizers(second) == [False]


@pytest.mark.parametrize("version", ["1.44.6", "1.46.0", "2.0.0", "1.37.5", "unknown"])
def test_a_kopf_outside_the_tested_range_is_refused_with_both_versions_named(monkeypatch, version):
    monkeypatch.setattr(kopf_compat, "installed_kopf", lambda: version)
    registry = registry_with_a_daemon()
    with pytest.raises(UnsupportedKopf) as refused:
        kopf_compat.install(registry)
    assert f"kopf {version} is installed" in str(refused.value)
    assert kopf_compat.SUPPORTED_KOPF_TEXT in str(refused.value)
    assert daemon_finalizers(registry) == [True]  # refused before anything was changed


def test_the_range_by_major_and_minor():
    assert kopf_compat.supported("1.45.0") and kopf_compat.supported("1.45.2")
    assert kopf_compat.supported("1.45rc1")
    assert not kopf_compat.supported("1.44.99") and not kopf_compat.supported("1.46")


def test_a_toggle_set_without_the_private_attributes_it_uses_is_refused(monkeypatch):
    class NoCondition(aiotoggles.ToggleSet):  # the methods are there, the private condition is not
        def __init__(self, fn) -> None:
            self._toggles = set()
            self._fn = fn

    NoCondition.__module__ = aiotoggles.__name__
    monkeypatch.setattr(kopf_compat, "toggle_set_class", lambda: NoCondition)
    with pytest.raises(UnsupportedKopf, match=r"ToggleSet\._condition"):
        kopf_compat.install(registry_with_a_daemon())
    assert "make_toggle" not in vars(NoCondition)  # not patched


def test_a_registry_without_the_spawning_handlers_it_marks_is_refused():
    class OtherRegistry:
        pass

    assert kopf_compat.probe_registry(OtherRegistry()) == ["OperatorRegistry._spawning._handlers"]
    with pytest.raises(UnsupportedKopf, match="_spawning._handlers"):
        kopf_compat.install(OtherRegistry())  # type: ignore[arg-type]


def test_the_operator_stops_on_an_unknown_kopf_instead_of_starting_it_again(monkeypatch):
    monkeypatch.setattr(kopf_compat, "installed_kopf", lambda: "1.99.0")
    ctx = OperatorContext(settings=OperatorSettings(), kube=None)  # type: ignore[arg-type]  # never reached
    with pytest.raises(UnsupportedKopf, match="kopf 1.99.0 is installed"):
        asyncio.run(asyncio.wait_for(run_operator(ctx, RunOptions()), 10))
    assert OPERATOR_RESTARTS == []
