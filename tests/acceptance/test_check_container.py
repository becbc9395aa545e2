"""The image's build steps without Docker (`scripts/check-container`): slow, needs PyPI."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs() -> None:
    result = subprocess.run(
        [str(ROOT / "scripts" / "check-container")],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "installs and runs" in result.stdout
