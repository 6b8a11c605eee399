"""Hold any copy step (cp, rsync, tar, shutil, your store) to the exact-metadata rules.

For each corpus tree, :func:`check` materializes the tree as a *source* outside any flagged tree,
on a filesystem where reads provably move atime (so the copier's reads of it show), runs the copier
into a *destination* where reads move atime the same way (so its reads of its own output show too:
see :mod:`artifactkit.conformance.destination`), captures the copy ``lstat``-first without moving
anything, and sorts every difference the shared comparison finds into the checks it breaks (a
changed kind or a missing entry: every check its source entry carries):

===========================  ==================================================================
``content``                  presence, kind, size, sha256, symlink target; a failed copier run
``mode``                     permission bits ``0o777`` of every entry
``special_bits``             setuid, setgid, sticky (``0o7000``)
``mtime_ns`` / ``atime_ns``  the times of regular files
``dir_times``                both times of directories (they must be set after their children)
``symlink_times``            both times of symlinks (set with ``follow_symlinks=False``)
``survives_read``            one later read of the copy, flagged by the kit, moves no time (FUSE, lazy copies)
``source_untouched``         every field of the source after the copy equals the value before it (alias
                             ``source_atime_untouched``); a moved ctime is counted as evidence
``owner``                    uid and gid of every entry (a setuid file must keep its owner)
``xattrs``                   every xattr: ``user.*``, ``trusted.*``, ACLs, ``security.capability``
``hardlinks``                names of one inode stay one inode, and no new links appear
``sparse``                   a file's holes stay holes (``sparse-filled``, ``sparse-coarsened`` otherwise)
``inode_flags``              the compared chattr flags (``S i a d D``; ``A`` is the isolation's own)
``special_files``            kind, rdev, mode, owner and times of FIFOs and device nodes (devices only
                             where this process may make them: "not run: needs root" otherwise)
===========================  ==================================================================

Symlink atimes of the *source* are outside ``source_untouched``: ``readlink`` moves a link's
atime under relatime and strictatime and nothing but the inode flag prevents it, so every copier
that copies a link moves it (``Report.source_links_moved`` counts them, for the record).

Use it in a project's own tests, one test per corpus tree::

    import pytest
    from artifactkit import conformance

    @pytest.mark.parametrize("tree", conformance.corpus_names())
    def test_deploy_copy_preserves_metadata(tree, tmp_path):
        report = conformance.check(my_project.copy_tree, corpus=[tree], base=tmp_path)
        report.raise_for_failures()  # or: require=("content", "mode", "mtime_ns")

``my_project.copy_tree(src, dst)`` may equally be an argv template such as
``["rsync", "-a", "--atimes", "{src}/", "{dst}"]``. ``base`` must be on a filesystem where reads
move atime and ``FS_NOATIME_FL`` works (ext4, tmpfs, xfs); otherwise ``IsolationError`` says why.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Iterable, Sequence

import attrs

from artifactkit._fsutil import remove_tree
from artifactkit.conformance.classify import (
    checks_carried,
    read_first_only_where_consistent,
    rivals_settled_by_the_run,
    with_source_facts,
    with_tree_diagnoses,
)
from artifactkit.conformance.classify import destination_failures as _destination_failures
from artifactkit.conformance.classify import tagged as _tagged
from artifactkit.conformance.copiers import (
    TIMEOUT_SETTING,
    CopyFailedError,
    CopyFunction,
    NamedCopier,
    copier_timeout_s,
    excerpt,
    resolve_copier,
)
from artifactkit.conformance.copy_reads import watch_reads
from artifactkit.conformance.corpus import corpus_names, devices_left_out, load_tree, materialize, needs_root
from artifactkit.conformance.destination import flag_for_reading, private_tree, read_moves, unflagged_parent
from artifactkit.conformance.failure import Failure
from artifactkit.conformance.fifo_watch import release_blocked_fifos
from artifactkit.conformance.report import CHECKS, COPIER_FAILED, SCHEMA, CheckResult, Report
from artifactkit.conformance.source_inodes import shared_with_source
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import CopierCannotRunError, CopierSetupError, IsolationError
from artifactkit.isolation.probe import AtimeProbe, probe_atime
from artifactkit.isolation.reading import read_tree
from artifactkit.isolation.time_range import TimeRange
from artifactkit.isolation.tree import NoatimeTree
from artifactkit.metadata.compare import compare
from artifactkit.metadata.mismatch import Mismatch
from artifactkit.metadata.model import FileMeta

__all__ = ["CHECKS", "COPIER_FAILED", "SCHEMA", "CheckResult", "Failure", "Report", "check", "corpus_names"]


# -- the run -----------------------------------------------------------------------------------------

@attrs.frozen
class _TreeOutcome:
    """One tree's share of the report."""

    failures: list[Failure]
    links_moved: int
    ctimes_moved: int
    #: Why ``survives_read`` could not cover the whole copy (``None`` when it could).
    withheld: str | None
    #: The checks this tree's entries can fail by what they hold (:func:`checks_carried`).
    carried: set[str]
    #: Why ``special_files`` could not cover every device node of the tree (``None`` when it could).
    devices_withheld: str | None = None
    #: Why the copy's reads were not watched (``None`` when they were): the diagnoses then rest on times alone.
    unwatched: str | None = None


def _check_one(copier: NamedCopier, corpus: str, src_parent: str, tree: NoatimeTree,
               dst_parent: str, *, time_range: TimeRange | None) -> _TreeOutcome:
    """Copy one tree and check it; a time naming a range end gets the end ``time_range`` measured."""
    src = os.path.join(src_parent, corpus)
    dst = os.path.join(dst_parent, corpus)
    unholdable: dict[str, str] = {}
    expected = with_source_facts(materialize(corpus, src, left_out=unholdable, time_range=time_range), src)
    failures: list[Failure] = []
    timeout_s = copier_timeout_s()
    fifos = [path for path, meta in expected.items() if meta.kind == "fifo" and meta.hardlink is None]
    try:
        with release_blocked_fifos(src, fifos, timeout_s=timeout_s) as watch, watch_reads(dst_parent) as reads:
            copier(src, dst)
    except CopierSetupError:
        raise  # a named adapter that cannot run on this tree: no verdict for it, never a row of passes
    except Exception as err:
        if not os.path.lexists(dst):
            # It never produced {dst}: nothing was copied, so no check ran. A setup error, in full.
            text = err.detail if isinstance(err, CopyFailedError) else f"{type(err).__name__}: {err}"
            if isinstance(err, subprocess.CalledProcessError) and isinstance(err.stderr, str) and err.stderr.strip():
                text += "\n" + err.stderr.rstrip()  # what the tool said is the reason, not its exit status
            if watch.released:  # first: it is why the run took the limit, and what the copier did before failing
                text = f"{_blocked(watch.released, timeout_s)}; then {text}"
            detail = text.replace(dst, "{dst}").replace(src, "{src}")
            raise CopierCannotRunError(
                f"copier {copier.label} cannot run: it failed before creating {{dst}} (corpus tree "
                f"{corpus!r}), so no check ran:\n{detail}", copier=copier.label, corpus=corpus, detail=detail,
            ) from err
        # Not a setup error: record it, then inspect whatever the copier left behind.
        failures.append(_copier_failed(err, corpus, src, dst))
    if watch.released:
        failures.append(_copier_failed(CopyFailedError(_blocked(watch.released, timeout_s)), corpus, src, dst))
    carries = checks_carried(expected.values())
    devices = "; ".join(filter(None, [devices_left_out(corpus), *(
        f"not run on {path} of {corpus}: {why}" for path, why in sorted(unholdable.items()))])) or None
    # Both sides' times before the kit reads a link on either: a copy that is the source's own inode (a hard
    # link) shares its atime, and the kit's readlink of one moves the other's (never the copier's doing).
    source_times = capture_tree(src, hash_content=False, read_links=False) if os.path.lexists(src) else None
    # The copy as the copier left it: lstat first, content hashed with O_NOATIME, so that whatever moved
    # a time there was the copier (its own reads of its output included), never this capture.
    before = capture_tree(dst) if os.path.lexists(dst) else None
    source_failures, source_after, links_moved, ctimes_moved = _source_untouched(corpus, src, expected,
                                                                                source_times)
    failures += source_failures
    unwatched = None if reads.watched and reads.complete else reads.why or "fanotify lost events"
    if before is None:
        failures += _destination_failures(corpus, expected, compare(expected, []))
        return _TreeOutcome(failures, links_moved, ctimes_moved, None, carries, devices, unwatched)
    actual = {m.path: m for m in before}
    rivals: dict[tuple[str, str], tuple[str, ...]] = {}
    seen = reads.evidence(dst, before)  # lstat and statx alone: nothing of the copy moves
    found = with_tree_diagnoses(compare(expected, actual), expected, actual, source_after, rivals, seen=seen)
    found += shared_with_source(src, expected, dst, actual)
    failures += _destination_failures(corpus, expected, found, actual, rivals)
    # survives_read: the kit's own flag on the copy, whatever flags the copier restored, then one read.
    refused = flag_for_reading(tree, dst, before)
    # The baseline is taken after the flags and after our own capture: a hash read that could not use
    # O_NOATIME (a file neither ours nor CAP_FOWNER's) is then never charged to the copier.
    settled = capture_tree(dst, hash_content=False, read_links=False)
    read_tree(dst)
    after = capture_tree(dst, hash_content=False, read_links=False)
    failures += _tagged("survives_read", corpus, read_moves(settled, after, refused))
    withheld = None
    if refused:
        shown = ", ".join(f"{path}: {why}" for path, why in sorted(refused.items())[:3])
        withheld = f"not run on {len(refused)} entr{'y' if len(refused) == 1 else 'ies'} of {corpus} ({shown})"
    return _TreeOutcome(failures, links_moved, ctimes_moved, withheld, carries, devices, unwatched)


def _blocked(released: list[str], timeout_s: float) -> str:
    return (f"timed out after {timeout_s:g} s blocked opening FIFO(s) {', '.join(released)} as files; the kit "
            f"released each by opening it for writing once ({TIMEOUT_SETTING} sets the limit)")


def _source_untouched(corpus: str, src: str, expected: dict[str, FileMeta], times: list[FileMeta] | None,
                      ) -> tuple[list[Failure], dict[str, FileMeta], int, int]:
    """Every field of the source after the copy against the values supplied (and the facts read before it).

    ``times`` is the lstat-only capture taken before the kit read anything on either side; content and link
    targets are read afterwards (without moving a file's atime), the times kept from ``times``. Link atimes
    are left out and counted: ``readlink`` moves them and nothing but the inode flag prevents it. A moved
    ctime is counted as evidence of a metadata write, never failed by itself.
    """
    stamped = {m.path: m for m in times or ()}
    now = {m.path: attrs.evolve(m, atime_ns=stamped[m.path].atime_ns) if m.path in stamped else m
           for m in (capture_tree(src) if times is not None else ())}
    links = {path for path, meta in expected.items() if meta.kind == "symlink"}
    links_moved = sum(1 for p in links if p in now and now[p].atime_ns != expected[p].atime_ns)
    ctimes_moved = sum(1 for p, meta in expected.items() if p in now and now[p].ctime_ns != meta.ctime_ns)
    found = [m for m in compare(expected, now) if not (m.path in links and m.field == "atime_ns")]
    return _tagged("source_untouched", corpus, found), now, links_moved, ctimes_moved


def _copier_failed(err: Exception, corpus: str, src: str, dst: str) -> Failure:
    """The table gets one readable line; the JSON report the full command and the whole stderr."""
    def clean(text: str) -> str:
        return text.replace(dst, "{dst}").replace(src, "{src}")
    if isinstance(err, CopyFailedError):
        cell, command, stderr = str(err), err.command, err.stderr
    else:
        cell = f"{type(err).__name__}: {excerpt(clean(str(err)))}"
        command, stderr = None, "".join(traceback.format_exception_only(err))  # no frames: no paths
        if isinstance(err, subprocess.CalledProcessError):
            command = shlex.join(map(str, err.cmd)) if isinstance(err.cmd, list | tuple) else str(err.cmd)
            stderr = err.stderr if isinstance(err.stderr, str) else stderr
    mismatch = Mismatch(".", "copier", None, clean(cell), COPIER_FAILED)
    return Failure("content", corpus, mismatch, None if command is None else clean(command),
                   None if stderr is None else clean(stderr))


def _environment(source: AtimeProbe, tree: NoatimeTree, unwatched: str | None) -> dict[str, str]:
    # Sanitized evidence: filesystem facts and versions, never a path, user or host name.
    return {
        "kernel": platform.release(),
        "python": platform.python_version(),
        "source_fs": f"{source.fs_type} ({source.atime_policy})",
        "destination_fs": f"{tree.probe.fs_type} ({tree.probe.atime_policy})",
        "isolation": tree.mode,
        "isolation_verified_how": tree.verified_how,
        # Where the copier wrote: reads there behave as on the filesystem under test (issue 25).
        "copier_destination": ("no inherited FS_NOATIME_FL, a read there moved a historical atime; the kit "
                               "sets the flag on the copy itself before survives_read" if tree.mode == "flag"
                               else "a noatime mount: reads move no atime there, for the copier or the kit"),
        # Whether a read of the copy's inodes during the copy was seen (a read and a time set to "now" differ).
        "copy_reads": "watched with fanotify" if unwatched is None else f"not watched: {unwatched}",
    }


def _refusal(err: CopierSetupError, src: str, dst: str) -> str:
    """The "not run" reason of a tree the copier refused: one sanitized line, the full story in the error."""
    detail = err.context.get("detail")
    stderr = err.context.get("stderr")
    if isinstance(detail, str):  # CopierCannotRunError: the failure before {dst}, already sanitized
        text = f"the copier failed before creating {{dst}}: {excerpt(detail, limit=300)}"
    else:
        text = excerpt(f"{err}\n{stderr}" if isinstance(stderr, str) else str(err), limit=300)
    return "not run: " + text.replace(dst, "{dst}").replace(src, "{src}")


def _row(name: str, failures: tuple[Failure, ...], *, none_ran: str | None, partly: str | None,
         carried: set[str], names: list[str], not_run: dict[str, str]) -> CheckResult:
    """A check's row. A check no tree that ran can fail by what it holds has no verdict: ``None`` with the
    reason, naming the trees that would have held it and why they did not run (issue 50: no pass on a tree
    that never ran)."""
    if none_ran is not None:
        return CheckResult(name, failures, none_ran, ran=False)
    if failures or name in carried:
        return CheckResult(name, failures, partly)
    checked = [tree for tree in names if tree not in not_run]
    reason = f"not run: no tree checked here holds what it checks (checked: {', '.join(checked) or 'none'})"
    behind = [f"{tree}: {why}" for tree, why in not_run.items() if name in checks_carried(load_tree(tree).entries)]
    return CheckResult(name, failures, "; ".join([reason, *behind]), ran=False)


def check(copier: str | Sequence[str] | CopyFunction | NamedCopier, corpus: str | Iterable[str] | None = None,
          *, base: str | os.PathLike[str] | None = None,
          source_base: str | os.PathLike[str] | None = None,
          progress: Callable[[str], None] | None = None, raise_if_none_ran: bool = True) -> Report:
    """Run ``copier`` over each corpus tree (default: all) and report every check.

    ``copier`` is ``f(src, dst)``, an argv template with ``{src}``/``{dst}``, or a string
    :func:`artifactkit.conformance.copiers.resolve_copier` accepts; ``dst`` does not exist before the copy.
    Destinations live in an unflagged directory of a verified private noatime tree under ``base``
    (default: the temp dir), where reads move atime as on that filesystem;
    sources under ``source_base`` (default: ``base``), which must be a filesystem where reads move
    atime. Raises :class:`IsolationError` when either condition cannot be met. A tree the copier
    refuses (it fails before creating ``dst``: :class:`CopierCannotRunError`, or a named adapter's
    :class:`CopierSetupError`) is "not run" with the reason, and every other tree is still checked;
    only when no tree at all could be checked is the first refusal raised (``raise_if_none_ran=False``
    returns the report instead, its ``refusals`` holding the errors). Check failures are in the report,
    never raised (see :meth:`Report.raise_for_failures`). A tree this process cannot read back (a
    mode-000 file without root) is not run either: ``Report.not_run`` says so, neither pass nor failure.
    """
    named = resolve_copier(copier)
    names = corpus_names() if corpus is None else [corpus] if isinstance(corpus, str) else list(corpus)
    dst_base = os.fspath(base) if base is not None else tempfile.gettempdir()
    src_base = os.fspath(source_base) if source_base is not None else dst_base
    source_probe = probe_atime(src_base)
    if not source_probe.reads_move_historical_atime:
        raise IsolationError(
            f"conformance needs a source filesystem where reads move atime, so a copier's reads show; "
            f"{source_probe.fs_type} under the source base has policy {source_probe.atime_policy}"
            f"{' (or an inherited FS_NOATIME_FL)' if source_probe.atime_policy == 'noatime' else ''}; "
            "remedy: pass a source base on a relatime or strictatime filesystem outside any flagged tree",
            fs_type=source_probe.fs_type, failed="source-atime")
    failures: list[Failure] = []
    links_moved = ctimes_moved = 0
    not_run = {name: reason for name in names if (reason := needs_root(name))}
    refusals: list[CopierSetupError] = []
    withheld: list[str] = []
    devices_withheld: list[str] = []
    carried: set[str] = set()
    unwatched: str | None = None
    with private_tree(dst_base, source_probe) as tree:
        dst_parent = unflagged_parent(tree)
        # The corpus's range ends are what both hold: a time the destination cannot hold is no copier's fault.
        ends = (source_probe.time_range, tree.probe.time_range)
        time_range = ends[0] & ends[1] if ends[0] is not None and ends[1] is not None else None
        src_parent = tempfile.mkdtemp(prefix="artifactkit-conformance-src-", dir=src_base)
        try:
            for name in names:
                if name in not_run:
                    continue
                if progress is not None:
                    progress(name)
                src, dst = os.path.join(src_parent, name), os.path.join(dst_parent, name)
                try:
                    outcome = _check_one(named, name, src_parent, tree, dst_parent, time_range=time_range)
                except CopierSetupError as err:
                    # One tree refused (a link type the tool lacks, a name it cannot store): that tree
                    # has no verdict, the others still get theirs.
                    not_run[name] = _refusal(err, src, dst)
                    refusals.append(err)
                else:
                    failures += outcome.failures
                    links_moved += outcome.links_moved
                    ctimes_moved += outcome.ctimes_moved
                    carried |= outcome.carried
                    unwatched = unwatched or outcome.unwatched
                    if outcome.withheld is not None:
                        withheld.append(outcome.withheld)
                    if outcome.devices_withheld is not None:
                        devices_withheld.append(outcome.devices_withheld)
                remove_tree(src, ignore_errors=True)
                remove_tree(dst, ignore_errors=True)
        finally:
            remove_tree(src_parent, ignore_errors=True)
        environment = _environment(source_probe, tree, unwatched)
    ordered = tuple((name, not_run[name]) for name in names if name in not_run)
    none_ran = "; ".join(sorted({f"{name}: {why}" for name, why in ordered})) if len(ordered) == len(names) else None
    failures = rivals_settled_by_the_run(read_first_only_where_consistent(failures))
    partly = {"survives_read": "; ".join(withheld)} if withheld else {}
    if devices_withheld:
        partly["special_files"] = "; ".join(devices_withheld)
    rows = tuple(_row(name, tuple(f for f in failures if f.check == name), none_ran=none_ran,
                      partly=partly.get(name), carried=carried, names=names, not_run=not_run) for name in CHECKS)
    report = Report(named.label, tuple(names), rows, environment, links_moved, ctimes_moved, ordered,
                    tuple(refusals))
    if refusals and not report.checked and raise_if_none_ran:
        raise refusals[0]
    return report
