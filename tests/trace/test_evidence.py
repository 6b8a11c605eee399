"""Evidence is ``artifactkit.diagnose/1`` exactly, and carries no absolute path, user or host name."""

from __future__ import annotations

import json
import os
import platform
import pwd
from pathlib import Path

import attrs
import pytest

from artifactkit.metadata.mismatch import Mismatch
from artifactkit.trace.engine import DiagnoseConfig, DiagnoseResult, Finding, run_diagnose
from artifactkit.trace.evidence import (
    CMDLINE_CHARS,
    SCHEMA,
    TOP_LEVEL_KEYS,
    aggregate_mismatches,
    check_schema,
    cmdline,
    sanitize,
    to_evidence,
    violations,
    write_evidence,
)
from artifactkit.trace.tracer import PidAccesses


@pytest.fixture(scope="module")
def small_result(tmp_path_factory: pytest.TempPathFactory) -> DiagnoseResult:
    """One real cycle on /dev/shm (tmpfs) or the temp dir, whichever isolates here."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path_factory.mktemp("evidence")
    return run_diagnose(DiagnoseConfig(cycles=1, readers=1, base=str(base)))


def test_top_level_keys_are_exactly_the_designed_ones(small_result: DiagnoseResult) -> None:
    doc = to_evidence(small_result)
    assert set(doc) == set(TOP_LEVEL_KEYS)
    assert doc["schema"] == SCHEMA == "artifactkit.diagnose/1"
    check_schema(doc)
    assert {"kernel", "fs_type", "mount_options", "python", "isolation"} <= set(doc["environment"])
    assert {"mode", "verified_how"} <= set(doc["environment"]["isolation"])
    assert {"self", "readers", "unexplained", "attributed"} <= set(doc["accesses"])
    json.dumps(doc)  # plain JSON values only


def test_check_schema_refuses_extra_or_missing_keys(small_result: DiagnoseResult) -> None:
    doc = to_evidence(small_result)
    with pytest.raises(ValueError, match=r"not an artifactkit\.diagnose/1"):
        check_schema({**doc, "extra": 1})
    with pytest.raises(ValueError, match=r"not an artifactkit\.diagnose/1"):
        check_schema({k: v for k, v in doc.items() if k != "inotify"})


def test_a_real_run_leaves_nothing_identifying_in_its_evidence(small_result: DiagnoseResult) -> None:
    doc = to_evidence(small_result)
    assert violations(doc) == []
    text = json.dumps(doc)
    assert str(small_result.config.base) not in text


def test_sanitize_replaces_paths_users_and_hosts_everywhere() -> None:
    user = pwd.getpwuid(os.getuid()).pw_name  # not $USER: CI's clean environment may not set it
    host = platform.node()
    dirty = {"msg": f"failed at /home/{user}/work/x.bin on {host}",
             "nested": [{"why": f"see /tmp/artifactkit-abc/tree (by {user})"}],
             "keep": "data/models/weights.bin relatime 0/1/2 resuid=65534"}
    clean = sanitize(dirty)
    assert violations(dirty)
    assert violations(clean) == []
    assert clean["keep"] == dirty["keep"]  # relative paths and options are not paths to hide
    assert user not in json.dumps(clean).replace("<user>", "")
    assert "<path>" in clean["msg"] or "<home>" in clean["msg"]


def test_a_path_inside_the_work_tree_keeps_its_tail_and_every_other_path_goes() -> None:
    doc = {"a": "cat '<work>/src/c0001/data/a.txt'", "b": "sh -c 'cat x >/srv/private/out'",
           "c": "find '<base>/other/dir' -type f"}
    clean = sanitize(doc)
    assert clean["a"] == doc["a"]  # our own corpus names, relative to the work tree
    assert clean["b"] == "sh -c 'cat x ><path>'"  # a redirect's target is a path like any other
    assert clean["c"] == "find '<base><path>' -type f"  # under the base, outside our tree: hidden
    assert violations(clean) == []


def test_a_long_command_line_is_cut() -> None:
    text = cmdline(["cat", *(f"<work>/src/file-{i}" for i in range(100))])
    assert len(text) == CMDLINE_CHARS and text.endswith("...")
    assert cmdline(["sh", "-c", "find <base> -type f"]) == "sh -c 'find <base> -type f'"


def test_outside_processes_carry_their_chain_and_command_line_and_groups_sum_them(
        small_result: DiagnoseResult) -> None:
    strangers = (PidAccesses(7, "cat", 2, ("bash", "sh", "find"), ("cat", "<work>/src/a"), "held"),
                 PidAccesses(8, "cat", 3, ("bash", "sh", "find"), ("cat", "<work>/src/b"), "held"))
    result = attrs.evolve(small_result, accesses=attrs.evolve(small_result.accesses, attributed=strangers))
    acc = to_evidence(result)["accesses"]
    assert acc["attributed"][0] == {"pid": 7, "executable": "cat", "chain": ["bash", "sh", "find"],
                                    "cmdline": "cat '<work>/src/a'", "named": "held", "complete": True, "events": 2}
    assert acc["groups"] == [{"chain": ["bash", "sh", "find"], "executable": "cat", "processes": 2, "events": 5}]
    assert set(acc) >= {"hold", "fanotify"}


def test_write_evidence_refuses_an_unsanitized_document(tmp_path: Path) -> None:
    target = tmp_path / "e.json"
    with pytest.raises(ValueError, match="unsanitized"):
        write_evidence({"where": "/etc/passwd"}, target)
    assert not target.exists()
    write_evidence({"where": "<path>"}, target)
    assert json.loads(target.read_text(encoding="utf-8")) == {"where": "<path>"}


def test_repeated_mismatches_aggregate_per_path_field_and_diagnosis(small_result: DiagnoseResult) -> None:
    moved = Mismatch("data/a", "atime_ns", 10, 30, "advanced-by-read", delta_ns=20, stage="download")
    findings = (Finding(1, "download", "destination", moved),
                Finding(3, "download", "destination", attrs.evolve(moved, actual=50, delta_ns=40)),
                Finding(3, "publish", "source", attrs.evolve(moved, stage="publish")))
    result = attrs.evolve(small_result, findings=findings, failed_checks=2)
    out = aggregate_mismatches(result)
    assert [(m["stage"], m["tree"], m["cycles"], m["first_cycle"]) for m in out] == [
        ("download", "destination", 2, 1), ("publish", "source", 1, 3)]
    assert out[0]["delta_ns"] == 20
    doc = to_evidence(result)
    assert doc["environment"]["run"]["source_atime_moved"] is True
