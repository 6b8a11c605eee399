"""The native core's interface (native/src/lib.rs): typed here so mypy checks its callers with or without a build."""

from collections.abc import Callable, Sequence
from typing import Any, Final

from artifactkit.metadata.model import FileMeta
from artifactkit.store.stage import Staged

class NativeFailure(Exception):  # noqa: N818 - the core's name: a failure as data, not an error class of the API
    """``args``: ``(kind, position in the batch, fields)``; ``artifactkit.store._native_batches`` raises from it."""

RESTORABLE_FLAGS: Final[int]
COMPARED_FLAGS: Final[int]
IN_MEMORY_LIMIT: Final[int]

class StageState:
    """What one publish's ``stage_files`` calls share: the content staged, and its listing of ``blobs/``."""

    def __init__(self, listed: frozenset[str] | set[str] | None = None) -> None: ...

def stage_files(
    root: str, txn_fd: int, blobs_fd: int, items: list[tuple[int, str, int, int, int | None, int, int]], threads: int,
    state: StageState,
) -> list[tuple[int, str, bool, int | None, list[tuple[int, int]] | None, bool]]: ...
def rename_files(src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None: ...
class ParsedTree:
    """A manifest the core parsed for a download, kept in the core (``native/src/tree.rs``)."""

    @property
    def name(self) -> str: ...
    @property
    def noatime(self) -> bool: ...
    def __len__(self) -> int: ...
    def metas(self, file_meta: Callable[..., FileMeta], indices: list[int] | None = None) -> tuple[FileMeta, ...]: ...
    def layout(self) -> tuple[list[int], list[int], list[tuple[int, int]], list[int]]: ...
    def run_metas(
        self, file_meta: Callable[..., FileMeta], group: int, start: int, stop: int,
    ) -> tuple[FileMeta, ...]: ...
    def run_bytes(self, group: int, start: int, stop: int) -> int: ...
    def needed(self) -> dict[str, int]: ...

def parse_tree(data: bytes, digest: str) -> ParsedTree: ...
def create_files(
    root_fd: int, blobs_fd: int, batch: list[tuple[str, list[tuple[Any, ...]] | tuple[int, int, int]]], threads: int,
    tree: ParsedTree | None = None, on_progress: Callable[[int, int], None] | None = None,
) -> None: ...
def parse_manifest(data: bytes, file_meta: Callable[..., FileMeta]) -> tuple[str, bool, tuple[FileMeta, ...]]: ...
def scan_tree(
    root: str, read_links: bool, on_progress: Callable[[int], None], file_meta: type[FileMeta],
) -> tuple[tuple[FileMeta, ...], dict[str, tuple[int, int]], bool]: ...
def manifest_bytes(
    head: bytes, lines: list[tuple[str, str]], entries: list[FileMeta],
    known: dict[int, tuple[str, int | None, tuple[tuple[int, int], ...] | None]], found: list[Staged], max_runs: int,
) -> bytes | None: ...
