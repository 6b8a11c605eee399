//! `artifactkit._native`: a publish's scan, the execute stage's per-file work and the manifest's encoding, for
//! whole trees and batches, the GIL released.
//!
//! Python types are converted here, at the edge, and only here (and in `manifest_edge.rs`, this edge's part
//! for the manifest's values); every failure leaves as `NativeFailure(kind, at, fields)`, which
//! `artifactkit/store/_native_batches.py` (`_native_scan.py`, `_native_manifest.py`) turns into the class and
//! message the reference engine raises. Python keeps the API, the policy and the messages.

mod captured_tree;
mod create_files;
mod failure;
mod file_metas;
mod ints;
mod manifest_bytes;
mod parse_manifest;
mod parsed_tree;
mod paths;
mod scan_tree;
mod stage;

use pyo3::prelude::*;

use failure::NativeFailure;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NativeFailure", m.py().get_type::<NativeFailure>())?;
    m.add("RESTORABLE_FLAGS", crate::restore::metadata::RESTORABLE_FLAGS)?;
    m.add("COMPARED_FLAGS", crate::restore::metadata::COMPARED_FLAGS)?;
    m.add("IN_MEMORY_LIMIT", crate::read::stage::IN_MEMORY_LIMIT)?;
    m.add_class::<stage::StageState>()?;
    m.add_function(wrap_pyfunction!(stage::stage_files, m)?)?;
    m.add_function(wrap_pyfunction!(stage::rename_files, m)?)?;
    m.add_function(wrap_pyfunction!(stage::rename_staged, m)?)?;
    m.add_class::<parsed_tree::ParsedTree>()?;
    m.add_function(wrap_pyfunction!(create_files::create_files, m)?)?;
    m.add_function(wrap_pyfunction!(parsed_tree::parse_tree, m)?)?;
    m.add_function(wrap_pyfunction!(parse_manifest::parse_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(scan_tree::scan_tree, m)?)?;
    m.add_class::<captured_tree::CapturedTree>()?;
    m.add_function(wrap_pyfunction!(captured_tree::capture_tree, m)?)?;
    m.add_function(wrap_pyfunction!(stage::stage_captured, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_bytes::manifest_captured, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_bytes::manifest_bytes, m)?)?;
    Ok(())
}
