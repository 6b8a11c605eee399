"""Progress of a bucket store's download (issue 26): each blob reported as it lands, then the restore."""

from __future__ import annotations

from pathlib import Path

from artifactkit import Store
from artifactkit.store.progress import Progress

FILES = 300


def _tree(root: Path) -> Path:
    root.mkdir()
    for index in range(FILES):
        (root / f"f{index}").write_bytes(f"{index:08}".encode() * 16)  # 128 bytes each
    return root


def test_a_bucket_download_reports_each_blob_fetched(s3_url: str, fast_tmp: Path) -> None:
    store = Store(s3_url)
    store.publish(_tree(fast_tmp / "src"), "demo")
    seen: list[Progress] = []
    store.download("demo", fast_tmp / "out", progress=seen.append)
    fetched = [report for report in seen if report.phase == "fetch"]
    assert fetched[0].entries == 0 and fetched[0].entries_total == FILES
    assert (fetched[-1].entries, fetched[-1].bytes, fetched[-1].bytes_total) == (FILES, FILES * 128, FILES * 128)
    assert [report.phase for report in seen][-1] == "create"
