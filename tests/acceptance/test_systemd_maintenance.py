"""deploy/importer-maintenance.timer and .service (issue 26): ``importer maintenance`` on a
schedule for a deployment that only uses the command line; checked as files and by
``systemd-analyze verify`` where that tool exists."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from tests.acceptance.test_systemd_unit import INSTALLED_IMPORTER, ROOT, unit_settings

SERVICE = ROOT / "deploy" / "importer-maintenance.service"
TIMER = ROOT / "deploy" / "importer-maintenance.timer"


def settings_of(path: Path) -> dict[str, list[str]]:
    """``Key`` → its values in order, over all sections."""
    found: dict[str, list[str]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            found[key].append(value)
    return found


def test_the_service_runs_maintenance_once_as_the_importer_user() -> None:
    service = settings_of(SERVICE)
    assert service["Type"] == ["oneshot"]
    assert service["ExecStart"] == [f"{INSTALLED_IMPORTER} maintenance"]
    assert service["User"] == service["Group"] == ["importer"]
    assert service["EnvironmentFile"] == ["/etc/importer/importer.env"]
    assert "Restart" not in service  # the timer runs it again
    assert "WantedBy" not in service  # started by the timer only


def test_the_service_has_the_servers_environment_storage_and_hardening() -> None:
    """What importer.service sets for the data it shares (the object store's directory, the
    environment) and its hardening, the same here."""
    service, server = settings_of(SERVICE), unit_settings()
    shared = ["Environment", "StateDirectory", "WorkingDirectory", "ReadWritePaths", "UMask"]
    hardening = [
        key
        for key in server
        if key.startswith(("Protect", "Restrict", "Private", "System", "Capability"))
        or key in ("NoNewPrivileges", "LockPersonality", "MemoryDenyWriteExecute")
    ]
    assert {k: service[k] for k in shared + hardening} == {k: server[k] for k in shared + hardening}


def test_the_timer_starts_the_service_every_few_minutes_and_catches_up() -> None:
    timer = settings_of(TIMER)
    assert timer["Unit"] == ["importer-maintenance.service"]
    assert timer["OnCalendar"] == ["*:0/5"]
    assert timer["Persistent"] == ["true"]
    assert timer["WantedBy"] == ["timers.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not here")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """Both units as written, ExecStart pointing at this checkout's importer."""
    importer = shutil.which("importer", path=str(Path(ROOT / ".venv" / "bin")))
    if importer is None:
        pytest.skip("no .venv/bin/importer to stand in for the installed one")
    service = tmp_path / SERVICE.name
    service.write_text(SERVICE.read_text().replace(INSTALLED_IMPORTER, importer))
    timer = tmp_path / TIMER.name
    timer.write_text(TIMER.read_text())
    result = subprocess.run(
        ["systemd-analyze", "verify", str(service), str(timer)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
