"""A claimed size that costs centuries (issue 48, class 7): a writer of the store plants a sparse blob of
2**62 bytes (it costs no space) and a manifest entry claiming it. Hashing 2**62 bytes of zeros takes longer
than anyone waits, so a size over the single-file limit (``MAX_FILE_BYTES``, 1 TiB unless
``ARTIFACTKIT_MAX_FILE_BYTES`` says otherwise) is a :class:`ManifestLimitError` naming the entry before a byte
is hashed or written, on both engines and both kinds of store; publish refuses such a source file alike, so
every version it makes downloads; and an entry that claims no holes writes no more than its blob's data.

Every test runs under :func:`deadline`: on the code before the limit each one hashed zeros until killed, and a
test must fail in seconds rather than hang.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.engine.reference.scan import scan_tree
from artifactkit.errors import ManifestLimitError
from artifactkit.manifest.limits import FILE_BYTES_SETTING, MAX_FILE_BYTES, file_size_limit
from tests.support.both_parses import parse_both
from tests.support.deadline import deadline
from tests.support.hostile_manifest import DATA, SHA, body, doc, file_entry, refusal
from tests.support.hostile_store import STORE_KINDS, blob_exists, forge_manifest, put_blob, store_of_kind

HUGE = 2**62
#: A digest no content of the planted blob has: a download that hashed it would end in IntegrityError.
PLANTED = "cd" * 32




def _plant_sparse_blob(store: Store, sha: str, size: int) -> None:
    """A blob of ``size`` bytes of hole under ``sha`` in a local store: what a writer of it can make for free."""
    path = Path(store.root) / "blobs" / sha
    with path.open("wb") as handle:
        os.ftruncate(handle.fileno(), size)


@pytest.fixture
def store(request: pytest.FixtureRequest, fast_tmp: Path) -> Store:
    """A store (local or S3, by ``kind``) whose ``demo@1`` is one small file, downloadable."""
    made = store_of_kind(request.param, request, fast_tmp)
    put_blob(made, SHA, DATA)
    forge_manifest(made, "demo", 1, body(doc()))
    return made


@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("extents", [None, [], [[HUGE - 1, 1]]], ids=["dense", "all-holes", "last-byte"])
def test_a_claim_past_the_file_size_limit_with_a_sparse_blob_to_match_is_refused_before_any_hashing(
        store: Store, fast_tmp: Path, extents: list[list[int]] | None) -> None:
    if store.root.startswith("s3://"):
        put_blob(store, PLANTED, b"")  # a bucket holds real bytes only: the parse must refuse before any fetch
    else:
        _plant_sparse_blob(store, PLANTED, HUGE)
    claim = file_entry(size=HUGE, sha256=PLANTED, **({} if extents is None else {"extents": extents}))
    forge_manifest(store, "demo", 2, body(doc(claim)))
    started = time.monotonic()
    with deadline(20, ": the claimed size was not refused up front"), pytest.raises(ManifestLimitError) as caught:
        store.download("demo", fast_tmp / "out", version=2)
    assert time.monotonic() - started < 5
    err = caught.value
    assert (err.limit, err.actual, err.setting) == (MAX_FILE_BYTES, HUGE, FILE_BYTES_SETTING)
    assert "'a'" in str(err) and FILE_BYTES_SETTING in str(err) and str(HUGE) in str(err)
    assert not (fast_tmp / "out").exists()
    with deadline(20, ": the claimed size was not refused up front"):
        report = store.verify()
    assert not report.ok and [item for item in report.unreadable if "demo@2" in item and str(HUGE) in item], report
    store.download("demo", fast_tmp / "good", version=1)  # the store still works: only the claim is refused


def test_the_file_size_limit_is_one_tib_unless_set_and_its_edge_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FILE_BYTES_SETTING, raising=False)
    assert file_size_limit() == MAX_FILE_BYTES == 1 << 40
    assert parse_both(body(doc(file_entry(size=MAX_FILE_BYTES, extents=[])))).entries[1].size == MAX_FILE_BYTES
    assert isinstance(refusal(body(doc(file_entry(size=MAX_FILE_BYTES + 1, extents=[])))), ManifestLimitError)
    monkeypatch.setenv(FILE_BYTES_SETTING, " 6\n")
    assert file_size_limit() == 6
    assert parse_both(body(doc())).entries[1].size == len(DATA) == 6
    monkeypatch.setenv(FILE_BYTES_SETTING, "5")
    err = refusal(body(doc()))
    assert isinstance(err, ManifestLimitError) and (err.limit, err.actual) == (5, 6)
    monkeypatch.setenv(FILE_BYTES_SETTING, str(2**63 - 1))  # every size a Linux file can have
    assert parse_both(body(doc(file_entry(size=2**63 - 1, extents=[])))).entries[1].size == 2**63 - 1


@pytest.mark.parametrize("text", ["0", "-1", "1T", "1e12", "1_000", " "])
def test_a_file_size_limit_that_is_not_a_positive_whole_number_is_named_by_every_parse(
        monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(FILE_BYTES_SETTING, text)
    err = refusal(body(doc()))
    assert isinstance(err, ManifestLimitError) and err.setting == FILE_BYTES_SETTING
    assert f"{FILE_BYTES_SETTING}=" in str(err) and "file size" in str(err)


@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
def test_publish_refuses_a_source_file_over_the_limit_by_name_before_reading_it(store: Store, fast_tmp: Path) -> None:
    src = fast_tmp / "src"
    (src / "d").mkdir(parents=True)
    (src / "small").write_bytes(b"x")
    with (src / "d" / "huge").open("wb") as handle:
        os.ftruncate(handle.fileno(), MAX_FILE_BYTES + 1)  # sparse: tmpfs holds it for free
    before = store.list()
    started = time.monotonic()
    with deadline(20, ": the claimed size was not refused up front"), pytest.raises(ManifestLimitError) as caught:
        store.publish(src, "big")
    assert time.monotonic() - started < 5
    err = caught.value
    assert "'d/huge'" in str(err) and FILE_BYTES_SETTING in str(err)
    assert (err.limit, err.actual, err.setting) == (MAX_FILE_BYTES, MAX_FILE_BYTES + 1, FILE_BYTES_SETTING)
    assert store.list() == before
    assert not blob_exists(store, hashlib.sha256(b"x").hexdigest())  # nothing was read, nothing stored


def test_a_dense_claim_on_a_sparse_blob_writes_no_more_than_the_blobs_data(fast_tmp: Path) -> None:
    # A bucket's blob is an object of real bytes, so this is a local store's: a writer of it makes a blob of
    # 64 MiB of hole around one 4 KiB run for free, and an entry claiming the file dense (no "extents").
    size, run = 64 << 20, (32 << 20, 4096)
    content = bytearray(size)
    content[run[0]:run[0] + run[1]] = b"z" * run[1]
    sha = hashlib.sha256(content).hexdigest()
    store = Store(fast_tmp / "store")
    put_blob(store, SHA, DATA)
    forge_manifest(store, "demo", 1, body(doc()))
    blob = Path(store.root) / "blobs" / sha
    with blob.open("wb") as handle:
        os.ftruncate(handle.fileno(), size)
        os.pwrite(handle.fileno(), bytes(content[run[0]:run[0] + run[1]]), run[0])
    stored = os.stat(blob).st_blocks * 512
    forge_manifest(store, "demo", 2, body(doc(file_entry(size=size, sha256=sha))))
    store.download("demo", fast_tmp / "out", version=2)
    out = fast_tmp / "out" / "a"
    assert hashlib.sha256(out.read_bytes()).hexdigest() == sha
    written = os.stat(out).st_blocks * 512
    assert written <= stored + 4096, f"{written} bytes written for a blob of {stored} bytes of data"


class _EveryListingMatches:
    """A stat cache that vouches for every listing: the scan captures nothing it matched, yet sees each lstat."""

    def match_listing(self, relpaths: list[str], stats: list[os.stat_result], /) -> bool:
        return True

    def entry_line(self, path: str, st: os.stat_result, /) -> None:
        return None


def test_a_file_the_stat_cache_vouches_for_is_held_to_the_limit_too(fast_tmp: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Recorded under a higher limit, a file the cache answers for is never captured again: it must still not
    # make a version whose readers, with this limit, refuse it.
    src = fast_tmp / "src"
    src.mkdir()
    (src / "six").write_bytes(DATA)
    monkeypatch.setenv(FILE_BYTES_SETTING, "5")
    with pytest.raises(ManifestLimitError, match="'six' has 6 bytes"):
        scan_tree(src, cached=_EveryListingMatches())
    monkeypatch.setenv(FILE_BYTES_SETTING, "6")
    assert scan_tree(src, cached=_EveryListingMatches()).matched == [".", "six"]
