"""npu-smi parsing on recorded outputs: 910A, 910B and A3 cards, the chip map, and broken or empty output."""

from pathlib import Path

import pytest

from ascend_fleet_exporter.npu_smi import (
    MIB,
    ChipRow,
    NpuUsage,
    logical_devices,
    parse_chip_map,
    parse_usages,
    usage_of_chip,
)

DATA = Path(__file__).parent / "data"


def recorded(name: str) -> str:
    return (DATA / f"npu_smi_{name}.txt").read_text()


def test_usages_of_a_910b_card():
    usages, problems = parse_usages(recorded("usages_910b"))
    assert problems == ()
    assert usages == {
        0: NpuUsage(
            aicore_ratio=0.62,
            hbm_used_bytes=65536 * MIB * 0.87,
            hbm_total_bytes=65536 * MIB,
            aivector_ratio=0.41,
            aicpu_ratio=0.0,
            hbm_bandwidth_ratio=0.35,
        )
    }
    assert usages[0].hbm_total_bytes == 64 * 1024**3  # "MB" are mebibytes
    # This npu-smi prints no Aicube line: the cube is unknown, not idle.
    assert usages[0].aicube_ratio is None


def test_a_newer_npu_smi_on_910b_adds_the_ai_cube():
    usages, problems = parse_usages(recorded("usages_910b_newer"))
    assert problems == ()
    usage = usages[0]
    assert (usage.aicore_ratio, usage.aicube_ratio, usage.aivector_ratio) == (0.57, 0.44, 0.23)
    assert (usage.aicpu_ratio, usage.hbm_bandwidth_ratio) == (0.03, 0.71)


def test_a_910a_reports_no_vector_or_cube_and_that_is_no_problem():
    usages, problems = parse_usages(recorded("usages_910a"))
    assert problems == ()
    usage = usages[0]
    assert usage.aivector_ratio is None and usage.aicube_ratio is None
    assert (usage.aicore_ratio, usage.aicpu_ratio, usage.hbm_bandwidth_ratio) == (0.48, 0.01, 0.39)
    assert usage.hbm_total_bytes == 32 * 1024**3


def test_optional_lines_left_out_or_not_available_are_unknown_without_a_problem():
    # A virtual NPU hides the AI CPU line; a chip may also print NA where it has no reading.
    text = (
        "HBM Capacity(MB) : 1024\nHBM Usage Rate(%) : 10\nAicore Usage Rate(%) : 20\n"
        "Aivector Usage Rate(%) : NA\nHBM Bandwidth Usage Rate(%) : N/A\n"
    )
    usages, problems = parse_usages(text)
    assert problems == ()
    assert usages[None].aicore_ratio == 0.2
    assert (usages[None].aivector_ratio, usages[None].aicpu_ratio, usages[None].hbm_bandwidth_ratio) == (
        None,
        None,
        None,
    )


def test_optional_lines_with_a_value_that_is_no_percentage_are_reported():
    text = (
        "HBM Capacity(MB) : 1024\nHBM Usage Rate(%) : 10\nAicore Usage Rate(%) : 20\n"
        "Aicube Usage Rate(%) : 4294967295\nHBM Bandwidth Usage Rate(%) : busy\n"
    )
    usages, problems = parse_usages(text)
    assert usages[None].aicube_ratio is None and usages[None].hbm_bandwidth_ratio is None
    assert problems == (
        "Aicube Usage Rate(%) is '4294967295', out of range",
        "HBM Bandwidth Usage Rate(%) is 'busy', expected a number",
    )


def test_the_310p_vector_core_line_is_read_as_vector_utilization():
    usages, _ = parse_usages("Aicore Usage Rate(%) : 5\nVectorcore Usage Rate(%) : 12\n")
    assert usages[None].aivector_ratio == 0.12


def test_usages_of_an_a3_card_with_two_chips():
    usages, problems = parse_usages(recorded("usages_a3"))
    assert problems == ()
    assert usages[0].aicore_ratio == pytest.approx(0.88)
    assert usages[1].aicore_ratio == 0.0
    assert usages[1].hbm_used_bytes == pytest.approx(65536 * MIB * 0.90)
    assert (usages[1].aivector_ratio, usages[1].hbm_bandwidth_ratio) == (0.41, 0.35)


def test_not_available_values_are_unknown_and_reported():
    usages, problems = parse_usages(recorded("usages_broken"))
    assert usages == {0: NpuUsage()}  # no capacity, so no used bytes either
    assert problems == (
        "chip 0: Aicore Usage Rate(%) is 'N/A', expected a number",
        "chip 0: HBM Capacity(MB) is 'NA', expected a number",
    )


@pytest.mark.parametrize("name", ["usages_error", "usages_empty"])
def test_output_without_usage_lines_is_reported(name):
    assert parse_usages(recorded(name)) == ({}, ("npu-smi usages output has no AICore or HBM lines",))


def test_out_of_range_percentages_are_rejected():
    usages, problems = parse_usages(
        "Aicore Usage Rate(%) : 130\nHBM Capacity(MB) : 1024\nHBM Usage Rate(%) : -1\n"
    )
    assert usages == {None: NpuUsage(hbm_total_bytes=1024 * MIB)}
    assert problems == (
        "Aicore Usage Rate(%) is '130', out of range",
        "HBM Usage Rate(%) is '-1', out of range",
    )


def test_a_block_without_chip_id_stands_for_chip_0():
    usages, _ = parse_usages("AI Core Usage Rate(%) : 50\nHBM Capacity(MB) : 100\nHBM Usage Rate(%) : 10\n")
    assert usage_of_chip(usages, 0) == NpuUsage(
        aicore_ratio=0.5, hbm_used_bytes=10 * MIB, hbm_total_bytes=100 * MIB
    )
    assert usage_of_chip(usages, 1) is None


def test_blocks_opened_by_their_chip_id_are_read_too():
    text = (
        "Chip ID : 0\nAicore Usage Rate(%) : 10\nHBM Capacity(MB) : 8\nHBM Usage Rate(%) : 50\n"
        "Chip ID : 1\nAicore Usage Rate(%) : 20\nHBM Capacity(MB) : 8\nHBM Usage Rate(%) : 25\n"
    )
    usages, problems = parse_usages(text)
    assert problems == ()
    assert (usages[0].aicore_ratio, usages[1].aicore_ratio) == (0.1, 0.2)
    assert usages[1].hbm_used_bytes == 2 * MIB


def test_chip_map_of_a_910b_node_skips_the_mcus():
    chips, problems = parse_chip_map(recorded("map_910b"))
    assert problems == ()
    assert chips[:2] == [ChipRow(0, 0, 0, "Ascend 910B3"), ChipRow(1, 0, 1, "Ascend 910B3")]
    assert len(chips) == 8
    devices = logical_devices(chips)
    assert {d: (c.npu_id, c.chip_id) for d, c in devices.items()} == {n: (n, 0) for n in range(8)}


def test_chip_map_of_an_a3_node_has_two_devices_per_card():
    chips, problems = parse_chip_map(recorded("map_a3"))
    assert problems == ()
    devices = logical_devices(chips)
    assert len(devices) == 16
    assert (devices[5].npu_id, devices[5].chip_id) == (2, 1)


def test_a_container_sees_its_chips_as_devices_0_to_n_in_logic_id_order():
    chips, _ = parse_chip_map(recorded("map_container"))
    assert {d: c.npu_id for d, c in logical_devices(chips).items()} == {0: 2, 1: 5}


def test_chip_map_without_a_header_is_reported():
    assert parse_chip_map("Error: permission denied\n") == (
        [],
        ("npu-smi info -m output has no 'NPU ID ... Chip ID' header",),
    )


def test_chip_map_rows_that_are_not_rows_are_reported():
    text = recorded("map_container") + "        some trailing note\n"
    chips, problems = parse_chip_map(text)
    assert len(chips) == 2
    assert problems == ("npu-smi info -m row not understood: 'some trailing note'",)


def test_single_spaced_chip_map_with_other_columns():
    text = "NPU ID Slot ID Chip ID Chip Phy-ID Chip Name\n5 22 0 5 Ascend950PR\n"
    chips, problems = parse_chip_map(text)
    assert problems == ()
    assert chips == [ChipRow(5, 0, None, "Ascend950PR")]
    assert logical_devices(chips) == {0: chips[0]}
