"""tools/system_packages.py: the tools' apt-get installs take turns, so that two at once (CI grades
beside the book build, on two workers) never fail on apt's package-list lock, and each call waits
for dpkg's own lock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import system_packages  # noqa: E402


def test_two_installs_at_once_take_turns(monkeypatch, tmp_path):
    monkeypatch.setattr(system_packages, "APT_TURN", str(tmp_path / "turn.lock"))
    running: list[int] = []
    overlaps: list[tuple[int, ...]] = []
    calls: list[list[str]] = []
    guard = threading.Lock()

    def fake_run(step, **_):
        with guard:
            running.append(1)
            calls.append(step)
            if len(running) > 1:
                overlaps.append(tuple(running))
        time.sleep(0.05)
        with guard:
            running.pop()
        return subprocess.CompletedProcess(step, 0)

    monkeypatch.setattr(system_packages.subprocess, "run", fake_run)
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda: results.append(system_packages.apt_install(["pkg"])))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True, True, True]
    assert overlaps == []
    assert len(calls) == 6
    assert all(f"DPkg::Lock::Timeout={system_packages.LOCK_WAIT}" in step for step in calls)


def test_a_failed_update_is_reported_and_stops_the_install(monkeypatch, tmp_path):
    monkeypatch.setattr(system_packages, "APT_TURN", str(tmp_path / "turn.lock"))
    calls: list[list[str]] = []

    def failing_update(step, **_):
        calls.append(step)
        return subprocess.CompletedProcess(step, 100 if "update" in step else 0)

    monkeypatch.setattr(system_packages.subprocess, "run", failing_update)
    assert system_packages.apt_install(["pkg"]) is False
    assert len(calls) == 1
