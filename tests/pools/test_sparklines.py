"""The capacity page's sparklines (issue 21 item 11): a line per pool drawn by the server,
with its figures in words."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pools.core.sparklines import HEIGHT, PAD, WIDTH, sparkline


def points(path: str) -> list[list[tuple[float, float]]]:
    runs = []
    for part in path.split("M")[1:]:
        runs.append([tuple(map(float, p.strip().split())) for p in part.split("L")])
    return runs


def test_a_full_day_runs_from_the_left_edge_to_the_right_with_zero_at_the_bottom():
    line = sparkline([0.0, 50.0, 100.0])
    [run] = points(line.path)
    assert run == [(PAD, HEIGHT - PAD), (WIDTH / 2, HEIGHT / 2), (WIDTH - PAD, PAD)]
    assert (line.average, line.peak, line.latest, line.measured, line.slots) == (50.0, 100.0, 100.0, 3, 3)


def test_a_gap_in_the_measurements_breaks_the_line_and_a_lone_value_still_shows():
    line = sparkline([10.0, 20.0, None, 30.0, None])
    runs = points(line.path)
    assert len(runs) == 2 and len(runs[0]) == 2
    assert len(runs[1]) == 2 and runs[1][0][1] == runs[1][1][1]  # the lone hour: a short dash
    assert line.latest == 30.0 and line.measured == 3


def test_nothing_measured_is_an_empty_line_the_page_states_in_words():
    line = sparkline([None] * 24)
    assert line.empty and line.path == "" and line.average is None


def test_values_beyond_the_scale_are_clipped_to_the_box():
    [run] = points(sparkline([-5.0, 250.0]).path)
    assert run[0][1] == HEIGHT - PAD and run[1][1] == PAD


@given(st.lists(st.one_of(st.none(), st.floats(min_value=-1e6, max_value=1e6)), min_size=1, max_size=48))
def test_every_point_stays_inside_the_box(values):
    line = sparkline(values)
    for run in points(line.path):
        assert all(0 <= x <= WIDTH and 0 <= y <= HEIGHT for x, y in run)
    assert line.measured == sum(v is not None for v in values)
