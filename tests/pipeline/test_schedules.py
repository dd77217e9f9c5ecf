"""Every pipeline schedule in the registry meets the same invariants; lookup and registration errors.

The checker is written once and parametrized over the registry, so a new schedule module is
checked as soon as its registry line exists: each stage's order lists every forward and backward
once, a backward after its forward; the in-flight count it claims is the peak of its own order;
its rules only wait for units earlier in its order and earlier in its build order, so building
and running the rules cannot deadlock and cannot contradict the order.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.config.loader import spec_from_data
from parplan.config.strategy import CommunicationSpec
from parplan.errors import ConfigError, PlanError
from parplan.pipeline import (
    DEFAULT_SCHEDULE,
    SCHEDULES,
    PipelineSchedule,
    Stage,
    Unit,
    get,
    peak_inflight,
    register,
    schedule_names,
    unregister,
)

NAMES = sorted(SCHEDULES)


def check_stage(schedule: PipelineSchedule, stage: Stage) -> None:
    """Every invariant of ``schedule`` on one stage."""
    m = stage.microbatches
    order = schedule.worker_order(stage)
    assert sorted(order) == sorted(Unit(d, j) for j in range(m) for d in ("F", "B"))
    place = {unit: pos for pos, unit in enumerate(order)}
    assert all(place[Unit("F", j)] < place[Unit("B", j)] for j in range(m))
    assert schedule.inflight_microbatches(stage) == peak_inflight(order)
    held = [0]
    for unit in order:
        held.append(held[-1] + (1 if unit.direction == "F" else -1))
    assert min(held) == 0 and held[-1] == 0 and max(held) == schedule.inflight_microbatches(stage)
    built = {unit: pos for pos, unit in enumerate(schedule.build_order(m))}
    assert sorted(built) == sorted(place)
    for unit in order:
        for other in schedule.waits_for(unit, stage):
            assert place[other] < place[unit], f"{unit} waits for {other}, later in the order"
            assert built[other] < built[unit], f"{unit} waits for {other}, built later"
    if schedule.backward_waits_for_forwards:
        last_forward = max(place[Unit("F", j)] for j in range(m))
        assert all(place[Unit("B", j)] > last_forward for j in range(m))
        assert max(built[Unit("F", j)] for j in range(m)) < min(built[Unit("B", j)] for j in range(m))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("m", "s"), [(1, 1), (1, 4), (4, 1), (4, 4), (8, 4), (3, 5), (16, 3)])
def test_every_schedule_meets_the_invariants_on_every_stage(name: str, m: int, s: int) -> None:
    for i in range(s):
        check_stage(get(name), Stage(index=i, num_stages=s, microbatches=m))


@pytest.mark.parametrize("name", NAMES)
@given(m=st.integers(1, 24), s=st.integers(1, 12), data=st.data())
@settings(max_examples=60, deadline=None)
def test_invariants_hold_for_any_shape(name: str, m: int, s: int, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, s - 1))
    check_stage(get(name), Stage(index=i, num_stages=s, microbatches=m))


def _text(order: tuple[Unit, ...]) -> list[str]:
    return [f"{d}{j}" for d, j, _ in order]


def test_the_orders_are_the_textbook_ones() -> None:
    gpipe, one_f_one_b = get("gpipe"), get("1f1b")
    assert _text(gpipe.worker_order(Stage(0, 4, 3))) == ["F0", "F1", "F2", "B0", "B1", "B2"]
    assert _text(one_f_one_b.worker_order(Stage(2, 4, 4))) == ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]
    assert _text(one_f_one_b.worker_order(Stage(3, 4, 3))) == ["F0", "B0", "F1", "B1", "F2", "B2"]
    assert _text(one_f_one_b.worker_order(Stage(0, 4, 2))) == ["F0", "F1", "B0", "B1"]
    assert [one_f_one_b.inflight_microbatches(Stage(i, 4, 8)) for i in range(4)] == [4, 3, 2, 1]
    assert gpipe.inflight_microbatches(Stage(3, 4, 8)) == 8
    assert one_f_one_b.waits_for(Unit("F", 5), Stage(1, 4, 8)) == (Unit("B", 2),)
    assert one_f_one_b.waits_for(Unit("F", 2), Stage(1, 4, 8)) == ()
    assert one_f_one_b.waits_for(Unit("B", 5), Stage(1, 4, 8)) == ()
    assert gpipe.backward_waits_for_forwards and not one_f_one_b.backward_waits_for_forwards


def test_names_default_and_the_config_agree() -> None:
    assert schedule_names() == ("gpipe", "1f1b", "interleaved_1f1b")
    assert all(SCHEDULES[n].name == n for n in SCHEDULES)
    assert DEFAULT_SCHEDULE in SCHEDULES
    assert CommunicationSpec().schedule == DEFAULT_SCHEDULE
    schema = CommunicationSpec.model_json_schema()["properties"]["schedule"]
    enum = ["gpipe", "1f1b", "interleaved_1f1b"]
    assert schema == {"default": "gpipe", "enum": enum, "title": "Schedule", "type": "string"}


def test_unknown_name_lists_the_valid_ones() -> None:
    valid = "gpipe, 1f1b, interleaved_1f1b"
    with pytest.raises(PlanError, match=rf"unknown pipeline schedule 'zigzag'; valid: {valid}$"):
        get("zigzag")


class _Lockstep(PipelineSchedule):
    """A toy: one micro-batch at a time (its in-flight count comes from the base class)."""

    name = "lockstep"

    def worker_order(self, stage: Stage) -> tuple[Unit, ...]:
        return tuple(Unit(d, j) for j in range(stage.microbatches) for d in ("F", "B"))


def test_register_and_unregister() -> None:
    toy = register(_Lockstep())
    try:
        assert get("lockstep") is toy and schedule_names()[-1] == "lockstep"
        check_stage(toy, Stage(0, 3, 5))
        assert toy.inflight_microbatches(Stage(0, 3, 5)) == 1
        assert CommunicationSpec(schedule="lockstep").schedule == "lockstep"
        enum = CommunicationSpec.model_json_schema()["properties"]["schedule"]["enum"]
        assert enum == ["gpipe", "1f1b", "interleaved_1f1b", "lockstep"]
        with pytest.raises(PlanError, match="'lockstep' is already registered"):
            register(_Lockstep())
    finally:
        unregister("lockstep")
    assert "lockstep" not in schedule_names()
    with pytest.raises(PlanError, match="cannot be removed"):
        unregister(DEFAULT_SCHEDULE)
    with pytest.raises(PlanError, match="unknown pipeline schedule 'lockstep'"):
        unregister("lockstep")


def test_files_get_the_literal_style_error_with_every_registered_name() -> None:
    data = {
        "kind": "model_parallel",
        "partitions": [{"name": "a", "nodes": ["x"], "worker": "h0"}],
        "communication": {"schedule": "zigzag"},
    }
    with pytest.raises(ConfigError) as info:
        spec_from_data("strategy", data)
    expected = "communication.schedule: must be 'gpipe', '1f1b' or 'interleaved_1f1b', got 'zigzag'"
    assert expected in str(info.value)
    register(_Lockstep())
    try:
        with pytest.raises(ConfigError) as info:
            spec_from_data("strategy", {**data, "communication": {"schedule": 3}})
        assert "must be 'gpipe', '1f1b', 'interleaved_1f1b' or 'lockstep', got 3" in str(info.value)
    finally:
        unregister("lockstep")
