"""What a watcher sees, the same in the API and the CLI bar: phase, recent rates, ETA."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from importer.core.progress import (
    RATE_WINDOW_S,
    Phase,
    RateWindow,
    eta_seconds,
    format_eta,
    per_second,
    run_phase,
    window_seconds,
)

NOW = dt.datetime(2026, 7, 1, 12, 0, tzinfo=dt.UTC)


def test_phases() -> None:
    assert run_phase(running=False, batches_done=True, read_to_end=True) is None
    assert run_phase(running=True, batches_done=False, read_to_end=False) is Phase.READING
    assert run_phase(running=True, batches_done=True, read_to_end=False) is Phase.APPLYING
    assert run_phase(running=True, batches_done=True, read_to_end=True) is Phase.FINALIZING


def test_the_window_is_the_run_s_age_while_it_is_younger() -> None:
    assert window_seconds(None, NOW) is None
    assert window_seconds(NOW, NOW) is None
    assert window_seconds(NOW - dt.timedelta(seconds=4), NOW) == 4.0
    assert window_seconds(NOW - dt.timedelta(hours=2), NOW) == RATE_WINDOW_S


def test_rates_and_eta() -> None:
    assert per_second(50, 10.0) == 5.0
    assert per_second(50, None) is None
    assert eta_seconds(250, 1000, 25.0) == 30.0
    assert eta_seconds(250, None, 25.0) is None
    assert eta_seconds(250, 1000, 0.0) is None  # no recent rate: unknown
    assert eta_seconds(250, 1000, None) is None
    assert eta_seconds(2000, 1000, 5.0) == 0.0


def test_format_eta_as_the_console_does() -> None:
    assert format_eta(None) == "—"
    assert format_eta(4.6) == "5s"
    assert format_eta(125) == "2m 05s"
    assert format_eta(3723) == "1h 02m 03s"


def test_the_bar_s_window_keeps_the_last_seconds() -> None:
    window = RateWindow(started=0.0)
    assert window.rates(1.0) == (0.0, 0.0)
    window.add(2.0, 100, 1000)
    assert window.rates(2.0) == (50.0, 500.0)  # since the start, younger than the window
    for t in range(3, 60):
        window.add(float(t), 100 * (t - 1), 1000 * (t - 1))
    # 100 rows/s for the last minute, whatever came before.
    rows_per_s, bytes_per_s = window.rates(59.0)
    assert round(rows_per_s, 6) == 100.0
    assert round(bytes_per_s, 6) == 1000.0


@given(st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=200))
def test_the_bar_s_window_gives_the_steady_rate_whatever_the_batches_pace(gaps: list[int]) -> None:
    """A batch after each gap (ms), 1 row and 1 byte per ms: 1,000 rows/s and bytes/s."""
    window = RateWindow(started=0.0)
    elapsed_ms = 0
    for gap in gaps:
        elapsed_ms += gap
        window.add(elapsed_ms / 1000, elapsed_ms, elapsed_ms)
    rows_per_s, bytes_per_s = window.rates(elapsed_ms / 1000)
    assert abs(rows_per_s - 1000) < 1e-6
    assert abs(bytes_per_s - 1000) < 1e-6
