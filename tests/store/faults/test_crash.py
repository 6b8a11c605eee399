"""Crash consistency: SIGKILL a publish, download or gc at every rename/fsync point, and at random times.

The long version (every counted call, hundreds of random times) is ``diagnostics/fault_campaign.py``;
here every ordering point of each operation is hit once so a regression fails CI within seconds.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from artifactkit import Store
from tests.support import crash as harness
from tests.support.mounts import Mounts


@pytest.fixture(scope="module")
def materials(mounts: Mounts, engine: str) -> harness.Materials:
    # noatime: publishing reads the sources' symlinks, which would otherwise move their atimes. A mount per
    # engine (conftest.py): every recording and trial below is then that engine's, in a place of its own.
    return harness.prepare(mounts.tmpfs("noatime", size="512m") / "materials")


@pytest.fixture(scope="module")
def recorded(materials: harness.Materials) -> dict[str, tuple[list[str], int]]:
    return {scenario: harness.record_points(materials, scenario, materials.base.parent / f"record-{scenario}")
            for scenario in harness.SCENARIOS}


def test_the_harness_sees_every_flush_and_rename_that_makes_a_publish_or_download_visible(
        recorded: dict[str, tuple[list[str], int]]) -> None:
    publish, download, gc = (recorded[s][0] for s in harness.SCENARIOS)
    assert publish.count("syncfs store/staging/publish-<txn>") == 2
    assert "fsync store/blobs" in publish and "fsync store/manifests/demo" in publish
    assert "rename store/staging/publish-<txn>/manifest.json -> store/manifests/demo/2.<sha>.json" in publish
    assert "rename store/staging/publish-<txn>/manifest.json -> store/manifests/fresh/1.<sha>.json" in publish
    assert any(label.startswith("rename store/staging/publish-<txn>/blob-") for label in publish)
    # The verified tree leaves its private dir through that dir's fd (a swapped name cannot be what lands
    # at dest); only the removal of the then empty private dir follows, its marker (what proves it ours to a
    # later sweep) last before the rmdir.
    assert download[-3:] == ["rename out/.dest.artifactkit-<tmp>/tree -> out/dest",
                             "unlink out/.dest.artifactkit-<tmp>/.artifactkit-made-here",
                             "rmdir out/.dest.artifactkit-<tmp>"]
    assert gc[-1] == "fsync store/blobs" and gc.count("rmdir store/staging/publish-<txn>") == 3


@pytest.mark.parametrize("scenario", harness.SCENARIOS)
def test_a_kill_at_every_rename_and_fsync_point_leaves_every_listed_version_exact(
        materials: harness.Materials, recorded: dict[str, tuple[list[str], int]], scenario: str) -> None:
    labels, _ = recorded[scenario]
    # Point 0 is also "before" the first call when that call is itself a flush or rename.
    points = sorted({0: "before anything", **dict(harness.ordering_points(labels))}.items())
    assert len(points) >= 3
    work = materials.base.parent / f"points-{scenario}"
    work.mkdir()
    trials = [harness.trial(materials, scenario, work / str(point), point=point, label=label)
              for point, label in points]
    assert [t.label for t in trials if not t.killed] == [], "every aimed kill must land"
    assert {t.label: t.problems for t in trials if t.problems} == {}


def test_kills_at_random_times_leave_every_listed_version_exact(
        materials: harness.Materials, recorded: dict[str, tuple[list[str], int]]) -> None:
    rng = random.Random(8)
    work = materials.base.parent / "random"
    work.mkdir()
    trials = []
    for index in range(12):
        scenario = harness.SCENARIOS[index % 3]
        took_s = recorded[scenario][1] / 1e9
        trials.append(harness.trial(materials, scenario, work / str(index), delay_s=rng.uniform(0, took_s)))
    assert {(t.scenario, index): t.problems for index, t in enumerate(trials) if t.problems} == {}


def test_the_checker_reports_a_visible_version_whose_blob_never_arrived(materials: harness.Materials) -> None:
    # The guard's own control: a manifest renamed into place before its blobs is exactly the
    # half-visible state a wrong order produces, and the checks must say so.
    work = materials.base.parent / "control"
    work.mkdir()
    harness.run_child(materials, "publish", work)
    store = Store(work / "store")
    demo2 = next(e for e in store.manifest("demo@2").entries if e.path == "data/big.bin")
    assert demo2.sha256 is not None
    os.unlink(Path(store.layout.blobs_dir, demo2.sha256))
    problems, _ = harness.check_trial(materials, "publish", work)
    assert any("verify not ok" in p for p in problems)
    assert any("demo@2 does not download exactly" in p for p in problems)


def test_the_checker_reports_an_incomplete_download_destination(materials: harness.Materials) -> None:
    work = materials.base.parent / "control-dest"
    work.mkdir()
    harness.run_child(materials, "download", work)
    os.unlink(work / "out" / "dest" / "README.txt")
    problems, _ = harness.check_trial(materials, "download", work)
    assert any("visible but incomplete" in p for p in problems)
