"""The command as a whole: --version, every subcommand's --help, and one-line errors naming the argument."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from artifactkit.cli.main import SUBCOMMAND_MODULES, build_parser, main
from artifactkit.conformance.corpus import materialize
from artifactkit.trace.engine import DiagnoseConfig, run_diagnose


def _subcommands() -> list[str]:
    action = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(action.choices)  # type: ignore[arg-type]


def test_version_exits_0_and_names_the_package(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("artifactkit ")


def test_version_says_the_reference_engine_when_the_setting_selects_it(
        capsys: pytest.CaptureFixture[str], use_engine: Callable[[str], None]) -> None:
    use_engine("python")
    assert main(["--version"]) == 0
    assert re.fullmatch(r"artifactkit \S+ \(engine: python, selected by ARTIFACTKIT_ENGINE\)\n",
                        capsys.readouterr().out)


def test_version_says_the_native_engine_and_its_threads_where_the_core_is_built(
        capsys: pytest.CaptureFixture[str], use_engine: Callable[[str], None]) -> None:
    use_engine("native")
    cores = len(os.sched_getaffinity(0))
    assert main(["--version"]) == 0
    threads = f"{cores} thread{'s' if cores != 1 else ''}"
    assert re.fullmatch(rf"artifactkit \S+ \(engine: native, {threads}, selected by ARTIFACTKIT_ENGINE\)\n",
                        capsys.readouterr().out)


def test_every_subcommand_is_registered() -> None:
    assert len(SUBCOMMAND_MODULES) == 4
    assert _subcommands() == ["conformance", "diagnose", "diff", "download", "forget", "gc", "ls", "probe",
                              "publish", "verify"]


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_help_has_a_description_option_help_and_the_exit_codes(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    parser = next(a for a in build_parser()._actions if a.dest == "command").choices[command]  # type: ignore[index]
    assert parser.description and len(parser.description) > 40
    assert all(action.help for action in parser._actions), [a.dest for a in parser._actions if not a.help]
    assert "exit codes: 0" in " ".join(out.split()) and "1 a check failed" in " ".join(out.split())


@pytest.mark.parametrize(("argv", "expected"), [
    (["verify", "--store", "{tmp}/typo"], "no artifactkit store at {tmp}/typo"),
    (["ls", "--store", "{tmp}/typo"], "no artifactkit store at {tmp}/typo"),
    (["download", "demo", "{tmp}/out", "--store", "{tmp}/typo"], "no artifactkit store at {tmp}/typo"),
    (["verify", "--store", "{tmp}/file"], "no artifactkit store at {tmp}/file: it is a file, not a directory"),
    (["publish", "{tmp}/nonexistent", "--store", "{tmp}/store", "--name", "a"],
     "source {tmp}/nonexistent: lstat: No such file or directory"),
    (["download", "demo@0", "{tmp}/out", "--store", "{tmp}/store"], "version '0' of 'demo' must be a positive"),
    (["download", "demo@-1", "{tmp}/out", "--store", "{tmp}/store"], "version '-1' of 'demo' must be a positive"),
])
def test_errors_are_one_line_exit_2_name_the_argument_and_carry_no_errno(
        argv: list[str], expected: str, fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    materialize("basic", fast_tmp / "src")
    assert main(["publish", str(fast_tmp / "src"), "--store", str(fast_tmp / "store"), "--name", "demo"]) == 0
    (fast_tmp / "file").write_text("not a store")
    capsys.readouterr()
    assert main([arg.replace("{tmp}", str(fast_tmp)) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[Errno" not in err
    assert expected.replace("{tmp}", str(fast_tmp)) in err
    assert not (fast_tmp / "typo").exists()


def test_publish_creates_a_missing_store_and_its_parents(fast_tmp: Path) -> None:
    materialize("basic", fast_tmp / "src")
    assert main(["publish", str(fast_tmp / "src"), "--store", str(fast_tmp / "a" / "b" / "store"), "--name", "x"]) == 0
    assert main(["verify", "--store", str(fast_tmp / "a" / "b" / "store")]) == 0


def test_probe_ends_with_its_conclusion(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", str(fast_tmp)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("noatime_tree here would use: ")


def test_the_diagnose_summary_fits_100_columns_and_explains_itself(fast_tmp: Path) -> None:
    from artifactkit.cli.diagnose import render

    result = run_diagnose(DiagnoseConfig(cycles=1, readers=1, interval_ms=2, base=str(fast_tmp), fanotify=False))
    text = render(result, str(fast_tmp))
    assert max(len(line) for line in text.splitlines()) <= 100, text
    rows = {line.split("  ")[0]: line for line in text.splitlines()}
    assert "1 x 2 ms interval" in rows["cycles"]
    assert "mtime_ns, atime_ns" in rows["checked fields"] and str(fast_tmp) in rows["base"]
    assert "lower bound: without fanotify" in rows["accesses: unexplained"]


def test_diagnose_leaves_nothing_behind_after_success_or_a_setup_error(fast_tmp: Path) -> None:
    # special-modes: a setup error for a normal user (its mode-000 file) with a 0555 dir in the tree,
    # a clean run for root; either way the base must be empty afterwards.
    for corpus in ("basic", "special-modes"):
        code = main(["diagnose", "--cycles", "1", "--readers", "1", "--corpus", corpus, "--base", str(fast_tmp),
                     "--json"])
        assert code in (0, 2)
        assert list(fast_tmp.iterdir()) == [], corpus


def test_each_command_is_mapped_to_the_module_that_registers_it() -> None:
    import argparse
    import importlib

    from artifactkit.cli.main import COMMAND_MODULES

    registered = {}
    for module in SUBCOMMAND_MODULES:
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(subparsers)
        registered.update(dict.fromkeys(subparsers.choices, module))
    assert registered == COMMAND_MODULES


def test_a_store_command_imports_neither_the_tracing_nor_the_conformance_engine() -> None:
    import subprocess
    import sys

    code = ("import sys; from artifactkit.cli.main import main; main(['ls', '--store', '/nonexistent']); "
            "print(sorted(m for m in sys.modules if m.startswith(('artifactkit.trace', 'artifactkit.conformance', "
            "'artifactkit.isolation', 'importlib.metadata'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
