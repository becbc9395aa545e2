"""The committed lock: it matches pyproject.toml, and a stale one fails `scripts/check` before
anything else runs (uv's offline check: no network, no re-resolve)."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).parents[2]
UV = ROOT / ".tools" / "bin" / "uv"


def check(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tree / "scripts" / "check")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "UV": str(UV), "HOME": str(tree)},
    )


def copy_of_the_project(tmp_path: Path) -> Path:
    tree = tmp_path / "project"
    (tree / "scripts").mkdir(parents=True)
    for name in ("pyproject.toml", "uv.lock", "setup.py", "README.md", "scripts/check"):
        shutil.copy2(ROOT / name, tree / name)
    return tree


def test_the_committed_lock_matches_pyproject() -> None:
    done = subprocess.run(
        [str(UV), "lock", "--check", "--offline"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('"asyncpg>=0.30"', '"asyncpg>=0.30", "six>=1.16"'),  # a new dependency
        ('"orjson>=3.10"', '"orjson>=99"'),  # a bound the locked version no longer meets
    ],
)
def test_a_stale_lock_fails_the_checks_first(tmp_path: Path, old: str, new: str) -> None:
    tree = copy_of_the_project(tmp_path)
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    assert old in text
    pyproject.write_text(text.replace(old, new, 1))
    done = check(tree)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "uv.lock is stale against pyproject.toml: run scripts/lock" in done.stderr
    assert "ruff" not in done.stdout + done.stderr  # nothing else ran


def test_every_locked_package_has_hashes() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    for package in lock["package"]:
        if package["source"].get("registry"):
            files = [
                *package.get("wheels", ()),
                *([package["sdist"]] if "sdist" in package else ()),
            ]
            assert files, package["name"]
            assert all(f["hash"].startswith("sha256:") for f in files), package["name"]
