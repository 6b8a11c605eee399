//! `artifactkit._native`: a publish's scan, the execute stage's per-file work and the manifest's encoding, for
//! whole trees and batches, the GIL released.
//!
//! Python types are converted here, at the edge, and only here (and in `manifest_edge.rs`, this edge's part
//! for the manifest's values); every failure leaves as `NativeFailure(kind, at, fields)`, which
//! `artifactkit/store/_native_batches.py` (`_native_scan.py`, `_native_manifest.py`) turns into the class and
//! message the reference engine raises. Python keeps the API, the policy and the messages.

mod captured;
mod content;
mod copy;
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
mod scan_edge;
mod scan_split;
mod syscalls;
mod tree;

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use error::{Failure, Located, StatFacts};

create_exception!(_native, NativeFailure, PyException, "A batch failed: (kind, position, fields).");

type Extents = Option<Vec<(u64, u64)>>;
/// `_native_batches.item_to_wire`'s item: (index, path, size, mtime_ns, ctime_ns, dev, ino).
type WireItem = (u64, OsString, u64, i128, Option<i128>, u64, u64);
/// `Staged` as a tuple: (index, sha256, noatime, flags, extents, staged).
type StagedTuple = (u64, String, bool, Option<i32>, Extents, bool);

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
        Failure::OsFd { errno, fd } => {
            d.set_item("errno", errno)?;
            d.set_item("filename", fd)?;
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

/// What one publish's `stage_files` calls share (`content::Seen`): the content they staged, and the one listing
/// of `blobs/` the publish took (`None`: a `stat` each), so a publish may come in batches and still stage each
/// content once.
#[pyclass(module = "artifactkit._native")]
struct StageState {
    seen: content::Seen,
}

#[pymethods]
impl StageState {
    #[new]
    #[pyo3(signature = (listed=None))]
    fn new(listed: Option<HashSet<String>>) -> Self {
        Self { seen: content::Seen { staged: HashSet::new(), listed } }
    }
}

/// Read, hash and stage `items` — `(index, path, size, mtime_ns, ctime_ns, dev, ino)` — of the tree at
/// `root` into the staging dir `txn_fd`, unless `blobs_fd` holds the blob or an earlier call with this `state`
/// staged it; `Staged` tuples in input order.
#[pyfunction]
fn stage_files(
    py: Python<'_>,
    root: OsString,
    txn_fd: i32,
    blobs_fd: i32,
    items: Vec<WireItem>,
    threads: usize,
    mut state: PyRefMut<'_, StageState>,
) -> PyResult<Vec<StagedTuple>> {
    let items: Vec<content::Item> = items
        .into_iter()
        .map(|(index, path, size, mtime_ns, ctime_ns, dev, ino)| content::Item {
            index,
            path,
            size,
            mtime_ns,
            ctime_ns,
            dev,
            ino,
        })
        .collect();
    stage_items(py, root, txn_fd, blobs_fd, &items, threads, &mut state)
}

/// `stage_files` for reads `start..stop` of a captured tree (`CapturedTree.read_batches`), its items made in
/// the core from the tree's own entries.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // stage_files' arguments, the tree and its range instead of the items
fn stage_captured(
    py: Python<'_>,
    root: OsString,
    txn_fd: i32,
    blobs_fd: i32,
    tree: PyRef<'_, captured::CapturedTree>,
    start: usize,
    stop: usize,
    threads: usize,
    mut state: PyRefMut<'_, StageState>,
) -> PyResult<Vec<StagedTuple>> {
    let items = tree.read_items(start, stop).ok_or_else(|| {
        pyo3::exceptions::PyIndexError::new_err(format!("reads {start}..{stop} are not in the captured tree"))
    })?;
    stage_items(py, root, txn_fd, blobs_fd, &items, threads, &mut state)
}

fn stage_items(
    py: Python<'_>,
    root: OsString,
    txn_fd: i32,
    blobs_fd: i32,
    items: &[content::Item],
    threads: usize,
    state: &mut StageState,
) -> PyResult<Vec<StagedTuple>> {
    let root = bytes_of(root);
    let seen = &mut state.seen;
    match py.detach(|| content::stage_files(&root, txn_fd, blobs_fd, items, threads, seen)) {
        Ok(staged) => {
            Ok(staged.into_iter().map(|s| (s.index, s.sha256, s.noatime, s.flags, s.extents, s.staged)).collect())
        }
        Err(located) => Err(failure_to_py(py, located)),
    }
}

/// `os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)` for every pair of `moves` in order, the GIL
/// released; a name holding a NUL byte is refused as `os.rename` refuses it, before any moves.
#[pyfunction]
fn rename_files(py: Python<'_>, src_fd: i32, dst_fd: i32, moves: Vec<(OsString, OsString)>) -> PyResult<()> {
    let to_c = |name: OsString| {
        std::ffi::CString::new(name.into_vec())
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("rename: embedded null character in path"))
    };
    let moves = moves.into_iter().map(|(src, dst)| Ok((to_c(src)?, to_c(dst)?))).collect::<PyResult<Vec<_>>>()?;
    py.detach(|| moves::rename_all(src_fd, dst_fd, &moves)).map_err(|located| failure_to_py(py, located))
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
    m.add_class::<StageState>()?;
    m.add_function(wrap_pyfunction!(stage_files, m)?)?;
    m.add_function(wrap_pyfunction!(rename_files, m)?)?;
    m.add_class::<restore_edge::ParsedTree>()?;
    m.add_function(wrap_pyfunction!(restore_edge::create_files, m)?)?;
    m.add_function(wrap_pyfunction!(restore_edge::parse_tree, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_parse_edge::parse_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(scan_edge::scan_tree, m)?)?;
    m.add_class::<captured::CapturedTree>()?;
    m.add_function(wrap_pyfunction!(captured::capture_tree, m)?)?;
    m.add_function(wrap_pyfunction!(stage_captured, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_edge::manifest_captured, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_edge::manifest_bytes, m)?)?;
    Ok(())
}
