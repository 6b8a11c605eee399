"""Claims a manifest makes that no download may drop silently (issue 48, class 8): half an owner (a ``uid``
without its ``gid``, or the other way round). Before, a foreign ``gid`` alone left the group root's while the
download said "every entry verified exact". It is now an :class:`IntegrityError` naming the entry before
anything is written, on both engines and both stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from artifactkit import IntegrityError, Store
from tests.support.hostile_manifest import DATA, SHA, T, body, doc, file_entry
from tests.support.hostile_store import STORE_KINDS, forge_manifest, put_blob, store_of_kind

FOREIGN = 4242


@pytest.fixture
def store(request: pytest.FixtureRequest, fast_tmp: Path) -> Store:
    made = store_of_kind(request.param, request, fast_tmp)
    put_blob(made, SHA, DATA)
    forge_manifest(made, "demo", 1, body(doc(file_entry(uid=0, gid=0))))
    return made


def _refused(store: Store, fast_tmp: Path, entries: list[dict[str, Any]]) -> IntegrityError:
    """The download's and verify's refusal of version 2 made of ``entries``; version 1 still downloads."""
    forge_manifest(store, "demo", 2, body(doc(*entries)))
    with pytest.raises(IntegrityError) as caught:
        store.download("demo", fast_tmp / "out", version=2)
    assert not (fast_tmp / "out").exists()
    report = store.verify()
    assert not report.ok and [item for item in report.unreadable if "demo@2" in item], report
    store.download("demo", fast_tmp / "good", version=1)
    return caught.value


# --- 8. half an owner -------------------------------------------------------------------------------------

@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("field", ["uid", "gid"])
def test_an_entry_with_half_an_owner_is_refused_naming_the_entry(store: Store, fast_tmp: Path, field: str) -> None:
    # Downloaded as root, a foreign gid alone left the file root's group and said "verified exact".
    err = _refused(store, fast_tmp, [file_entry(**{field: FOREIGN})])
    other = "gid" if field == "uid" else "uid"
    assert "'a'" in str(err) and f"a {field} without a {other}" in str(err), err


@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("kind", ["dir", "symlink"])
def test_half_an_owner_is_refused_on_every_kind(store: Store, fast_tmp: Path, kind: str) -> None:
    entry = {"path": "a", "kind": kind, "mode": 0o777 if kind == "symlink" else 0o755, "mtime_ns": T, "atime_ns": T,
             "gid": FOREIGN, **({"target": "x"} if kind == "symlink" else {})}
    assert "'a'" in str(_refused(store, fast_tmp, [entry]))
