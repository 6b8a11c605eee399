"""The native core's layout of a download (:meth:`artifactkit.engine.native.CoreTree.own_layout`) held to the
reference's (:func:`artifactkit.engine.reference.lists.lay_out` of
:func:`artifactkit.engine.reference.restore_meta.plan`'s entries): where it is taken it is the reference's, field
for field and in order; where it is declined, the reference's plan refuses, warns or changes an entry.

:func:`held_layout` runs wherever ``tests/support/both_parses.py`` sees the core accept a manifest: on every
generated and hostile manifest of the parse suites.
"""

from __future__ import annotations

import hashlib
import warnings

from artifactkit.engine.reference.lists import lay_out
from artifactkit.engine.reference.restore_meta import OWNER_POLICIES, plan
from artifactkit.engine.values import Layout
from artifactkit.errors import NotRestorableError
from artifactkit.metadata.model import FIELD_ORDER, SPECIAL_KINDS, FileMeta
from artifactkit.store.manifest import Manifest
from artifactkit.store.manifest_limits import SIZE_LIMIT, file_size_limit


def _row(entry: FileMeta) -> tuple[object, ...]:
    return tuple(getattr(entry, field) for field in FIELD_ORDER)


def rows(layout: Layout) -> tuple[object, ...]:
    """Every field of every entry of ``layout``, ``ctime_ns`` and ``nlink`` too, in its order; the entries made in
    a directory as the native executor makes them, files and symlinks (by the core) apart from FIFOs and devices
    (by ``create_special``), each in manifest order."""
    made: dict[str, tuple[list[object], list[object]]] = {}
    for path, entries in layout.items:
        core, special = made.setdefault(path, ([], []))
        for entry in entries:
            (special if entry.kind in SPECIAL_KINDS else core).append(_row(entry))
    return ([(path, _row(entry)) for path, entry in layout.dirs.items()], list(made.items()),
            [_row(entry) for entry in layout.late])


def held_layout(data: bytes, expected: Manifest) -> None:
    """The core's layout of ``data`` (which the reference reads as ``expected``) under every owners policy."""
    from artifactkit import _native  # here: where the core is not built, nothing calls this
    from artifactkit.engine.native import CoreTree

    limit = min(file_size_limit(), SIZE_LIMIT)  # as the native engine gives it
    tree = CoreTree(_native.parse_tree(data, hashlib.sha256(data).hexdigest(), limit))
    for owners in OWNER_POLICIES:
        found = tree.own_layout(owners)
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            try:
                planned = plan(expected.entries, owners)
            except NotRestorableError:
                assert found is None, f"the core lays out what the plan refuses ({owners})"
                continue
        changed = [e.path for e in expected.entries if planned[e.path] != e or _row(planned[e.path]) != _row(e)]
        if warned or changed:
            assert found is None, f"the core lays out what the plan changes ({owners}): {changed}"
        else:
            assert found is not None, f"the core declines a layout the plan leaves as it is ({owners})"
            assert rows(found) == rows(lay_out(planned.values())), owners
