"""The ``artifactkit.diagnose/1`` evidence document, sanitized so it can be committed and shared.

Evidence leaves the machine (results files, bug reports), so it carries no absolute paths, user
or host names: the document is built from relative paths and counts, and :func:`sanitize` then
replaces anything path-, user- or host-like that slipped into a message; :func:`violations` is the
guard that :func:`write_evidence` runs before anything reaches a file.
"""

from __future__ import annotations

import collections
import contextlib
import getpass
import json
import os
import platform
import pwd
import re
import shlex
import socket
import tempfile
from collections.abc import Iterable
from typing import Any, Final

import attrs

from artifactkit.trace.engine import DiagnoseResult

SCHEMA: Final = "artifactkit.diagnose/1"
#: The top-level keys, exactly as DESIGN.md lists them.
TOP_LEVEL_KEYS: Final = ("schema", "environment", "cycles", "interval_ns", "competing_reads", "checks",
                         "mismatches", "inotify", "accesses")
OBSERVATION: Final = ("interval_ns, then one complete pass of every competing reader begun after the "
                      "stage finished (so every file was read inside each window)")

# An absolute path: a slash not preceded by anything that makes it part of a relative path or word,
# nor by <work> (a command line's path inside the diagnose work tree, already relative to it).
_ABS_PATH: Final = re.compile(r"(?<![\w.~@+-])(?<!<work>)/[\w.@+~-]+(?:/[\w.@+~-]*)*")
#: A command line in the evidence: enough to see what ran, not every file a `cat` was given.
CMDLINE_CHARS: Final = 240


def to_evidence(result: DiagnoseResult) -> dict[str, Any]:
    """The sanitized evidence document for one run (also what ``diagnose --json`` prints)."""
    env = result.environment
    acc = result.accesses
    split = acc.inotify_split
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "environment": {
            "kernel": env.kernel, "machine": env.machine, "python": env.python,
            "fs_type": env.fs_type, "mount_options": list(env.mount_options), "atime_policy": env.atime_policy,
            "isolation": {"requested": env.isolation_requested, "mode": env.isolation_mode,
                          "verified_how": env.verified_how},
            "copier": env.copier, "corpus": env.corpus, "readers": env.readers,
            "engine": {"name": env.engine.name, "threads": env.engine.threads, "selected": env.engine.selected,
                       "usable": env.engine.usable, "problem": env.engine.problem},
            "observation_window": OBSERVATION,
            "run": {"cycles_requested": result.config.cycles, "failed_checks": result.failed_checks,
                    "source_atime_moved": result.source_atime_moved,
                    "duration_ms": result.duration_ns // 1_000_000},
        },
        "cycles": result.cycles_run,
        "interval_ns": result.interval_ns,
        "competing_reads": result.competing_reads,
        "checks": result.checks,
        "mismatches": aggregate_mismatches(result),
        "inotify": result.inotify.as_dict(),
        "accesses": {
            "method": acc.method,
            "self": acc.self_accesses,
            "readers": acc.reader_accesses,
            "unexplained": acc.unexplained,
            "attributed": [{"pid": item.pid, "executable": item.executable, "chain": list(item.chain),
                            "cmdline": cmdline(item.argv), "named": item.named, "complete": item.complete,
                            "events": item.events}
                           for item in acc.attributed],
            "groups": [{"chain": list(group.chain), "executable": group.executable,
                        "processes": group.processes, "events": group.events} for group in acc.groups],
            "hold": attrs.asdict(acc.hold) if acc.hold is not None else None,
            "fanotify": env.fanotify,
            "inotify_accounting": {
                "observed_opens": split.observed, "self_opens": split.self_opens,
                "reader_opens": split.reader_opens, "unexplained_lower_bound": split.unexplained,
                "unobserved": split.unobserved, "overflows": result.inotify.overflows,
                "watches_added": result.inotify.watches_added,
            },
        },
    }
    clean: dict[str, Any] = sanitize(doc)
    return clean


def cmdline(argv: Iterable[str]) -> str:
    """A command line as a shell would take it, cut at :data:`CMDLINE_CHARS` (sanitized later, with the rest)."""
    text = shlex.join(argv)
    return text if len(text) <= CMDLINE_CHARS else text[:CMDLINE_CHARS - 3] + "..."


def aggregate_mismatches(result: DiagnoseResult) -> list[dict[str, Any]]:
    """One object per (stage, tree, path, field, diagnosis): how many cycles, and the first example."""
    groups: dict[tuple[str, str, str, str, str], list[Any]] = collections.OrderedDict()
    for finding in result.findings:
        m = finding.mismatch
        key = (finding.stage, finding.tree, m.path, m.field, m.diagnosis)
        groups.setdefault(key, []).append(finding)
    out = []
    for (stage, tree, path, field, diagnosis), items in sorted(groups.items()):
        first = items[0].mismatch
        out.append({"stage": stage, "tree": tree, "path": path, "field": field, "diagnosis": diagnosis,
                    "cycles": len(items), "first_cycle": items[0].cycle, "expected": first.expected,
                    "actual": first.actual, "delta_ns": first.delta_ns})
    return out


def _user_names() -> set[str]:
    names = {os.environ.get(var, "") for var in ("USER", "LOGNAME", "SUDO_USER")}
    with contextlib.suppress(KeyError, OSError):  # no passwd entry (a container's bare uid)
        names.add(getpass.getuser())
    with contextlib.suppress(KeyError):
        names.add(pwd.getpwuid(os.getuid()).pw_name)
    return {n for n in names if n}


def _host_names() -> set[str]:
    names = {platform.node(), socket.gethostname()}
    names |= {n.split(".")[0] for n in names}
    return {n for n in names if n}


def _sensitive_words() -> list[tuple[re.Pattern[str], str]]:
    found = [(name, "<user>") for name in _user_names()] + [(name, "<host>") for name in _host_names()]
    # Longest first, so "build-host-1" is replaced before "build".
    return [(re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])"), label)
            for name, label in sorted(found, key=lambda item: -len(item[0]))]


def _clean(text: str, words: list[tuple[re.Pattern[str], str]]) -> str:
    for known, label in ((os.path.realpath(tempfile.gettempdir()), "<tmp>"), (os.path.expanduser("~"), "<home>")):
        if len(known) > 1:
            text = text.replace(known, label)
    text = _ABS_PATH.sub("<path>", text)
    for pattern, label in words:
        text = pattern.sub(label, text)
    return text


def sanitize(doc: Any, *, _words: list[tuple[re.Pattern[str], str]] | None = None) -> Any:
    """A copy of ``doc`` with absolute paths, user and host names replaced in every string."""
    words = _sensitive_words() if _words is None else _words
    if isinstance(doc, str):
        return _clean(doc, words)
    if isinstance(doc, dict):
        return {_clean(str(k), words): sanitize(v, _words=words) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [sanitize(v, _words=words) for v in doc]
    return doc


def _strings(doc: Any) -> Iterable[str]:
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for key, value in doc.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(doc, list | tuple):
        for value in doc:
            yield from _strings(value)


def violations(doc: Any) -> list[str]:
    """Every string in ``doc`` that still holds an absolute path, a user or a host name."""
    words = _sensitive_words()
    bad = []
    for text in _strings(doc):
        if _ABS_PATH.search(text) or any(pattern.search(text) for pattern, _ in words):
            bad.append(text)
    return bad


def check_schema(doc: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless ``doc`` has exactly the schema's top-level keys."""
    if doc.get("schema") != SCHEMA or set(doc) != set(TOP_LEVEL_KEYS):
        raise ValueError(f"not an {SCHEMA} document: keys {sorted(doc)}, expected {sorted(TOP_LEVEL_KEYS)}")


def dumps(doc: Any) -> str:
    """JSON text as evidence is stored: sorted keys, two-space indent, trailing newline."""
    return json.dumps(doc, sort_keys=True, indent=2) + "\n"


def write_evidence(doc: Any, path: str | os.PathLike[str]) -> None:
    """Write ``doc`` atomically to ``path`` after proving it is sanitized (``ValueError`` if not)."""
    bad = violations(doc)
    if bad:
        raise ValueError(f"refusing to write unsanitized evidence: {len(bad)} string(s) hold a path, user "
                         f"or host name, e.g. {bad[0]!r}")
    target = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".evidence-", suffix=".json", dir=os.path.dirname(target) or ".")
    try:
        os.fchmod(fd, 0o644)  # evidence is for sharing; mkstemp's 0600 would hide it from others
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dumps(doc))
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
