"""``ls`` on a bucket with manifests it cannot read: one human line each, and structured under ``--json``.

The versions are left out with an ``UnreadableManifestWarning`` (the library's way to say so); the CLI used
to let Python print it — ``/usr/lib/python3.11/concurrent/futures/thread.py:58: UnreadableManifestWarning:
...`` and then the source line ``result = self.fn(*self.args, **self.kwargs)`` — on stderr.
"""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.cli.main import main
from artifactkit.errors import UnreadableManifestWarning
from tests.support.hostile_store import forge_manifest


@pytest.fixture
def two_unreadable(s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A bucket store with ``demo@1`` readable, ``demo@2`` corrupt (its pin) and ``demo@3`` over the limit."""
    src = fast_tmp / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    store = Store(s3_url)
    body = store.manifest(store.publish(src, "demo")).to_bytes()
    forge_manifest(store, "demo", 2, body, digest="0" * 64)
    forge_manifest(store, "demo", 3, body + b" " * 2000)
    monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", str(len(body) + 1000))
    return s3_url


def _ls(url: str, *options: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none may escape to Python's own printing
        return main(["ls", "--store", url, *options])


def test_ls_says_in_one_line_each_which_versions_it_left_out_and_why(
        two_unreadable: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _ls(two_unreadable) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[2].startswith("demo  1 ")  # the table first
    notes = [line for line in lines if line.startswith("note: ")]
    assert len(notes) == 2 and len(lines) == 3 + 1 + 2, out  # header, rule, one row, a blank line, two notes
    assert notes[0].startswith(f"note: left out demo@2: its manifest {two_unreadable}/manifests/demo/2.json cannot "
                               "be read: manifest of demo@2 is corrupt: its bytes hash to "), notes
    assert notes[1].startswith("note: left out demo@3: ") and "set ARTIFACTKIT_MAX_MANIFEST_BYTES" in notes[1]


def test_ls_json_lists_the_versions_it_left_out_as_data(two_unreadable: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _ls(two_unreadable, "--json") == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == "" and [v["version"] for v in doc["versions"]] == [1]
    left = doc["unreadable"]
    assert [(item["name"], item["version"], item["path"]) for item in left] == [
        ("demo", 2, f"{two_unreadable}/manifests/demo/2.json"), ("demo", 3, f"{two_unreadable}/manifests/demo/3.json")]
    assert left[0]["reason"].startswith("manifest of demo@2 is corrupt: ") and left[0]["kind"] == "IntegrityError"
    assert "ARTIFACTKIT_MAX_MANIFEST_BYTES" in left[1]["reason"] and left[1]["kind"] == "ManifestLimitError"


def test_the_warning_carries_its_facts_as_data_and_pickles_with_them(two_unreadable: str) -> None:
    with pytest.warns(UnreadableManifestWarning) as caught:
        Store(two_unreadable).list()
    first = min((w.message for w in caught), key=lambda message: getattr(message, "version", 0))
    again = pickle.loads(pickle.dumps(first))
    assert isinstance(again, UnreadableManifestWarning) and str(again) == str(first)
    assert (again.name, again.version, again.kind) == ("demo", 2, "IntegrityError")
    assert again.path == f"{two_unreadable}/manifests/demo/2.json" and again.reason in str(again)
