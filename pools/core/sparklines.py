"""Sparklines: a small line per pool for a table cell, drawn as an inline SVG path by the
server (issue 21: utilisation trends on the capacity page).

A row of a table needs a shape, not an interactive chart: hundreds of pools in one page must
not each load a plotly figure, and an SVG path needs no script (the Content-Security-Policy
holds) and reads the same in every browser. The numbers behind it are stated in words beside
it and in its accessible name.

Pure: a list of values, one per equal time slot (None where nothing was measured), in; the
path and its summary out.
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH = 120
HEIGHT = 28
PAD = 2  # keeps a line at 0 % or 100 % inside the box


@dataclass(frozen=True)
class Sparkline:
    path: str  # SVG path data; empty when no slot has a value
    average: float | None
    peak: float | None
    latest: float | None  # the last slot with a value
    slots: int
    measured: int  # slots with a value

    @property
    def empty(self) -> bool:
        return self.measured == 0


def sparkline(values: list[float | None], *, top: float = 100.0, width: int = WIDTH, height: int = HEIGHT) -> Sparkline:
    """The path of `values` spread evenly over `width` (the first slot at the left edge, the
    last at the right), scaled so that 0 is the bottom and `top` the top; values beyond are
    clipped. A slot without a value breaks the line, so a gap in the measurements shows as a
    gap; a value alone between gaps is drawn as a short dash so that it is visible."""
    measured = [v for v in values if v is not None]
    if not measured:
        return Sparkline(path="", average=None, peak=None, latest=None, slots=len(values), measured=0)
    step = (width - 2 * PAD) / max(1, len(values) - 1)
    span = height - 2 * PAD

    def point(i: int, v: float) -> tuple[float, float]:
        clipped = min(max(v, 0.0), top)
        return PAD + i * step, PAD + span * (1 - clipped / top) if top else height - PAD

    parts: list[str] = []
    run: list[tuple[float, float]] = []
    for i, v in enumerate([*values, None]):
        if v is not None:
            run.append(point(i, v))
            continue
        if len(run) == 1:
            x, y = run[0]
            run = [(max(0.0, x - 1), y), (min(float(width), x + 1), y)]
        if run:
            parts.append("M" + " L".join(f"{x:.1f} {y:.1f}" for x, y in run))
        run = []
    return Sparkline(
        path=" ".join(parts),
        average=round(sum(measured) / len(measured), 1),
        peak=round(max(measured), 1),
        latest=round(measured[-1], 1),
        slots=len(values),
        measured=len(measured),
    )
