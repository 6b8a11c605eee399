"""Errors carry their context as attributes, subclass the fitting builtin, and pickle cleanly."""

from __future__ import annotations

import pickle

import pytest

import artifactkit
from artifactkit import errors

LEAVES = [errors.UnsupportedFileType, errors.UnsafePathError, errors.IntegrityError, errors.SourceChangedError,
          errors.TimestampNotRepresentable, errors.IsolationError, errors.NotInPrivateTreeError,
          errors.MetadataMismatchError, errors.CopierSetupError, errors.ToolMissingError, errors.ToolFailedError,
          errors.NotAStoreError, errors.CopierCannotRunError, errors.StoreNotConfiguredError]


@pytest.mark.parametrize("cls", LEAVES)
def test_every_error_pickles_with_message_and_context(cls: type[errors.ArtifactkitError]) -> None:
    err = cls("what happened and the remedy", path="a/b", expected=1, actual=2)
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is cls and str(clone) == str(err)
    assert (clone.path, clone.expected, clone.actual) == ("a/b", 1, 2)
    assert isinstance(clone, errors.ArtifactkitError) and cls.__doc__


def test_leaves_subclass_the_builtins_callers_already_catch() -> None:
    assert issubclass(errors.MetadataMismatchError, AssertionError)
    assert issubclass(errors.UnsafePathError, ValueError)
    assert issubclass(errors.NotInPrivateTreeError, PermissionError)
    assert issubclass(errors.ToolMissingError, FileNotFoundError)
    assert issubclass(errors.NotAStoreError, FileNotFoundError)


def test_the_public_face_only_reexports_a_sorted_all() -> None:
    assert artifactkit.__all__ == sorted(artifactkit.__all__)
    assert all(hasattr(artifactkit, name) for name in artifactkit.__all__)


def test_a_note_survives_pickling() -> None:
    err = errors.IntegrityError("corrupt", path="p")
    err.add_note("the private directory was also swapped")
    clone = pickle.loads(pickle.dumps(err))
    assert clone.__notes__ == ["the private directory was also swapped"] and clone.context == {"path": "p"}
