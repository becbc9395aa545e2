"""The Dockerfile and docker-compose.yml, checked without a Docker engine (none runs here).

What needs an engine (building the image, `docker compose up`) is not covered; the image's
install steps are rebuilt by hand by `scripts/check-container`.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
# RABBITMQ_URL and REDIS_URL: placeholders in the compose file for the broker and cache to come.
LATER_VARIABLES = {"RABBITMQ_URL", "REDIS_URL"}


def configuration_variables() -> set[str]:
    """The variable names of the configuration table (docs/OPERATIONS.md; once the README's)."""
    text = (ROOT / "docs" / "OPERATIONS.md").read_text()
    table = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    assert not pending, "a continuation line ends the Dockerfile"
    return [(i.split(None, 1)[0].upper(), i.split(None, 1)[1]) for i in logical]


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in dockerfile_instructions():
        if instruction[0] == "FROM":
            found.append([])
        found[-1].append(instruction)
    return found


def only(stage: list[tuple[str, str]], name: str) -> str:
    found = [args for instruction, args in stage if instruction == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def test_two_stages_on_python_311_slim() -> None:
    build, runtime = stages()
    assert only(build, "FROM") == "python:3.11-slim AS build"
    assert only(runtime, "FROM") == "python:3.11-slim"
    copies = [args for instruction, args in runtime if instruction == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"], "the runtime gets the venv only"


def test_runtime_runs_as_a_fixed_non_root_uid() -> None:
    runtime = stages()[-1]
    user = only(runtime, "USER")
    uid = user.split(":")[0]
    assert uid.isdigit()
    assert int(uid) >= 1000
    assert f"--uid {uid}" in only(runtime, "RUN")


def test_runtime_command_health_check_port_and_environment() -> None:
    runtime = stages()[-1]
    assert json.loads(only(runtime, "ENTRYPOINT")) == ["importer"]
    assert json.loads(only(runtime, "CMD")) == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert only(runtime, "EXPOSE") == "8000"
    health = only(runtime, "HEALTHCHECK")
    assert "http://127.0.0.1:8000/healthz" in health
    assert json.loads(health.split("CMD", 1)[1])[0] == "python", "no extra package for a probe"
    env = dict(shlex.split(item)[0].split("=", 1) for item in shlex.split(only(runtime, "ENV")))
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"].startswith("/opt/venv/bin:")
    volumes = json.loads(only(runtime, "VOLUME"))
    assert env["IMPORTER_STORAGE_DIR"] in volumes
    assert f"-o importer -g importer -m 0750 /var/lib/importer {volumes[0]}" in only(runtime, "RUN")


def test_the_build_installs_exactly_the_lock() -> None:
    """The image's dependencies are the lock's, hash-checked; a stale lock fails the build."""
    runs = " ".join(args for instruction, args in stages()[0] if instruction == "RUN")
    assert "--require-hashes --no-deps -r scripts/uv-requirements.txt" in runs
    assert "uv export --locked" in runs
    assert "--extra" not in runs, "the image installs the runtime only (no embedded server)"
    assert "pip install --require-hashes --no-deps -r requirements.txt" in runs
    assert "pip install --no-deps wheels/importer-" in runs


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    patterns = dockerignore_patterns()
    sources = [
        source
        for instruction, args in dockerfile_instructions()
        if instruction == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    ]
    assert sources == [
        "scripts/uv-requirements.txt",
        "pyproject.toml",
        "uv.lock",
        "setup.py",
        "README.md",
        "importer",
    ]
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in patterns), source
    assert {".git", ".venv", "tests"} <= set(patterns)


# --- docker-compose.yml ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (not a dependency)")
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


IMPORTERS = ("importer-1", "importer-2")


def test_compose_services_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["postgres"]["image"] == "postgres:15"
    assert services["rabbitmq"]["image"] == "rabbitmq:3.10-management"
    assert services["redis"]["image"] == "redis:7"
    assert services["minio"]["image"].startswith("minio/minio")
    assert "mc mb --ignore-existing local/importer" in " ".join(
        services["minio-bucket"]["entrypoint"]
    )
    assert services["migrate"]["command"] == ["db", "migrate"]
    for name in ("migrate", *IMPORTERS):
        assert services[name]["build"] == "."
    for name in IMPORTERS:
        assert services[name]["command"][0] == "serve"


def test_compose_two_instances_share_database_and_bucket(compose: dict[str, Any]) -> None:
    services = compose["services"]
    first, second = (services[name]["environment"] for name in IMPORTERS)
    for key in ("DATABASE_URL", "S3_ENDPOINT_URL", "IMPORTER_BUCKET", "JWT_SECRET"):
        assert first[key] == second[key], key
    assert "@postgres:5432/" in first["DATABASE_URL"]
    assert first["S3_ENDPOINT_URL"] == "http://minio:9000"
    ports = [services[name]["ports"] for name in IMPORTERS]
    assert ports == [["127.0.0.1:8001:8000"], ["127.0.0.1:8002:8000"]]
    assert [first["IMPORTER_PUBLIC_URL"], second["IMPORTER_PUBLIC_URL"]] == [
        "http://127.0.0.1:8001",
        "http://127.0.0.1:8002",
    ]


def test_compose_variables_are_the_readmes(compose: dict[str, Any]) -> None:
    known = configuration_variables() | LATER_VARIABLES
    for name in ("migrate", *IMPORTERS):
        environment = compose["services"][name]["environment"]
        assert set(environment) <= known, set(environment) - known
        assert environment["JWT_SECRET"].startswith("${JWT_SECRET:?"), "must be set, no default"
        assert environment["IMPORTER_WORKERS"] == "2"


def test_compose_start_order_and_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("postgres", "rabbitmq", "redis", "minio", *IMPORTERS):
        assert services[name]["healthcheck"]["test"][0] in {"CMD", "CMD-SHELL"}, name
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in IMPORTERS:
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}
        assert depends["minio-bucket"] == {"condition": "service_completed_successfully"}
        assert depends["postgres"] == {"condition": "service_healthy"}
        assert "/readyz" in services[name]["healthcheck"]["test"][-1]
        grace = int(services[name]["stop_grace_period"].removesuffix("s"))
        assert grace > 30, "beyond the server's 30 s graceful drain"
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} → {dependency}"
