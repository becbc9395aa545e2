"""The CLI's live bar shows what the API shows: the phase, the recent rows/s and the ETA."""

from __future__ import annotations

import io

from rich.console import Console

from importer.cli.output import TerminalProgress
from importer.core.models import Counters


def test_the_bar_goes_reading_applying_finalizing_with_a_rate_and_an_eta() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=160)
    with TerminalProgress(console) as bar:
        bar.on_start(1000)
        fields = bar._bar.tasks[0].fields
        assert (fields["phase"], fields["rate"], fields["eta"]) == ("reading", 0.0, "—")
        bar.on_batch(Counters(rows_read=100, inserted=100), 250)
        fields = bar._bar.tasks[0].fields
        assert fields["phase"] == "applying"
        assert fields["rate"] > 0
        assert fields["eta"] != "—"
        bar.on_batch(Counters(rows_read=400, inserted=400), 1000)
        fields = bar._bar.tasks[0].fields
        assert (fields["phase"], fields["eta"], fields["rows"]) == ("finalizing", "0s", 400)
