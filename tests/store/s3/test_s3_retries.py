"""What the bucket client sends again, and what it concludes after (issue 53, item 3).

A failure is injected where obstore or ``urllib`` would raise it, so each case is exact and takes a second: a
request refused before it was sent (then the count of requests sent again is known), and the ambiguous one, a
write that landed but whose answer was lost. A conditional PUT sent again must neither turn someone else's
version into our success nor our own landed claim into a second version.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from artifactkit import Store
from artifactkit.cli.main import main
from artifactkit.store.s3.objects import Bucket


def _refused(method: str = "GET") -> Exception:
    """What obstore raises when nothing listens (its text, as measured against a closed port)."""
    from obstore.exceptions import GenericError

    return GenericError(f"Generic S3 error: Error performing {method} http://127.0.0.1:1/b/k in 1ms - HTTP error: "
                        "error sending request")


def _tree(root: Path, files: int = 6, tag: str = "") -> Path:
    root.mkdir()
    for index in range(files):
        (root / f"f{index}").write_bytes(f"{tag}{index}:".encode() * 100)
    return root


class _Flaky:
    """Fails the first ``times`` calls of ``function`` (where ``when(args, kwargs)``) before sending them."""

    def __init__(self, function: Any, times: int, when: Any = lambda args, kwargs: True) -> None:
        self.function, self.left, self.when, self.failed = function, times, when, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.left and self.when(args, kwargs):
            self.left -= 1
            self.failed += 1
            raise _refused()
        return self.function(*args, **kwargs)


@pytest.mark.parametrize("case", ["publish:put", "download:get", "verify:get", "gc:urlopen"])
def test_each_request_sent_again_is_counted_once_in_the_json_result(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        case: str) -> None:
    import obstore

    operation, function = case.split(":")
    src = _tree(fast_tmp / "src")
    if operation != "publish":
        Store(s3_url).publish(src, "c")
    owner: Any = urllib.request if function == "urlopen" else obstore
    flaky = _Flaky(getattr(owner, function), 3)
    monkeypatch.setattr(owner, function, flaky)
    argv = {"publish": ["publish", str(src), "--name", "c"], "download": ["download", "c", str(fast_tmp / "out")],
            "verify": ["verify"], "gc": ["gc"]}[operation]
    capsys.readouterr()
    assert main([*argv, "--store", s3_url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert flaky.failed == 3 and doc["retries"] == 3, doc


def test_a_local_store_reports_no_retries(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _tree(fast_tmp / "src")
    assert main(["publish", str(src), "--name", "l", "--store", str(fast_tmp / "store"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["retries"] == 0


def _lost_answer(function: Any, when: Any, before: Any = None) -> Any:
    """``function`` whose first call matching ``when`` raises a dropped connection: after sending it (its write
    landed, the answer was lost) or, with ``before``, instead of sending it, once ``before()`` ran."""
    state = {"done": False}

    def call(*args: Any, **kwargs: Any) -> Any:
        if state["done"] or not when(args, kwargs):
            return function(*args, **kwargs)
        state["done"] = True
        if before is None:
            function(*args, **kwargs)
        else:
            before()
        raise _refused("PUT")
    return call


def _creates(key_part: str) -> Any:
    return lambda args, kwargs: kwargs.get("mode") == "create" and key_part in args[1]


def test_a_claim_that_landed_but_whose_answer_was_lost_is_one_version_not_two(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import obstore

    real_put = obstore.put
    monkeypatch.setattr(obstore, "put", _lost_answer(real_put, _creates("manifests/")))
    store = Store(s3_url)
    ref = store.publish(_tree(fast_tmp / "src"), "a")
    assert ref.version == 1 and store.bucket.retries == 1  # type: ignore[attr-defined]
    monkeypatch.setattr(obstore, "put", real_put)
    assert [r.version for r in Store(s3_url).list()] == [1]  # the retry's 412 was our own write: no second claim


def test_a_claim_refused_unsent_while_another_publisher_took_the_version_is_taken_not_a_false_success(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import obstore

    theirs, ours = _tree(fast_tmp / "theirs", tag="t"), _tree(fast_tmp / "ours", tag="o")
    real_put = obstore.put

    def other_publisher() -> None:
        with monkeypatch.context() as inner:
            inner.setattr(obstore, "put", real_put)
            assert Store(s3_url).publish(theirs, "a").version == 1

    monkeypatch.setattr(obstore, "put", _lost_answer(real_put, _creates("manifests/"), other_publisher))
    ref = Store(s3_url).publish(ours, "a")
    monkeypatch.setattr(obstore, "put", real_put)
    assert ref.version == 2  # the retry's 412 was another's manifest: taken, so the next number
    store = Store(s3_url)
    assert [r.version for r in store.list()] == [1, 2]
    for version, src in ((1, theirs), (2, ours)):
        out = fast_tmp / f"out{version}"
        store.download(f"a@{version}", out)
        assert sorted(p.read_bytes() for p in out.iterdir()) == sorted(p.read_bytes() for p in src.iterdir())


def test_create_and_replace_sent_again_after_a_lost_answer_recognise_their_own_write(
        s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import obstore

    bucket = Bucket(s3_url.removeprefix("s3://").split("/")[0], f"cas-{secrets.token_hex(4)}/")
    monkeypatch.setattr(obstore, "put", _lost_answer(obstore.put, _creates("k")))
    etag = bucket.create("k", b"mine", metadata={"writer": "w1"})
    assert etag is not None and bucket.get_bytes("k") == b"mine"
    monkeypatch.setattr(obstore, "put", _lost_answer(obstore.put, lambda args, kwargs: isinstance(kwargs.get("mode"),
                                                                                                  dict)))
    new = bucket.replace("k", b"mine, counter 1", etag)
    assert new is not None and new != etag  # not "the lease was broken": the 412 was our own landed write
    assert bucket.replace("k", b"someone else's", etag) is None  # a stale ETag is still refused
    assert bucket.retries == 2


def test_a_refused_or_wrong_request_is_never_sent_again(s3_url: str) -> None:
    from artifactkit.errors import RemoteStoreError

    bucket = Bucket(s3_url.removeprefix("s3://").split("/")[0], "never/")
    with pytest.raises(RemoteStoreError):
        bucket.put("k", b"x", sha256="0" * 64)  # BadDigest: refused before sending
    assert bucket.head("missing") is None and bucket.get_bounded("missing", 10) is None
    assert bucket.retries == 0


def _each_request_kind(bucket: Bucket) -> dict[str, Any]:
    """One call of every kind of request the bucket sends, on keys made for it."""
    data = b"every kind"
    digest = hashlib.sha256(data).hexdigest()
    calls: dict[str, Any] = {
        "put": lambda: bucket.put("kinds/p", data, sha256=digest),
        "create": lambda: bucket.create(f"kinds/c-{secrets.token_hex(4)}", data, metadata={"writer": "w"}),
        "replace": lambda: bucket.replace("kinds/p", data + b"!", bucket.head("kinds/p").etag),  # type: ignore[union-attr]
        "head": lambda: bucket.head("kinds/p"),
        "get_bytes": lambda: bucket.get_bytes("kinds/p"),
        "get_bounded": lambda: bucket.get_bounded("kinds/p", 100),
        "objects_under": lambda: list(bucket.objects_under("kinds/")),
        "check_bucket": bucket.check_bucket,
        "server_now": bucket.server_now,
        "delete_if_match": lambda: bucket.delete_if_match("kinds/gone", "etag"),
        "delete": lambda: bucket.delete("kinds/p"),
        "uploads_before": lambda: bucket.uploads_before(datetime.now(UTC)),
    }
    return calls


def _kinds_that_ride_out_one_refusal(bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kinds of request that succeed though their first attempt is refused (the guard below)."""
    import botocore.client
    import obstore

    riding = []
    for name, call in _each_request_kind(bucket).items():
        with monkeypatch.context() as patch:
            flakies = [_Flaky(getattr(obstore, f), 1) for f in ("put", "get", "head", "delete")]
            for function, flaky in zip(("put", "get", "head", "delete"), flakies, strict=True):
                patch.setattr(obstore, function, flaky)
            urlopen = _Flaky(urllib.request.urlopen, 1)
            patch.setattr(urllib.request, "urlopen", urlopen)
            api = _Flaky(botocore.client.BaseClient._make_api_call, 1)
            patch.setattr(botocore.client.BaseClient, "_make_api_call", lambda self, *a, api=api: api(self, *a))
            try:
                call()
            except Exception:  # noqa: BLE001, S112 - a kind that did not ride it out is what the list leaves out
                continue
            if sum(f.failed for f in (*flakies, urlopen, api)) >= 1:
                riding.append(name)
    return riding


def test_every_kind_of_request_the_bucket_sends_rides_out_a_refused_first_attempt(
        s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = Bucket(s3_url.removeprefix("s3://").split("/")[0], f"kinds-{secrets.token_hex(4)}/")
    assert _kinds_that_ride_out_one_refusal(bucket, monkeypatch) == list(_each_request_kind(bucket))


def test_the_guard_sees_a_client_that_sends_nothing_again(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = Bucket(s3_url.removeprefix("s3://").split("/")[0], f"kinds-{secrets.token_hex(4)}/", retry_s=0)
    assert _kinds_that_ride_out_one_refusal(bucket, monkeypatch) == []


def test_a_local_files_failure_is_never_sent_again() -> None:
    """A full destination is ours, not the endpoint's: 30 s of retries of ENOSPC only delayed its clear error."""
    from artifactkit.store.s3.retries import is_transient
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
        assert not is_transient(OSError(code, os.strerror(code)))
    assert is_transient(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))


def test_an_error_translated_to_itself_keeps_a_cause_chain_without_a_cycle() -> None:
    """``raise err from err`` made a download's ENOSPC a cycle that a walker of its causes followed forever."""
    from artifactkit.errors import RemoteUnavailableError
    from artifactkit.store.s3.failures import raise_as
    cause = OSError(errno.ENOSPC, "No space left on device")
    ours = RemoteUnavailableError("s3://b/k: unreachable", url="s3://b/k")
    for err, by in ((ours, cause), (ours, ours)):
        with pytest.raises(RemoteUnavailableError) as caught:
            try:
                raise by  # noqa: TRY301 - the failure raise_as translates, raised where the test can see it
            except Exception as raised:  # noqa: BLE001 - re-raised by raise_as, the point of the test
                raise_as(err, raised)
        seen: list[BaseException] = []
        link: BaseException | None = caught.value
        while link is not None:
            assert all(link is not earlier for earlier in seen), "a cycle in the cause chain"
            seen.append(link)
            link = link.__cause__
