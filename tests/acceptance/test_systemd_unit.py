"""deploy/importer.service and deploy/importer.env.example, checked as files and by
``systemd-analyze verify`` where that tool exists (systemd need not be running)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from importer.adapters.rabbit.chunks import DRAIN_TIMEOUT_S
from importer.server import GRACEFUL_SHUTDOWN_S
from tests.acceptance.test_container_files import configuration_variables

ROOT = Path(__file__).parents[2]
UNIT = ROOT / "deploy" / "importer.service"
ENV_EXAMPLE = ROOT / "deploy" / "importer.env.example"
INSTALLED_IMPORTER = "/opt/importer/venv/bin/importer"
# Not for a deployment's environment file (IMPORTER_FAILPOINTS crashes the process on purpose).
TEST_ONLY_VARIABLES = {
    "IMPORTER_TEST_DATABASE_URL",
    "S3_TEST_ENDPOINT_URL",
    "RABBITMQ_TEST_URL",
    "IMPORTER_FAILPOINTS",
}


def unit_settings() -> dict[str, list[str]]:
    """``Key`` → its values in order (systemd keys may repeat), over all sections."""
    found: dict[str, list[str]] = defaultdict(list)
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            found[key].append(value)
    return found


def one(key: str) -> str:
    values = unit_settings()[key]
    assert len(values) == 1, f"{key}: {values}"
    return values[0]


def test_notify_service_with_restart_and_a_drain_longer_than_the_servers() -> None:
    assert one("Type") == "notify"
    assert one("Restart") == "on-failure"
    assert one("KillSignal") == "SIGTERM"
    # SIGTERM's drain waits for open requests, then for the chunk deliveries in hand: SIGKILL
    # only after both bounds.
    assert int(one("TimeoutStopSec").removesuffix("s")) > GRACEFUL_SHUTDOWN_S + DRAIN_TIMEOUT_S
    assert one("EnvironmentFile") == "/etc/importer/importer.env"
    assert one("ExecStart").startswith(f"{INSTALLED_IMPORTER} serve ")
    assert one("User") == one("Group") == "importer"


def test_storage_dir_is_the_state_directory_and_writable() -> None:
    settings = unit_settings()
    assert one("StateDirectory") == "importer importer/objects"
    assert one("WorkingDirectory") == "/var/lib/importer"
    assert one("ReadWritePaths") == "/var/lib/importer"
    assert "IMPORTER_STORAGE_DIR=/var/lib/importer/objects" in settings["Environment"]


def test_hardening() -> None:
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
        "RestrictNamespaces": "yes",
        "LockPersonality": "yes",
        "MemoryDenyWriteExecute": "yes",
        "CapabilityBoundingSet": "",
    }
    assert {key: one(key) for key in expected} == expected
    assert unit_settings()["SystemCallFilter"][0] == "@system-service"


def test_env_example_lists_every_variable() -> None:
    text = ENV_EXAMPLE.read_text()
    listed = set(re.findall(r"^#?([A-Z][A-Z0-9_]+)=", text, flags=re.MULTILINE))
    assert listed == configuration_variables() - TEST_ONLY_VARIABLES
    active = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", text, flags=re.MULTILINE))
    assert active == {"DATABASE_URL", "JWT_SECRET"}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not here")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """The unit as written, with ExecStart pointing at this checkout's importer (verify checks
    that the command exists and is executable; /opt/importer is not installed here)."""
    importer = shutil.which("importer", path=str(Path(ROOT / ".venv" / "bin")))
    if importer is None:
        pytest.skip("no .venv/bin/importer to stand in for the installed one")
    unit = tmp_path / "importer.service"
    unit.write_text(UNIT.read_text().replace(INSTALLED_IMPORTER, importer))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False
    )
    # verify exits 0 on unknown keys and bad values too (it only warns): no output at all.
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
