"""Progress of long store operations (issue 26): every phase reported with its totals, the counts reaching
them, a call per batch and never per file, on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.store.progress import Progress
from tests.support.engines import ENGINE_NAMES, running_on
from tests.support.stores import tree_object_names

FILES = 1000


def _tree(root: Path) -> Path:
    for index in range(FILES):
        (root / f"d{index % 10}").mkdir(parents=True, exist_ok=True)
        (root / f"d{index % 10}" / f"f{index}").write_bytes(f"{index:08}".encode() * 16)  # 128 bytes each
    return root


def _phases(seen: list[Progress]) -> dict[str, Progress]:
    """The last report of each phase, in the order the phases began."""
    last: dict[str, Progress] = {}
    for report in seen:
        last[report.phase] = report
    return last


@pytest.fixture
def seen() -> list[Progress]:
    return []


def test_publish_reports_the_scan_then_every_read_with_its_totals(fast_tmp: Path, seen: list[Progress]) -> None:
    Store(fast_tmp / "store").publish(_tree(fast_tmp / "src"), "demo", progress=seen.append)
    phases = _phases(seen)
    assert list(phases) == ["scan", "read"]
    assert phases["scan"].entries >= FILES
    read = phases["read"]
    assert (read.entries, read.entries_total, read.bytes, read.bytes_total) == (FILES, FILES, FILES * 128, FILES * 128)
    assert len(seen) < 50, "progress is reported per batch, not per file"


def test_download_verify_and_gc_report_their_phases_to_the_end(fast_tmp: Path, seen: list[Progress]) -> None:
    store = Store(fast_tmp / "store")
    store.publish(_tree(fast_tmp / "src"), "demo")
    store.download("demo", fast_tmp / "out", progress=seen.append)
    create = _phases(seen)["create"]
    assert (create.entries, create.entries_total, create.bytes, create.bytes_total) == (FILES, FILES, FILES * 128,
                                                                                        FILES * 128)
    seen.clear()
    assert store.verify(progress=seen.append).ok
    phases = _phases(seen)
    assert list(phases) == ["manifests", "blobs"]
    assert (phases["manifests"].entries, phases["manifests"].entries_total) == (1, 1)
    # Each file's blob, and each tree object (format 3: the root's and every directory's).
    assert phases["blobs"].entries == phases["blobs"].entries_total == FILES + len(tree_object_names(store)) > FILES
    seen.clear()
    store.gc(progress=seen.append)
    assert list(_phases(seen)) == ["manifests", "sweep"]



@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_progress_moves_during_a_long_read_and_create_on_either_engine(
        fast_tmp: Path, seen: list[Progress], engine: str) -> None:
    files = 2500  # over two of the native core's batches (BATCH_FILES), a dozen of the reference's
    for index in range(files):
        (fast_tmp / "src" / f"d{index % 25}").mkdir(parents=True, exist_ok=True)
        (fast_tmp / "src" / f"d{index % 25}" / f"f{index}").write_bytes(f"{index:08}".encode())
    with running_on(engine):
        store = Store(fast_tmp / "store")
        store.publish(fast_tmp / "src", "demo", progress=seen.append)
        store.download("demo", fast_tmp / "out", progress=seen.append)
    for phase in ("read", "create"):
        between = {r.entries for r in seen if r.phase == phase and 0 < r.entries < files}
        assert len(between) >= 2, f"{phase}: the count moved only at the end ({sorted(between)})"
        assert max(r.entries for r in seen if r.phase == phase) == files
