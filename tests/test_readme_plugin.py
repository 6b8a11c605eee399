"""The README's plugin example, run as it stands there: it fails for the reason the README gives (the copier's own
reads moved the atimes it copied), and only for that: the same text in ``noatime_tree``, where no read moves
atime, passes (issue 50 item 8)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

README = Path(__file__).resolve().parents[1] / "README.md"


def _plugin_example() -> tuple[str, str]:
    """The example's code and the paragraph after it."""
    found = re.search(r"\*\*2\. A pytest plugin\*\*.*?```python\n(.*?)```\n\n(.*?)\n\n", README.read_text(), re.S)
    assert found, "the README's plugin example is gone"
    return found[1], found[2]


def _run(pytester: pytest.Pytester, base: Path, code: str) -> pytest.RunResult:
    pytester.makepyfile(test_example=code)
    return pytester.runpytest(f"--artifactkit-base={base}", "-p", "no:randomly")


def test_the_readmes_plugin_example_fails_on_the_atimes_its_copier_read_as_the_readme_says(
        pytester: pytest.Pytester, tmpfs_strict: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARTIFACTKIT_BASE", raising=False)
    code, said = _plugin_example()
    assert "real_atime_tree" in code and "This test fails, for its reads" in said and "omitted" in said
    result = _run(pytester, tmpfs_strict, code)
    result.assert_outcomes(failed=1)
    # Only atimes, and each with the diagnosis the README names: no mtime, mode or content differs.
    result.stdout.fnmatch_lines(["*MetadataMismatchError: metadata mismatch at stage 'copy': * [[]omitted[]]"])
    lines = result.stdout.lines
    named = [line for line in lines if re.search(r"^E?\s+\w+_ns: expected", line)]
    assert named and all("atime_ns: expected" in line and line.endswith(" omitted") for line in named), named


def test_the_same_example_in_noatime_tree_passes(
        pytester: pytest.Pytester, tmpfs_strict: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The reads are the reason: where they move nothing, the copy is exact.
    monkeypatch.delenv("ARTIFACTKIT_BASE", raising=False)
    code, _ = _plugin_example()
    _run(pytester, tmpfs_strict, code.replace("real_atime_tree", "noatime_tree")).assert_outcomes(passed=1)
