"""The conformance report: one :class:`CheckResult` per check, the trees that ran and why others did not,
and the ``artifactkit.conformance/1`` JSON document."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import attrs

from artifactkit.conformance.failure import Failure
from artifactkit.errors import CopierSetupError, MetadataMismatchError
from artifactkit.metadata.compare import format_mismatches

SCHEMA: Final = "artifactkit.conformance/1"
CHECKS: Final = ("content", "mode", "special_bits", "mtime_ns", "atime_ns", "dir_times", "symlink_times",
                 "survives_read", "source_untouched", "owner", "xattrs", "hardlinks", "sparse", "inode_flags",
                 "special_files")
#: Former names still accepted wherever checks are required (``--require``, :meth:`Report.holds`): the source
#: check watched atime only until issue 25, and scripts name it so.
ALIASES: Final = {"source_atime_untouched": "source_untouched"}
COPIER_FAILED: Final = "copier-failed"


@attrs.frozen
class CheckResult:
    """One row of the report: a check and every failure attributed to it (none means it held)."""

    check: str
    failures: tuple[Failure, ...] = ()
    #: Set when the check ran on no tree at all (e.g. every tree asked for needs root): passed is None.
    reason: str | None = None
    #: False when no tree that ran holds what this check covers: no verdict, and requiring it fails.
    #: (A check run on part of what it covers, such as FIFOs without the device nodes, ran.)
    ran: bool = True

    @property
    def passed(self) -> bool | None:
        if self.failures:
            return False
        return None if self.reason else True

    @property
    def diagnosis(self) -> str | None:
        """The first failure's headline, or ``None`` when the check held."""
        return self.failures[0].headline() if self.failures else None

    def to_json(self) -> dict[str, Any]:
        """``{"check", "passed", "diagnosis", "reason", "failures"}``; failures grouped by corpus, field and
        diagnosis (a 1,000-file tree must not make a 1,000-entry list), each with its first case."""
        groups: dict[tuple[str, str, str], list[Failure]] = {}
        for failure in self.failures:
            groups.setdefault((failure.corpus, failure.field, failure.diagnosis), []).append(failure)
        return {
            "check": self.check,
            "passed": self.passed,
            "diagnosis": self.diagnosis,
            "reason": self.reason,
            "ran": self.ran,
            "failures": [
                {"corpus": corpus, "field": field, "diagnosis": diagnosis, "count": len(items),
                 "path": items[0].path, "expected": items[0].expected, "actual": items[0].actual,
                 "delta_ns": items[0].delta_ns,
                 **({"command": items[0].command, "stderr": items[0].stderr} if diagnosis == COPIER_FAILED else {})}
                for (corpus, field, diagnosis), items in groups.items()
            ],
        }


@attrs.frozen
class Report:
    """The outcome of :func:`check`: one :class:`CheckResult` per name in :data:`CHECKS`, in order."""

    copier: str
    corpus: tuple[str, ...]
    checks: tuple[CheckResult, ...]
    environment: dict[str, str] = attrs.field(eq=False)
    source_links_moved: int = 0
    #: Source entries whose ctime moved during the copy: evidence that the copier wrote the source's metadata
    #: (a ctime cannot be restored, so it is noted, never a failure by itself).
    source_ctimes_moved: int = 0
    #: (tree, reason) for every corpus tree that could not be run here, e.g. ``"not run: needs root"``.
    not_run: tuple[tuple[str, str], ...] = ()
    #: The copier's refusals (a setup error on one tree), in tree order: their trees are in ``not_run``.
    refusals: tuple[CopierSetupError, ...] = attrs.field(default=(), eq=False, repr=False)

    @property
    def checked(self) -> tuple[str, ...]:
        """The corpus trees that were copied and checked."""
        skipped = dict(self.not_run)
        return tuple(name for name in self.corpus if name not in skipped)

    def result(self, name: str) -> CheckResult:
        for item in self.checks:
            if item.check == name:
                return item
        raise KeyError(f"no check {name!r}; checks: {', '.join(CHECKS)}")

    @property
    def failed(self) -> frozenset[str]:
        """Names of the checks that failed."""
        return frozenset(item.check for item in self.checks if item.passed is False)

    @property
    def passed(self) -> bool:
        """Whether every check held (a property, so ``assert report.passed`` means what it says)."""
        return not self.failed

    @property
    def not_checked(self) -> frozenset[str]:
        """Names of the checks no tree that ran could exercise (``passed`` is ``None``, ``ran`` false)."""
        return frozenset(item.check for item in self.checks if not item.ran)

    def holds(self, require: Iterable[str] | None = None) -> bool:
        """Whether every check in ``require`` held; a required check that ran on no tree did not.

        ``None`` (the default) requires every check that ran.
        """
        if require is None:
            return not self.failed
        wanted = set(validated(require))
        return not (self.failed & wanted) and not (self.not_checked & wanted)

    def raise_for_failures(self, require: Iterable[str] | None = None) -> None:
        """Raise the shared :class:`MetadataMismatchError` listing every failure of a required check, and
        every required check that ran on no tree (``None``, the default: every check that ran)."""
        wanted = set(CHECKS if require is None else validated(require))
        found = [f.to_mismatch() for item in self.checks if item.check in wanted for f in item.failures]
        unrun = [] if require is None else [item for item in self.checks if item.check in wanted and not item.ran]
        if found or unrun:
            stage = f"conformance of {self.copier}"
            lines = [f"required check {item.check}: {item.reason}" for item in unrun]
            if found:
                lines.append(format_mismatches(found, stage=stage))
            raise MetadataMismatchError("\n".join(lines), stage=stage, mismatches=found)

    def to_json(self) -> dict[str, Any]:
        """The ``artifactkit.conformance/1`` document (sanitized: no absolute paths, user or host)."""
        return {
            "schema": SCHEMA,
            "copier": self.copier,
            "corpus": list(self.corpus),
            "environment": dict(self.environment),
            "passed": self.passed,
            "source_links_moved": self.source_links_moved,
            "source_ctimes_moved": self.source_ctimes_moved,
            "checks": [item.to_json() for item in self.checks],
            "corpora": [self._tree_json(name) for name in self.corpus],
        }

    def _tree_json(self, name: str) -> dict[str, Any]:
        reason = dict(self.not_run).get(name)
        failed = any(f.corpus == name for item in self.checks for f in item.failures)
        return {"corpus": name, "passed": None if reason else not failed, "reason": reason}


def validated(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` with each alias replaced by its check, or ``ValueError`` naming the unknown ones."""
    wanted = tuple(ALIASES.get(name, name) for name in names)
    unknown = sorted(set(wanted) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; checks: {', '.join(CHECKS)} "
                         f"(and {', '.join(f'{old} for {new}' for old, new in ALIASES.items())})")
    return wanted


