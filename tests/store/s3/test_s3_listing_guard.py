"""The checks a listing runs page by page (:class:`ListingGuard`) and the page parser, without a server."""

from __future__ import annotations

import pytest

from artifactkit.errors import ListingLimitError, RemoteStoreError
from artifactkit.store.s3.listing import ListingBounds, ListingGuard, parse_objects

WHERE = "s3://b/p/manifests/"
# Three names whose keys sort one way byte by byte (S3: "-" and "." before "/") and another segment by segment
# (SeaweedFS lists a directory before its longer siblings).
BINARY = ["m/a-b/1", "m/a.b/1", "m/a/1", "m/a/2", "m/ab/1"]
SEGMENTS = ["m/a/1", "m/a/2", "m/a-b/1", "m/a.b/1", "m/ab/1"]


def _guard(**bounds: int | float) -> ListingGuard:
    return ListingGuard(WHERE, ListingBounds(**bounds))  # type: ignore[arg-type]


@pytest.mark.parametrize("order", [BINARY, SEGMENTS], ids=["s3-binary", "seaweedfs-segments"])
def test_either_order_a_real_server_lists_in_passes_across_pages(order: list[str]) -> None:
    guard = _guard()
    guard.page(order[:2], "t1")
    guard.page(order[2:], None)
    assert guard.keys == 5 and guard.pages == 2


def test_a_listing_that_switches_between_the_two_orders_does_not_advance() -> None:
    # Each step ascends in one of the orders, but no one order holds: the way a cycle of two keys would pass.
    guard = _guard()
    guard.page(["m/a-b/1", "m/a/1"], "t1")
    with pytest.raises(ListingLimitError, match="does not advance: key 'm/a-b/1' followed 'm/a/1'") as caught:
        guard.page(["m/a-b/1"], "t2")
    assert caught.value.limit == "advance" and caught.value.url == WHERE  # type: ignore[attr-defined]


@pytest.mark.parametrize(("first", "second"), [(["k/1", "k/2"], ["k/2", "k/3"]), (["k/5"], ["k/4"]),
                                               (["k/2", "k/1"], [])])
def test_a_page_that_repeats_or_goes_back_does_not_advance(first: list[str], second: list[str]) -> None:
    guard = _guard()
    with pytest.raises(ListingLimitError, match="does not advance"):
        guard.page(first, "t1")
        guard.page(second, "t2")


def test_the_same_token_twice_in_a_row_does_not_advance_even_without_keys() -> None:
    guard = _guard()
    guard.page([], "same")
    with pytest.raises(ListingLimitError, match="continuation token 'same' twice"):
        guard.page([], "same")


def test_pages_without_keys_are_taken_up_to_the_bound_then_refused() -> None:
    guard = _guard(keyless_pages=3)
    guard.page(["a"], "t0")
    guard.page([], "t1")
    guard.page([], "t2")
    guard.page(["b"], "t3")  # a key resets the run
    guard.page([], "t4")
    guard.page([], "t5")
    with pytest.raises(ListingLimitError, match="3 pages in a row without a key") as caught:
        guard.page([], "t6")
    assert caught.value.limit == "empty pages"  # type: ignore[attr-defined]
    _guard(keyless_pages=1).page([], None)  # an empty last page is an empty listing, not a bound


def test_the_key_bound_names_its_setting_and_a_callers_own_bound_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARTIFACTKIT_MAX_LISTED_KEYS", " 3 ")
    guard = _guard()
    guard.page(["a", "b", "c"], "t1")
    with pytest.raises(ListingLimitError, match=r"passed 3 keys.*ARTIFACTKIT_MAX_LISTED_KEYS raises it") as caught:
        guard.page(["d"], None)
    assert caught.value.setting == "ARTIFACTKIT_MAX_LISTED_KEYS"  # type: ignore[attr-defined]
    with pytest.raises(ListingLimitError, match=r"passed 2 keys.*more than an honest store holds") as own:
        _guard(max_keys=2).page(["a", "b", "c"], None)
    assert own.value.setting is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["0", "-1", "20M", "1e6", "1_000", "٣"])
def test_a_key_bound_setting_that_is_not_a_positive_number_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                      value: str) -> None:
    monkeypatch.setenv("ARTIFACTKIT_MAX_LISTED_KEYS", value)
    with pytest.raises(ListingLimitError, match=r"ARTIFACTKIT_MAX_LISTED_KEYS=.* is not a number of keys"):
        _guard()


def test_the_time_budget_grows_with_the_keys_listed_and_counts_only_time_in_requests() -> None:
    guard = _guard(base_s=1.0, s_per_key=0.01)
    guard.charge(0.9)
    guard.page([f"k/{n:03}" for n in range(100)], "t1")  # +1 s of budget
    guard.charge(1.0)
    with pytest.raises(ListingLimitError, match=r"took 2\.1 s in requests for 100 keys.*1 s plus 10 ms") as caught:
        guard.charge(0.2)
    assert caught.value.limit == "time"  # type: ignore[attr-defined]


def test_an_upload_listing_may_repeat_a_key_once_per_upload_id_and_never_an_upload() -> None:
    guard = ListingGuard(WHERE, ListingBounds(), what="listing of multipart uploads")
    guard.page(["u/a", "u/a", "u/b"], "m1", ids=["1", "2", "1"])
    with pytest.raises(ListingLimitError, match="listing of multipart uploads does not advance: upload '1' of 'u/b'"):
        guard.page(["u/b"], "m2", ids=["1"])
    with pytest.raises(ListingLimitError, match="does not advance: key 'u/a' followed 'u/b'"):
        ListingGuard(WHERE, ListingBounds()).page(["u/b", "u/a"], None, ids=["1", "2"])


def _page(contents: str, more: str = "<IsTruncated>false</IsTruncated>") -> bytes:
    return (f'<?xml version="1.0"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{more}'
            f"{contents}</ListBucketResult>").encode()


_ONE = ("<Contents><Key>p/a&amp;b</Key><LastModified>2024-05-06T07:08:09.123Z</LastModified>"
        "<ETag>&quot;e&quot;</ETag><Size>12</Size></Contents>")


def test_a_page_parses_to_its_objects_and_its_continuation() -> None:
    found, truncated, token = parse_objects(_page(_ONE, "<IsTruncated>true</IsTruncated>"
                                                        "<NextContinuationToken>n/1+=</NextContinuationToken>"), WHERE)
    assert truncated and token == "n/1+="  # noqa: S105 - a continuation token, not a password
    assert [(o.key, o.size, o.etag, o.last_modified.isoformat()) for o in found] == [
        ("p/a&b", 12, '"e"', "2024-05-06T07:08:09.123000+00:00")]
    assert parse_objects(_page(""), WHERE) == ([], False, None)


@pytest.mark.parametrize(("body", "why"), [
    (b"not xml", "not XML"),
    (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><ListBucketResult>&a;</ListBucketResult>', "DTD"),
    (b"<Error><Code>x</Code></Error>", "its root is 'Error'"),
    (_page("", "<IsTruncated>true</IsTruncated>"), "no continuation token"),
    (_page(_ONE.replace("<Size>12</Size>", "")), "without a Key, Size and LastModified"),
    (_page(_ONE.replace("<Size>12</Size>", "<Size>-1</Size>")), "negative size"),
    (_page(_ONE.replace("2024-05-06T07:08:09.123Z", "yesterday")), "object .p/a&b.: Invalid isoformat"),
    (_page(_ONE.replace("2024-05-06T07:08:09.123Z", "2024-05-06T07:08:09")), "a time without a zone"),
])
def test_a_page_that_is_not_a_listing_is_a_named_error(body: bytes, why: str) -> None:
    with pytest.raises(RemoteStoreError, match="not an S3 ListObjectsV2 answer.*" + why):
        parse_objects(body, WHERE)
