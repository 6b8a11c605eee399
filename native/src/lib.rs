//! `artifactkit._native`: a publish's scan, the execute stage's per-file work and the manifest's encoding, for
//! whole trees and batches, the GIL released.
//!
//! Python types are converted here, at the edge, and only here (and in `manifest_edge.rs`, this edge's part
//! for the manifest's values); every failure leaves as `NativeFailure(kind, at, fields)`, which
//! `artifactkit/store/_native_batches.py` (`_native_scan.py`, `_native_manifest.py`) turns into the class and
//! message the reference engine raises. Python keeps the API, the policy and the messages.

mod entry_kind;
mod failure;
mod manifest;
mod py;
mod read;
mod restore;
mod scan;
mod sys;
