"""``--json`` on every command prints exactly one document in every outcome: success, failed check, error.

Each test parses the whole of stdout as one JSON document (a second document, or none, fails ``json.loads``)
and checks its schema, the exit code it states against the process's, and the fields a script reads.
"""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from artifactkit.cli.common import EXIT_FAILED, EXIT_OK, EXIT_SETUP, emit_json, exit_code_of
from artifactkit.cli.main import main
from artifactkit.cli.result import failure
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import (
    IntegrityError,
    MetadataMismatchError,
    NotRestorableError,
    TimestampNotRepresentable,
    UnsafeStoreError,
)
from artifactkit.store.store import Store
from tests.support.hostile_store import forge_manifest, manifest_doc
from tests.support.stores import content_blob_names

#: ``FS_IMMUTABLE_FL`` (linux/fs.h): a download never sets it, so a manifest recording it is refused.
FS_IMMUTABLE_FL = 0x10


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, Any], str]:
    """Run ``argv --json``; (exit code, the one document on stdout, stderr)."""
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def _error(capsys: pytest.CaptureFixture[str], argv: list[str], expected_type: str,
           expected_code: int = EXIT_SETUP) -> dict[str, Any]:
    """Run ``argv --json``, expecting an ``artifactkit.error/1`` of ``expected_type``; its fields."""
    code, doc, err = _json(capsys, argv)
    assert (code, doc["schema"], doc["type"], doc["exit_code"]) == (
        expected_code, "artifactkit.error/1", expected_type, expected_code), doc
    assert doc["message"] and err.startswith("artifactkit: error: "), err
    fields: dict[str, Any] = doc["fields"]
    return fields


@pytest.fixture
def site(fast_tmp: Path) -> Path:
    """``demo@1`` published from the basic tree into ``site/store``."""
    materialize("basic", fast_tmp / "src")
    Store(fast_tmp / "store").publish(fast_tmp / "src", "demo")
    return fast_tmp


def test_every_store_command_prints_its_schema_on_success(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(site / "store")
    code, doc, _ = _json(capsys, ["publish", str(site / "src"), "--store", store, "--name", "demo"])
    assert (code, doc["schema"], doc["name"], doc["version"]) == (EXIT_OK, "artifactkit.publish/1", "demo", 2)
    code, doc, _ = _json(capsys, ["download", "demo@1", str(site / "out"), "--store", store])
    assert (code, doc["schema"], doc["version"], doc["dest_verified"]) == (EXIT_OK, "artifactkit.download/1", 1, True)
    assert doc["reowned"] == [] and doc["reowned_entries"] == []
    code, doc, _ = _json(capsys, ["verify", "--store", store])
    assert (code, doc["schema"], doc["clean"], doc["versions"]) == (EXIT_OK, "artifactkit.verify/1", True, 2)
    code, doc, _ = _json(capsys, ["gc", "--store", store, "--dry-run"])
    assert (code, doc["schema"], doc["dry_run"], doc["freed_bytes"]) == (EXIT_OK, "artifactkit.gc/1", True, 0)
    code, doc, _ = _json(capsys, ["ls", "--store", store])
    assert (code, doc["schema"]) == (EXIT_OK, "artifactkit.ls/1")
    assert [(v["name"], v["version"]) for v in doc["versions"]] == [("demo", 1), ("demo", 2)]


def test_probe_diagnose_and_conformance_print_their_schema_on_success(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = _json(capsys, ["probe", str(fast_tmp)])
    assert (code, doc["schema"], doc["fs_type"]) == (EXIT_OK, "artifactkit.probe/1", "tmpfs")
    code, doc, _ = _json(capsys, ["diagnose", "--cycles", "1", "--readers", "1", "--base", str(fast_tmp)])
    assert (code, doc["schema"], doc["cycles"], doc["mismatches"]) == (EXIT_OK, "artifactkit.diagnose/1", 1, [])
    code, doc, _ = _json(capsys, ["conformance", "--copier", "artifactkit", "--corpus", "basic",
                                  "--base", str(fast_tmp)])
    assert (code, doc["schema"]) == (EXIT_OK, "artifactkit.conformance/1")


def test_a_failed_check_is_exit_1_with_the_commands_document_or_an_integrity_error(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = site / "store"
    # A content blob, not a tree object: a corrupt tree object is a corrupt manifest, the other outcome.
    blob = store / "blobs" / content_blob_names(Store(store))[0]
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes() + b"!")
    code, doc, _ = _json(capsys, ["verify", "--store", str(store)])
    assert (code, doc["schema"], doc["clean"], doc["ok"]) == (EXIT_FAILED, "artifactkit.verify/1", False, False)
    assert [item.split(":")[0] for item in doc["corrupt"]] == [f"blob {blob.name}"], doc["corrupt"]
    fields = _error(capsys, ["download", "demo", str(site / "out"), "--store", str(store)], "IntegrityError",
                    EXIT_FAILED)
    assert blob.name in json.dumps(fields), fields
    assert not (site / "out").exists()


def test_gc_that_cannot_read_a_manifest_is_exit_1_with_the_error_as_a_document(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = next((site / "store" / "manifests" / "demo").iterdir())
    manifest.unlink()
    manifest.write_bytes(b"{")
    _error(capsys, ["gc", "--store", str(site / "store")], "IntegrityError", EXIT_FAILED)


def test_diagnose_with_mismatches_is_exit_1_with_its_evidence(fast_tmp: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # shutil.copy2 sets atimes through floats, with no isolation: the drift diagnose exists to show.
    code, doc, _ = _json(capsys, ["diagnose", "--cycles", "1", "--readers", "1", "--isolation", "none",
                                  "--copier", "shutil", "--base", str(fast_tmp)])
    assert (code, doc["schema"]) == (EXIT_FAILED, "artifactkit.diagnose/1") and doc["mismatches"], doc


@pytest.mark.parametrize("command", ["verify", "gc", "ls"])
def test_a_path_that_is_no_store_is_an_error_document_naming_it(
        command: str, fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _error(capsys, [command, "--store", str(fast_tmp / "typo")], "NotAStoreError")
    assert not (fast_tmp / "typo").exists()


def test_publish_into_a_folder_that_is_no_store_is_an_error_document(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (site / "mine").mkdir()
    (site / "mine" / "notes.txt").write_text("the user's own file")
    _error(capsys, ["publish", str(site / "src"), "--store", str(site / "mine"), "--name", "demo"], "NotAStoreError")
    assert os.listdir(site / "mine") == ["notes.txt"]


def test_an_oserror_carries_its_errno_and_path_as_fields(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fields = _error(capsys, ["download", "demo", str(site / "src"), "--store", str(site / "store")],
                    "FileExistsError")
    assert fields["errno"] == 17 and fields["filename"] == str(site / "src"), fields
    fields = _error(capsys, ["probe", str(site / "nowhere")], "FileNotFoundError")
    assert fields["filename"].startswith(str(site / "nowhere")), fields  # its scratch file in DIR


def test_a_download_refusal_lists_every_refused_entry_in_its_fields(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(site / "store")
    ref = store.list()[-1]
    doc = manifest_doc(store, ref)
    files = [entry for entry in doc["entries"] if entry["kind"] == "file"]
    for entry in files:
        entry["flags"] = (entry.get("flags") or 0) | FS_IMMUTABLE_FL
    forge_manifest(store, ref.name, ref.version, json.dumps(doc).encode())
    fields = _error(capsys, ["download", "demo", str(site / "out"), "--store", str(site / "store")],
                    "NotRestorableError")
    assert isinstance(fields["entries"], list) and len(fields["entries"]) == len(files) > 1, fields
    assert sorted(entry.partition(":")[0] for entry in fields["entries"]) == sorted(e["path"] for e in files)


def test_publish_links_contained_lists_every_refused_link(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fast_tmp / "src").mkdir()
    for name in ("up", "abs"):
        (fast_tmp / "src" / name).symlink_to("../elsewhere" if name == "up" else "/etc/hostname")
    fields = _error(capsys, ["publish", str(fast_tmp / "src"), "--store", str(fast_tmp / "store"),
                             "--name", "demo", "--links", "contained"], "UnsafePathError")
    assert sorted(fields["links"]) == ["abs", "up"], fields


@pytest.mark.parametrize(("argv", "expected_type"), [
    (["diagnose", "--cycles", "0"], "ValueError"),                      # a value diagnose refuses
    (["conformance", "--copier", "cp -a"], "CopierError"),              # a template without {src} {dst}
    (["conformance", "--copier", "artifactkit", "--corpus", "no-such-tree"], "ValueError"),
    (["publish", "--store", "{tmp}/store", "--name", "demo"], "UsageError"),  # SRC missing: argparse's own
    (["download", "demo", "{tmp}/out", "--store", "{tmp}/store", "--owners", "all"], "UsageError"),
    (["ls", "--store", "{tmp}/store", "--workers", "2"], "UsageError"),  # an option ls does not have
], ids=["diagnose-value", "conformance-copier", "conformance-corpus", "missing-argument", "bad-choice",
        "unknown-option"])
def test_a_usage_error_is_an_error_document_and_exit_2(
        argv: list[str], expected_type: str, fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = _json(capsys, [arg.replace("{tmp}", str(fast_tmp)) for arg in argv])
    assert (code, doc["schema"], doc["type"], doc["exit_code"]) == (
        EXIT_SETUP, "artifactkit.error/1", expected_type, EXIT_SETUP), doc
    assert doc["message"] in err, "the person reads what the script reads"


def test_diagnose_that_cannot_write_its_evidence_is_an_error_document(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fields = _error(capsys, ["diagnose", "--cycles", "1", "--readers", "1", "--base", str(fast_tmp),
                             "--output", str(fast_tmp / "no-such-dir" / "evidence.json")], "FileNotFoundError")
    assert fields["errno"] == 2, fields


def test_a_conformance_run_where_every_tree_was_refused_keeps_its_report_beside_the_error(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/conformance.md: the report as far as it got, with the ``artifactkit.error/1`` object as ``error``."""
    code, doc, _ = _json(capsys, ["conformance", "--copier", "no-such-tool-xyz {src} {dst}", "--corpus", "basic",
                                  "--base", str(fast_tmp)])
    assert (code, doc["schema"]) == (EXIT_SETUP, "artifactkit.conformance/1")
    assert (doc["error"]["schema"], doc["error"]["exit_code"]) == ("artifactkit.error/1", EXIT_SETUP)
    assert doc["error"]["type"] == "CopierCannotRunError"


#: Where each command hands over to the library: an interrupt there is an interrupt inside the command.
LIBRARY_CALLS: dict[str, tuple[type | str, str]] = {
    "publish": (Store, "publish"), "download": (Store, "download"), "verify": (Store, "verify"),
    "gc": (Store, "gc"), "ls": (Store, "list"), "probe": ("artifactkit.cli.probe", "probe_atime"),
    "diagnose": ("artifactkit.cli.diagnose", "run_diagnose"), "conformance": ("artifactkit.cli.conformance", "check"),
}


def _argv_of(command: str, site: Path) -> list[str]:
    store = ["--store", str(site / "store")]
    return {"publish": ["publish", str(site / "src"), *store, "--name", "demo"],
            "download": ["download", "demo", str(site / "out"), *store], "verify": ["verify", *store],
            "gc": ["gc", *store], "ls": ["ls", *store], "probe": ["probe", str(site)],
            "diagnose": ["diagnose", "--cycles", "1", "--base", str(site)],
            "conformance": ["conformance", "--copier", "artifactkit", "--corpus", "basic", "--base", str(site)],
            }[command]


@pytest.mark.parametrize("command", sorted(LIBRARY_CALLS))
def test_ctrl_c_inside_any_command_under_json_is_exit_130_and_one_error_document(
        command: str, site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt
    owner, name = LIBRARY_CALLS[command]
    if isinstance(owner, str):  # a name the command's module imported
        monkeypatch.setattr(f"{owner}.{name}", interrupted)
    else:
        monkeypatch.setattr(owner, name, interrupted)
    code, doc, err = _json(capsys, _argv_of(command, site))
    assert (code, err) == (130, "artifactkit: error: interrupted\n")
    assert (doc["schema"], doc["type"], doc["exit_code"], doc["fields"]) == (
        "artifactkit.error/1", "KeyboardInterrupt", 130, {})


def test_ctrl_c_after_the_commands_document_adds_no_second_one(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from artifactkit.cli import result

    written, interrupts = result.emit_json, [KeyboardInterrupt()]

    def then_interrupted(doc: dict[str, Any]) -> None:
        written(doc)
        if interrupts:  # once: as a SIGINT held off while the command's document was written is delivered
            raise interrupts.pop()
    monkeypatch.setattr(result, "emit_json", then_interrupted)
    code, doc, err = _json(capsys, ["ls", "--store", str(site / "store")])
    assert (code, doc["schema"], err) == (130, "artifactkit.ls/1", "artifactkit: error: interrupted\n")


def test_an_internal_error_under_json_is_an_error_document_naming_its_class(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(self: Store) -> None:
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(Store, "list", broken)
    code, doc, _ = _json(capsys, ["ls", "--store", str(site / "store")])
    assert (code, doc["type"], doc["exit_code"]) == (EXIT_SETUP, "ZeroDivisionError", EXIT_SETUP)
    assert doc["message"] == "internal error (ZeroDivisionError): a bug"


def test_download_owners_current_lists_the_reowned_entries_as_data(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``reowned`` is the list of entries ("path (what changed)"), never the warning's prose."""
    (fast_tmp / "src").mkdir()
    for name in ("tool", "helper"):
        (fast_tmp / "src" / name).write_bytes(b"#!/bin/sh\n")
        (fast_tmp / "src" / name).chmod(0o4755)
    store = Store(fast_tmp / "store")
    ref = store.publish(fast_tmp / "src", "demo")
    doc = manifest_doc(store, ref)
    for entry in doc["entries"]:
        entry.pop("uid", None)  # no recorded owner: the setuid bit is cleared for anyone
        entry.pop("gid", None)
    doc["format"] = "artifactkit.manifest/1"
    forge_manifest(store, ref.name, ref.version, json.dumps(doc).encode())
    code, out, _ = _json(capsys, ["download", "demo", str(fast_tmp / "out"), "--store", str(fast_tmp / "store"),
                                  "--owners", "current"])
    assert code == EXIT_OK
    assert sorted(out["reowned"]) == ["helper (setuid with no recorded owner cleared)",
                                      "tool (setuid with no recorded owner cleared)"], out["reowned"]
    assert out["reowned_entries"] == out["reowned"]


def test_a_ctrl_c_while_the_document_is_written_comes_after_the_whole_document() -> None:
    class CtrlCMidWrite(io.StringIO):
        def write(self, text: str) -> int:
            os.kill(os.getpid(), signal.SIGINT)  # the key pressed as the bytes go out
            return super().write(text)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's, as after on_parsed
    out = CtrlCMidWrite()
    try:
        with pytest.raises(KeyboardInterrupt):
            emit_json({"schema": "artifactkit.ls/1", "versions": []}, out)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert json.loads(out.getvalue()) == {"schema": "artifactkit.ls/1", "versions": []}


class _SubclassOfIntegrityError(IntegrityError):
    """A finer integrity failure someone may add: it must stay a failed check."""


@pytest.mark.parametrize(("err", "code"), [
    (IntegrityError("blob corrupt"), EXIT_FAILED), (_SubclassOfIntegrityError("x"), EXIT_FAILED),
    (MetadataMismatchError("atime moved"), EXIT_FAILED), (TimestampNotRepresentable("coarse"), EXIT_FAILED),
    (UnsafeStoreError("blobs is a link"), EXIT_SETUP), (NotRestorableError("owner"), EXIT_SETUP),
    (FileExistsError(17, "File exists"), EXIT_SETUP), (ZeroDivisionError(), EXIT_SETUP),
    (KeyboardInterrupt(), 130),
], ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value))
def test_the_exit_code_table_decides_by_the_most_derived_class_it_lists(err: BaseException, code: int) -> None:
    assert exit_code_of(err) == code
    assert failure(err).exit_code == failure(err).document["exit_code"] == code
