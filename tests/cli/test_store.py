"""The store subcommands, from the outside: exit codes and output a person or a script reads."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.conformance.corpus import materialize
from artifactkit.store.store import Store
from tests.support.hostile_store import forge_manifest, manifest_doc


def test_publish_ls_download_verify_round_trip(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    materialize("basic", fast_tmp / "src")
    store = str(fast_tmp / "store")
    assert main(["publish", str(fast_tmp / "src"), "--store", store, "--name", "demo", "--json"]) == 0
    published = json.loads(capsys.readouterr().out)
    assert published["version"] == 1 and len(published["digest"]) == 64
    assert main(["ls", "--store", store]) == 0
    assert "demo" in capsys.readouterr().out
    assert main(["download", "demo@1", str(fast_tmp / "out"), "--store", store]) == 0
    assert "verified exact" in capsys.readouterr().out
    assert main(["verify", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["clean"] is True


def test_the_workers_option_is_taken_by_publish_and_download_and_zero_is_refused(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    materialize("basic", fast_tmp / "src")
    store = str(fast_tmp / "store")
    assert main(["publish", str(fast_tmp / "src"), "--store", store, "--name", "demo", "--workers", "2"]) == 0
    assert main(["download", "demo", str(fast_tmp / "out"), "--store", store, "--workers", "2"]) == 0
    assert "verified exact" in capsys.readouterr().out
    assert main(["publish", str(fast_tmp / "src"), "--store", store, "--name", "demo", "--workers", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err


def test_exit_codes_separate_usage_errors_from_failed_checks(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    materialize("basic", fast_tmp / "src")
    store = str(fast_tmp / "store")
    main(["publish", str(fast_tmp / "src"), "--store", store, "--name", "demo"])
    assert main(["download", "demo", str(fast_tmp / "src"), "--store", store]) == 2  # dest exists
    assert main(["download", "nope", str(fast_tmp / "x"), "--store", store]) == 2
    assert main(["publish", str(fast_tmp / "src"), "--store", store, "--name", "../evil"]) == 2
    assert main(["bogus"]) == 2
    blob = next(Path(store, "blobs").iterdir())
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes() + b"!")
    assert main(["verify", "--store", store]) == 1
    assert "NOT OK" in capsys.readouterr().out
    assert main(["download", "demo", str(fast_tmp / "y"), "--store", store]) == 1
    assert "corrupt" in capsys.readouterr().err


def test_the_workers_help_says_it_sets_the_native_threads_and_the_reference_ignores_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("publish", "download"):
        assert main([command, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "threads of the native core" in text, text
        assert "The reference engine (ARTIFACTKIT_ENGINE=python, or where the core is not built) accepts N and " \
               "ignores it" in text, text


def test_download_owners_current_json_lists_every_reowned_entry(fast_tmp: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A format-1 manifest (no owners) with a setuid file: its bit is cleared, and --json says so as data."""
    (fast_tmp / "src").mkdir()
    (fast_tmp / "src" / "tool").write_bytes(b"#!/bin/sh\n")
    (fast_tmp / "src" / "tool").chmod(0o4755)
    store = Store(fast_tmp / "store")
    ref = store.publish(fast_tmp / "src", "demo")
    doc = manifest_doc(store, ref)
    doc["format"] = "artifactkit.manifest/1"
    for entry in doc["entries"]:
        for key in ("uid", "gid", "xattrs", "flags"):
            entry.pop(key, None)
    forge_manifest(store, ref.name, ref.version, json.dumps(doc).encode())
    argv = ["download", "demo", str(fast_tmp / "out"), "--store", str(fast_tmp / "store"), "--owners", "current"]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reowned_entries"] == ["tool (setuid with no recorded owner cleared)"]
    assert (fast_tmp / "out" / "tool").stat().st_mode & 0o7777 == 0o755


@pytest.mark.parametrize("failing", [False, True])
def test_a_store_command_runs_with_the_cyclic_gc_off_and_gives_it_back(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, failing: bool) -> None:
    materialize("basic", fast_tmp / "src")
    seen: list[bool] = []
    real_publish = Store.publish

    def watched(self: Store, *args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        if failing:
            raise OSError(28, "No space left on device")
        return real_publish(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "publish", watched)
    assert gc.isenabled()
    code = main(["publish", str(fast_tmp / "src"), "--store", str(fast_tmp / "store"), "--name", "demo"])
    assert code == (2 if failing else 0), capsys.readouterr()
    assert seen == [False]  # off while the operation ran
    assert gc.isenabled()  # and on again after it, a failure too
