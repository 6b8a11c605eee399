"""Issue 50 item 8: the plugin holds a copier to what conformance holds it to. In ``noatime_tree`` no read
moves atime, so ``shutil.copytree`` passes there; in ``real_atime_tree`` its reads show, as under conformance."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mounts import Mounts

pytest_plugins = ["pytester"]

#: The README's example, as proposed for it: the same test in both fixtures.
COPYTREE = '''
import shutil

import pytest

from artifactkit import capture_tree, materialize


@pytest.mark.parametrize("where", ["real_atime_tree", "noatime_tree"])
def test_copytree_keeps_every_time(where, request, assert_metadata):
    tree = request.getfixturevalue(where)
    supplied = materialize("edge-times", tree / "src")
    shutil.copytree(tree / "src", tree / "out", symlinks=True)
    assert_metadata(supplied, capture_tree(tree / "out"), stage="copy")
'''


def test_copytree_fails_in_real_atime_tree_for_its_reads_and_passes_in_noatime_tree(
        pytester: pytest.Pytester, tmpfs_strict: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARTIFACTKIT_BASE", raising=False)
    pytester.makepyfile(test_copy=COPYTREE)
    result = pytester.runpytest(f"--artifactkit-base={tmpfs_strict}", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*_ test_copytree_keeps_every_time[[]real_atime_tree[]] _*",
                                 "*MetadataMismatchError: metadata mismatch at stage 'copy'*"])
    # The directories' atimes it records after listing them: the value its own listing left, from the copy.
    result.stdout.fnmatch_lines(["*atime_ns: expected 1700000001987654321, actual * omitted"])


def test_real_atime_tree_on_a_noatime_mount_is_an_error_naming_the_remedy(
        pytester: pytest.Pytester, mounts: Mounts, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARTIFACTKIT_BASE", raising=False)
    pytester.makepyfile("def test_uses_it(real_atime_tree):\n    pass\n")
    result = pytester.runpytest(f"--artifactkit-base={mounts.tmpfs('noatime')}", "-rE")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*real_atime_tree needs a base where reads move atime*--artifactkit-base*"])
