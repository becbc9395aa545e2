"""Failpoints: the spec's parser, the hit counting, the actions, and the disarmed default."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from importer.core import failpoints
from importer.core.errors import ConfigurationError, TransientStoreError
from importer.core.failpoints import Action, Failpoint, Failpoints, InjectedFailureError
from importer.settings import Settings


def test_an_empty_spec_arms_nothing() -> None:
    assert failpoints.parse("") == {}
    assert failpoints.parse(" , ") == {}
    assert Settings.from_environ({}).failpoints == ""


def test_every_action_and_count_parses() -> None:
    points = failpoints.parse(
        "after_commit=crash@3, before_finalize=sleep:250,after_claim=error,"
        "after_copy_before_commit=error@2,after_finalize_before_return=crash"
    )
    assert points == {
        "after_commit": Failpoint("after_commit", Action.CRASH, fire_on=3),
        "before_finalize": Failpoint("before_finalize", Action.SLEEP, sleep_s=0.25),
        "after_claim": Failpoint("after_claim", Action.ERROR),
        "after_copy_before_commit": Failpoint("after_copy_before_commit", Action.ERROR, fire_on=2),
        "after_finalize_before_return": Failpoint("after_finalize_before_return", Action.CRASH),
    }


@pytest.mark.parametrize(
    "spec",
    [
        "after_commit",
        "after_commit=",
        "=crash",
        "no_such_point=crash",
        "after_commit=explode",
        "after_commit=crash:5",
        "after_commit=sleep",
        "after_commit=sleep:",
        "after_commit=sleep:-1",
        "after_commit=sleep:1.5",
        "after_commit=crash@0",
        "after_commit=crash@",
        "after_commit=crash@x",
        "after_commit=crash@²",
        "after_commit=crash,after_commit=error",
    ],
)
def test_a_bad_spec_names_the_variable(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="IMPORTER_FAILPOINTS"):
        failpoints.parse(spec)
    with pytest.raises(ConfigurationError, match="IMPORTER_FAILPOINTS"):
        Settings.from_environ({"IMPORTER_FAILPOINTS": spec})


def test_settings_keep_a_good_spec() -> None:
    spec = "after_commit=crash@3"
    assert Settings.from_environ({"IMPORTER_FAILPOINTS": spec}).failpoints == spec


async def test_a_count_fires_on_that_hit_only() -> None:
    points = Failpoints(failpoints.parse("after_commit=error@3"))
    await points.reach("after_commit")
    await points.reach("after_commit")
    with pytest.raises(InjectedFailureError):
        await points.reach("after_commit")
    await points.reach("after_commit")  # the 4th passes again
    assert points.hits("after_commit") == 4


async def test_without_a_count_every_hit_fires_and_other_points_pass() -> None:
    points = Failpoints(failpoints.parse("after_claim=error"))
    for _ in range(3):
        with pytest.raises(TransientStoreError):  # a dropped connection's recovery path
            await points.reach("after_claim")
    await points.reach("after_commit")
    assert (points.hits("after_claim"), points.hits("after_commit")) == (3, 0)


async def test_sleep_pauses_the_task() -> None:
    points = Failpoints(failpoints.parse("before_finalize=sleep:50"))
    started = time.monotonic()
    await points.reach("before_finalize")
    assert time.monotonic() - started >= 0.045


def test_configure_arms_and_disarms() -> None:
    try:
        failpoints.configure("after_commit=crash@9")
        assert failpoints.armed is not None
        failpoints.configure("")
        assert failpoints.armed is None
    finally:
        failpoints.armed = None


def test_crash_exits_at_once_with_137_skipping_finally() -> None:
    program = (
        "import asyncio\n"
        "from importer.core import failpoints\n"
        "failpoints.configure('after_commit=crash@2')\n"
        "async def main():\n"
        "    try:\n"
        "        for _ in range(3):\n"
        "            await failpoints.armed.reach('after_commit')\n"
        "            print('passed', flush=True)\n"
        "    finally:\n"
        "        print('finally ran', flush=True)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        timeout=30,
        check=False,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == failpoints.CRASH_EXIT_CODE == 137
    assert done.stdout == b"passed\n"
    assert b"failpoint after_commit: crash" in done.stderr


def test_a_chunk_point_names_one_chunk() -> None:
    points = failpoints.parse("chunk:7=error,chunk:12=sleep:5@2")
    assert set(points) == {"chunk:7", "chunk:12"}
    assert failpoints.chunk_point(7) == "chunk:7"
    for bad in ("chunk:=error", "chunk:x=error", "chunk:-1=error", "chunks:1=error"):
        with pytest.raises(ConfigurationError):
            failpoints.parse(bad)
