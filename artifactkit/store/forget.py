"""``forget``, written once for every backend: choose the versions (named ones, or all but the newest
``keep_last`` of each name) under the backend's forget guard, and have it remove them — all of them, or none.

What a version used is freed by the next ``gc`` (which already says how much). A version is removed by one unlink
or DELETE of its manifest, so it is either listed whole or gone; a download holding it refuses the forget
(:class:`~artifactkit.errors.VersionInUseError`); a missing name or version is :class:`LookupError`. Either
way nothing is removed. The guards and holds are the backends' (``local_forget``, ``s3/forget``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from artifactkit.errors import IntegrityError, ManifestLimitError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store.backend import Opened
from artifactkit.store.layout import parse_ref
from artifactkit.store.versions import each

#: A name -> the versions to forget, or ``None``: all but the newest ``keep_last``.
Wanted = Mapping[str, Collection[int] | None]


def check_request(wanted: Wanted, keep_last: int | None) -> None:
    """:class:`ValueError` for a request that names no version, or could remove every version by a slip."""
    if not wanted:
        raise ValueError("forget needs at least one NAME@VERSION, or a NAME with keep_last")
    for name, versions in wanted.items():
        parse_ref(name)  # a bad name is refused before anything is opened
        if versions is None and keep_last is None:
            raise ValueError(f"forget {name!r}: name its versions, or give keep_last (how many newest to keep)")
        if versions is not None and keep_last is not None:
            raise ValueError(f"forget {name!r}: give its versions or keep_last, not both")
        if versions is not None and not versions:
            raise ValueError(f"forget {name!r}: versions is empty; name at least one")
        for version in versions or ():
            parse_ref(name, version)
    # As restic's forget: keep_last 0 would remove every version of each name by a typo. Naming them does that.
    if keep_last is not None and (isinstance(keep_last, bool) or keep_last < 1):
        raise ValueError(f"keep_last must be at least 1, not {keep_last}: to forget every version, name them")


def forget_versions(opened: Opened, wanted: Wanted, *, keep_last: int | None = None,
                    dry_run: bool = False) -> list[ArtifactRef]:
    """Remove the versions ``wanted`` selects from the store's list (``dry_run``: only say which); sorted."""
    check_request(wanted, keep_last)
    for name in wanted:  # before any lock is taken (a local name lock is a file): a typo changes nothing
        _listed(opened, name)
    with opened.forgetting(list(wanted)) as forgetter:
        chosen: list[tuple[str, int]] = []
        for name, versions in sorted(wanted.items()):
            listed = _listed(opened, name)
            if versions is None:
                assert keep_last is not None
                chosen += [(name, version) for version in listed[:-keep_last]]
                continue
            missing = sorted(set(versions) - set(listed))
            if missing:
                raise LookupError(f"{name!r} has no version {', '.join(map(str, missing))} "
                                  f"(it has {_spans(listed)}); nothing was forgotten")
            chosen += [(name, version) for version in sorted(set(versions))]
        refs = sorted(each(opened, lambda pair: _ref(opened, *pair), chosen))
        if refs and not dry_run:
            forgetter.remove(refs)
    return refs


def _listed(opened: Opened, name: str) -> list[int]:
    listed = [version for _, version in opened.versions(name)]
    if not listed:
        raise LookupError(f"no artifact named {name!r} in {opened.where}; nothing was forgotten")
    return listed


def _ref(opened: Opened, name: str, version: int) -> ArtifactRef:
    try:
        ref = opened.ref(name, version)
    except (IntegrityError, ManifestLimitError):
        # A bucket reads a manifest for its digest: one that cannot be read is still a version to let go of
        # (forget is how a broken one is removed); its digest is unknown.
        return ArtifactRef(name, version, "")
    if ref is None:
        raise LookupError(f"{name!r} version {version} vanished from {opened.where}; nothing was forgotten")
    return ref


def _spans(versions: list[int]) -> str:
    """``1-3, 7``: a name's versions, short however many there are."""
    spans: list[list[int]] = []
    for version in versions:
        if spans and version == spans[-1][1] + 1:
            spans[-1][1] = version
        else:
            spans.append([version, version])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
