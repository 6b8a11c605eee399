//! `artifactkit._native`: a publish's scan, the execute stage's per-file work and the manifest's encoding, for
//! whole trees and batches, the GIL released.
//!
//! Python types are converted here, at the edge, and only here (and in `manifest_edge.rs`, this edge's part
//! for the manifest's values); every failure leaves as `NativeFailure(kind, at, fields)`, which
//! `artifactkit/engine/native_errors.py` (`_native_scan.py`, `_native_manifest.py`) turns into the class and
//! message the reference engine raises. Python keeps the API, the policy and the messages.

mod blob_check;
mod cancel;
mod captured;
mod content;
mod copy;
mod copy_hashed;
mod error;
mod ints;
mod kind;
mod manifest;
mod manifest_body;
mod manifest_edge;
mod manifest_parse;
mod manifest_parse_edge;
mod moves;
mod pool;
mod restore;
mod restore_edge;
mod restore_meta;
mod scan;
mod scan_dir;
mod scan_edge;
mod scan_split;
mod stage_edge;
mod syscalls;
mod tally;
mod threads;
mod tree;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use error::{Failure, Located, StatFacts};

create_exception!(_native, NativeFailure, PyException, "A batch failed: (kind, position, fields).");

/// `os.stat_result`'s 19 fields, so Python can rebuild the very `lstat` the read-back saw.
fn stat_tuple(py: Python<'_>, f: &StatFacts) -> PyResult<Py<PyTuple>> {
    let secs = |ns: i128| ns.div_euclid(1_000_000_000);
    let float = |ns: i128| ns as f64 / 1e9;
    let head =
        (f.mode, f.ino, f.dev, f.nlink, f.uid, f.gid, f.size, secs(f.atime_ns), secs(f.mtime_ns), secs(f.ctime_ns));
    let tail = (
        float(f.atime_ns),
        float(f.mtime_ns),
        float(f.ctime_ns),
        f.atime_ns,
        f.mtime_ns,
        f.ctime_ns,
        f.blksize,
        f.blocks,
        f.rdev,
    );
    let mut items: Vec<Bound<'_, PyAny>> = head.into_pyobject(py)?.iter().collect();
    items.extend(tail.into_pyobject(py)?.iter());
    Ok(PyTuple::new(py, items)?.unbind())
}

pub(crate) fn failure_to_py(py: Python<'_>, located: Located) -> PyErr {
    let fields = PyDict::new(py);
    let kind = match fill(py, &fields, located.failure) {
        Ok(kind) => kind,
        Err(err) => return err,
    };
    NativeFailure::new_err((kind, located.at, fields.unbind()))
}

fn fill(py: Python<'_>, d: &Bound<'_, PyDict>, failure: Failure) -> PyResult<&'static str> {
    Ok(match failure {
        Failure::Os { errno, filename, filename2 } => {
            d.set_item("errno", errno)?;
            d.set_item("filename", filename)?;
            d.set_item("filename2", filename2)?;
            "os"
        }
        Failure::SourceSymlink { path } => {
            d.set_item("path", path)?;
            "source_symlink"
        }
        Failure::SourceChanged { path, when, found } => {
            d.set_item("path", path)?;
            d.set_item("when", when)?;
            d.set_item("stat", stat_tuple(py, &found)?)?;
            "source_changed"
        }
        Failure::SourceLength { path, count } => {
            d.set_item("path", path)?;
            d.set_item("count", count)?;
            "source_length"
        }
        Failure::Blob { what, sha, path, actual_size, actual_sha } => {
            d.set_item("what", what)?;
            d.set_item("sha", sha)?;
            d.set_item("path", path)?;
            d.set_item("actual_size", actual_size)?;
            d.set_item("actual_sha", actual_sha)?;
            "blob"
        }
        Failure::Xattrs { path, errno } => {
            d.set_item("path", path)?;
            d.set_item("errno", errno)?;
            "xattrs"
        }
        Failure::Flags { path, errno } => {
            d.set_item("path", path)?;
            d.set_item("errno", errno)?;
            "flags"
        }
        Failure::ReadBack { xattrs, flags } => {
            let xattrs =
                xattrs.map(|x| x.into_iter().map(|(n, v)| (n, PyBytes::new(py, &v).unbind())).collect::<Vec<_>>());
            d.set_item("xattrs", xattrs)?;
            d.set_item("flags", flags)?;
            "read_back"
        }
        Failure::Verify { wrong } => {
            let wrong = wrong.iter().map(|(at, f)| Ok((*at, stat_tuple(py, f)?))).collect::<PyResult<Vec<_>>>()?;
            d.set_item("wrong", wrong)?;
            "verify"
        }
        Failure::ScanRoot => "scan_root",
        Failure::DirReplaced { rel, when } => {
            d.set_item("rel", rel)?;
            d.set_item("when", when)?;
            "dir_replaced"
        }
        Failure::Vanished { gone, name } => {
            d.set_item("gone", gone)?;
            d.set_item("name", name)?;
            "vanished"
        }
        Failure::LinkChanged { path } => {
            d.set_item("path", path)?;
            "link_changed"
        }
        Failure::BadTarget { path, target } => {
            d.set_item("path", path)?;
            d.set_item("target", target)?;
            "bad_target"
        }
        Failure::Unsupported { paths } => {
            d.set_item("paths", paths)?;
            "unsupported"
        }
        Failure::TooManyRuns { count } => {
            d.set_item("count", count)?;
            "too_many_runs"
        }
        Failure::Stopped => "stopped",
    })
}

pub(crate) fn bytes_of(s: OsString) -> Vec<u8> {
    s.into_vec()
}

/// Bytes as `os.fsdecode` makes a `str` of them (PyO3 decodes with the filesystem encoding's handler).
pub(crate) fn fs_str<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    Ok(OsStr::from_bytes(bytes).into_pyobject(py)?.into_any())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NativeFailure", m.py().get_type::<NativeFailure>())?;
    m.add("RESTORABLE_FLAGS", restore_meta::RESTORABLE_FLAGS)?;
    m.add("COMPARED_FLAGS", restore_meta::COMPARED_FLAGS)?;
    m.add("IN_MEMORY_LIMIT", content::IN_MEMORY_LIMIT)?;
    m.add_class::<stage_edge::StageState>()?;
    m.add_function(wrap_pyfunction!(stage_edge::stage_files, m)?)?;
    m.add_function(wrap_pyfunction!(stage_edge::rename_files, m)?)?;
    m.add_function(wrap_pyfunction!(stage_edge::rename_staged, m)?)?;
    m.add_class::<restore_edge::ParsedTree>()?;
    m.add_function(wrap_pyfunction!(restore_edge::create_files, m)?)?;
    m.add_function(wrap_pyfunction!(restore_edge::parse_tree, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_parse_edge::parse_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(scan_edge::scan_tree, m)?)?;
    m.add_class::<captured::CapturedTree>()?;
    m.add_function(wrap_pyfunction!(captured::capture_tree, m)?)?;
    m.add_function(wrap_pyfunction!(stage_edge::stage_captured, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_edge::manifest_captured, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_edge::manifest_bytes, m)?)?;
    Ok(())
}
