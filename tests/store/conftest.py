"""The store suite's fixtures: ``any_store`` runs one test body on a local directory and on a real S3 server."""

from __future__ import annotations

from tests.support.stores import any_store, local_store_dir

__all__ = ["any_store", "local_store_dir"]
