//! `artifactkit._native`: a publish's scan, the execute stage's per-file work and the manifest's encoding and
//! parse, for whole trees and batches, the GIL released. Python keeps the API, the policy and the messages.
//!
//! The crate's rooms mirror the Python ones they serve, and use each other one way (`tests/test_house_crate.py`):
//!
//! - `py/`: the door — the `#[pymodule]`, every class and function Python calls, the conversions, and the
//!   mapping of every failure to `NativeFailure(kind, position, fields)`; the only PyO3 code. It uses every room
//!   below; none uses it.
//! - `scan/`: a publish's scan (`artifactkit/engine/reference/scan.py`).
//! - `read/`: a file's content read, hashed, staged, copied and checked (`engine/content.py`, `engine/reference/stage.py`, `engine/blob_check.py`).
//! - `manifest/`: the manifest encoded and parsed as the reference does (`artifactkit/store/manifest*.py`).
//! - `restore/`: a download's create and the metadata it restores (`engine/reference/create.py`, `restore_meta.py`).
//! - `sys/`: every raw call (the only `unsafe`), the threads, the pool, a batch's cancellation.
//! - `failure.rs`: what can go wrong, as data; `entry_kind.rs`: the kinds of entry an artifact holds.

mod entry_kind;
mod failure;
mod manifest;
mod py;
mod read;
mod restore;
mod scan;
mod sys;
