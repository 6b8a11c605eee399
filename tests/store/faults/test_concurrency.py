"""Concurrency: eight ``spawn`` processes share one store; nothing is lost, duplicated or corrupted.

Publishers of one shared name and of their own names, downloaders (two of one fixed version, to
distinct destinations), a verifier and a gc loop run for a few seconds here and for 20 s in the
campaign (``diagnostics/fault_campaign.py``).
"""

from __future__ import annotations

from pathlib import Path

from tests.support import fault_workers


def test_eight_processes_publish_download_verify_and_gc_without_losing_or_corrupting_a_version(
        fast_tmp: Path) -> None:
    (fast_tmp / "work").mkdir()
    summary = fault_workers.run_concurrency(str(fast_tmp / "store"), str(fast_tmp / "work"), duration_s=3)
    totals = summary["totals"]
    assert totals["publish"] >= 6 and totals["download"] >= 6 and totals["verify"] >= 2 and totals["gc"] >= 2, totals
    assert summary["same_version_downloads"] >= 2
    problems = {key: summary[key] for key in ("errors", "lost", "duplicated", "unexplained", "corrupt",
                                              "gc_removed_needed")}
    assert problems == {key: [] for key in problems}
    assert summary["final_verify_ok"]


def test_the_summary_reports_a_lost_a_duplicated_and_a_corrupt_version(fast_tmp: Path) -> None:
    # The checks' own control: forged worker reports that no correct store run could produce.
    from artifactkit import Store
    from artifactkit.conformance.corpus import materialize

    store = Store(fast_tmp / "store")
    supplied = materialize("basic", fast_tmp / "src")
    ref = store.publish(fast_tmp / "src", "shared")
    good = [ref.name, ref.version, ref.digest, fault_workers.fingerprint(supplied)]
    results = [
        {"role": "publish:shared", "index": 0, "ops": 2, "errors": [], "gc_removed": [], "planted": [],
         "published": [good, ["shared", 2, "0" * 64, "x"]], "downloaded": [[*good[:3], "y"]]},
        {"role": "publish:shared", "index": 1, "ops": 1, "errors": [], "gc_removed": [ref.digest], "planted": [],
         "published": [good], "downloaded": []},
    ]
    summary = fault_workers.summarize(store, results, hung=[], expected_workers=2, work=str(fast_tmp))
    assert summary["lost"] == ["shared@2"]
    assert summary["duplicated"] == ["shared@1"]
    assert summary["corrupt"] == ["download of shared@1 by worker 0 differs"]
    assert summary["gc_removed_needed"] == [ref.digest]
