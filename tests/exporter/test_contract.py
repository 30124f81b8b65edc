"""The operator names the exporter's series without importing it: every name it reads is one the exporter serves."""

from __future__ import annotations

import re

from ascend_fleet.api import exporter_series
from ascend_fleet.api.catalog import Catalog
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet_exporter import metrics

SERVED = {
    value
    for name, value in vars(metrics).items()
    if name.isupper() and str(value).startswith("ascend_fleet_")
}


def test_every_series_the_operator_names_is_served_by_the_exporter() -> None:
    named = {value for name, value in vars(exporter_series).items() if name.isupper()}
    assert named and named <= SERVED, named - SERVED


def test_every_exporter_series_in_the_catalog_is_served() -> None:
    control = OperatorSettings().control
    catalog = Catalog.build(control.catalog_preset, control.catalog)
    used = {
        series
        for expression in catalog.promql().values()
        for series in re.findall(r"ascend_fleet_[a-z_]+", expression)
    }
    assert len(used) >= 5 and used <= SERVED, used - SERVED
