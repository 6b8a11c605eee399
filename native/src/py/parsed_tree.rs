//! The edge of a download's create: `create_files`' Python values — a batch of `entry_to_wire` tuples, or runs
//! of a [`ParsedTree`] the core parsed itself — and the parsed tree as Python sees it (its `FileMeta`s made
//! only where Python asks for them: the directories, what it makes itself, the plan's representatives, a
//! failure's entry). The create and every check are `restore`'s; the layout is `tree`'s.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use sha2::{Digest, Sha256};

use crate::entry_kind::Kind;
use crate::manifest::parse::parsed::{Decline, Entry as ParsedEntry};
use crate::manifest::parse::{self as manifest_parse};
use crate::py::parse_manifest::{decline_to_py, entry_args};
use crate::read::copy::hex;
use crate::restore::create;
use crate::restore::entry as restore;
use crate::restore::layout::Tree;
use crate::restore::metadata as restore_meta;
use crate::sys::threads;

/// `_native_batches.entry_to_wire`'s 14 fields, as owned values (`restore::Entry` borrows them).
struct Wire {
    path: Vec<u8>,
    kind: restore::Kind,
    mode: u32,
    mtime_ns: i128,
    atime_ns: i128,
    size: u64,
    sha256: Option<String>,
    target: Option<Vec<u8>>,
    uid: Option<u32>,
    gid: Option<u32>,
    xattrs: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    extents: Option<Vec<(u64, u64)>>,
    flags: Option<i32>,
}

impl Wire {
    fn of(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let t = obj.cast::<PyTuple>()?;
        if t.len() != 14 {
            return Err(PyValueError::new_err("a wire entry has 14 fields (download.to_wire)"));
        }
        let kind: String = t.get_item(1)?.extract()?;
        let kind = match kind.as_str() {
            "file" => restore::Kind::File,
            "symlink" => restore::Kind::Symlink,
            other => {
                return Err(PyValueError::new_err(format!("the native core creates files and symlinks, not {other}")))
            }
        };
        let xattrs: Option<Vec<(OsString, Vec<u8>)>> = t.get_item(10)?.extract()?;
        let target: Option<OsString> = t.get_item(7)?.extract()?;
        Ok(Wire {
            path: t.get_item(0)?.extract::<OsString>()?.into_vec(),
            kind,
            mode: t.get_item(2)?.extract()?,
            mtime_ns: t.get_item(3)?.extract()?,
            atime_ns: t.get_item(4)?.extract()?,
            size: t.get_item(5)?.extract()?,
            sha256: t.get_item(6)?.extract()?,
            target: target.map(OsStringExt::into_vec),
            uid: t.get_item(8)?.extract()?,
            gid: t.get_item(9)?.extract()?,
            xattrs: xattrs.map(|x| x.into_iter().map(|(n, v)| (n.into_vec(), v)).collect()),
            extents: t.get_item(11)?.extract()?,
            // As the manifest and flags.py hold them: 0..2**32, or the ioctl's signed int.
            flags: t.get_item(12)?.extract::<Option<i64>>()?.map(restore_meta::flags_bits),
        })
    }

    fn entry(&self) -> restore::Entry<'_> {
        restore::Entry {
            path: &self.path,
            kind: self.kind,
            mode: self.mode,
            mtime_ns: self.mtime_ns,
            atime_ns: self.atime_ns,
            size: self.size,
            sha256: self.sha256.as_deref(),
            target: self.target.as_deref(),
            uid: self.uid,
            gid: self.gid,
            xattrs: self.xattrs.as_ref().map(|x| x.iter().map(|(n, v)| (n.as_slice(), v.as_slice())).collect()),
            extents: self.extents.as_deref(),
            flags: self.flags,
        }
    }
}

/// A manifest the core parsed and checked for a download (`_native.parse_tree`), kept in the core.
#[pyclass(frozen, module = "artifactkit._native")]
pub(crate) struct ParsedTree {
    tree: Tree,
}

fn bad_run() -> PyErr {
    PyValueError::new_err("no such run of the parsed tree")
}

#[pymethods]
impl ParsedTree {
    #[getter]
    fn name(&self) -> &str {
        &self.tree.name
    }

    #[getter]
    fn noatime(&self) -> bool {
        self.tree.noatime
    }

    fn __len__(&self) -> usize {
        self.tree.entries.len()
    }

    /// `file_meta(*fields)` of the entries at `indices` (every entry when `None`), as `parse_manifest` makes them.
    #[pyo3(signature = (file_meta, indices=None))]
    fn metas<'py>(
        &self,
        py: Python<'py>,
        file_meta: &Bound<'py, PyAny>,
        indices: Option<Vec<usize>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let entries = &self.tree.entries;
        let chosen: Vec<&ParsedEntry<'_>> = match indices {
            None => entries.iter().collect(),
            Some(at) => at.iter().map(|&i| entries.get(i).ok_or_else(bad_run)).collect::<PyResult<_>>()?,
        };
        let kinds: Vec<_> = Kind::ALL.iter().map(|kind| PyString::intern(py, kind.name())).collect();
        let made =
            chosen.into_iter().map(|e| file_meta.call1(entry_args(py, e, &kinds)?)).collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, made)
    }

    /// `(dirs, others, made, reps)`: `tree::Layout`, each made group as `(directory, count)`.
    #[allow(clippy::type_complexity)]
    fn layout(&self) -> (Vec<usize>, Vec<usize>, Vec<(usize, usize)>, Vec<usize>) {
        let l = &self.tree.layout;
        let made = l.made.iter().map(|(dir, at)| (*dir, at.len())).collect();
        (l.dirs.clone(), l.others.clone(), made, l.reps.clone())
    }

    /// The `FileMeta`s of entries `start..stop` of made group `group`.
    fn run_metas<'py>(
        &self,
        py: Python<'py>,
        file_meta: &Bound<'py, PyAny>,
        group: usize,
        start: usize,
        stop: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (_, made) = self.tree.layout.made.get(group).ok_or_else(bad_run)?;
        let at = made.get(start..stop).ok_or_else(bad_run)?;
        self.metas(py, file_meta, Some(at.to_vec()))
    }

    /// The regular files' bytes among entries `start..stop` of made group `group`.
    fn run_bytes(&self, group: usize, start: usize, stop: usize) -> PyResult<u64> {
        self.tree.run_bytes(group, start, stop).ok_or_else(bad_run)
    }

    /// `(count, bytes)` of `needed()`'s mapping without making it (the last size of a digest named twice, as
    /// in a dict; the bytes in a `u128`: a hostile manifest's sizes may sum past `u64`).
    fn needed_totals(&self) -> (usize, u128) {
        let mut sizes: HashMap<&str, u64> = HashMap::new();
        for entry in self.tree.entries.iter().filter(|e| e.kind == Kind::File) {
            if let Some(sha) = &entry.sha256 {
                sizes.insert(sha.as_ref(), entry.size);
            }
        }
        (sizes.len(), sizes.values().map(|&size| u128::from(size)).sum())
    }

    /// `{sha256: size}` of every regular file: the blobs the download needs.
    fn needed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let needed = PyDict::new(py);
        for entry in self.tree.entries.iter().filter(|e| e.kind == Kind::File) {
            if let Some(sha) = &entry.sha256 {
                needed.set_item(sha.as_ref(), entry.size)?;
            }
        }
        Ok(needed)
    }
}

/// Parse and check manifest bytes as `parse_manifest` does, into a [`ParsedTree`], while a second thread hashes
/// them: bytes that do not hash to `digest` (lowercase hex) are refused as `NativeFailure("manifest_refused",
/// None, {"check": "digest", ...})` whatever they hold (the reference checks the digest before it parses); a
/// manifest the core does not accept raises the same `NativeFailure` as `parse_manifest` (`size_limit`: the
/// largest file an entry may claim, as there).
#[pyfunction]
#[pyo3(signature = (data, digest, size_limit=manifest_parse::MAX_FILE_BYTES))]
pub(crate) fn parse_tree(
    py: Python<'_>,
    data: &Bound<'_, PyBytes>,
    digest: &str,
    size_limit: u64,
) -> PyResult<ParsedTree> {
    let bytes = data.as_bytes();
    let (hashed, parsed) = py.detach(|| {
        std::thread::scope(|s| {
            let hashing = threads::scoped(s, || hex(&Sha256::digest(bytes)));
            let parsed = manifest_parse::parse(bytes, size_limit).map(Tree::of);
            let hashed = match hashing {
                Some(thread) => thread.join().ok(),
                None => Some(hex(&Sha256::digest(bytes))), // no thread would start: after the parse, here
            };
            (hashed, parsed)
        })
    });
    if hashed.as_deref() != Some(digest) {
        return Err(decline_to_py(py, Decline::refused("digest", None)));
    }
    parsed.map(|tree| ParsedTree { tree }).map_err(|decline| decline_to_py(py, decline))
}

/// One directory of a batch: its entries as wire tuples, or a run `(group, start, stop)` of the parsed tree.
enum Part {
    Wire(Vec<Wire>),
    Run(usize, usize, usize),
}

/// Create every file and symlink of `batch` — `(dir relpath, [wire entry] | (group, start, stop) of tree)` —
/// beneath `root_fd`, content from `blobs_fd` verified as written, metadata restored and read back;
/// `on_progress(entries, file bytes)` as each part is done (with the GIL, on the calling thread, which
/// then also looks for signals: Ctrl-C stops a long create there, and what it or the callback raised is raised).
#[pyfunction]
#[pyo3(signature = (root_fd, blobs_fd, batch, threads, tree=None, on_progress=None))]
pub(crate) fn create_files(
    py: Python<'_>,
    root_fd: i32,
    blobs_fd: i32,
    batch: Vec<(OsString, Bound<'_, PyAny>)>,
    threads: usize,
    tree: Option<&Bound<'_, ParsedTree>>,
    on_progress: Option<Py<PyAny>>,
) -> PyResult<()> {
    let parts = batch
        .into_iter()
        .map(|(rel, entries)| {
            let part = if let Ok(list) = entries.cast::<PyList>() {
                Part::Wire(list.iter().map(|e| Wire::of(&e)).collect::<PyResult<_>>()?)
            } else {
                let (group, start, stop) = entries.extract()?;
                Part::Run(group, start, stop)
            };
            Ok((rel.into_vec(), part))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let tree = tree.map(|t| &t.get().tree);
    let dirs = parts
        .iter()
        .map(|(rel, part)| {
            let entries = match part {
                Part::Wire(wires) => wires.iter().map(Wire::entry).collect(),
                Part::Run(group, start, stop) => tree.and_then(|t| t.run(*group, *start, *stop)).ok_or_else(bad_run)?,
            };
            Ok(restore::Dir { rel, entries })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let mut raised: Option<PyErr> = None;
    let made = py.detach(|| {
        // A unit done: the callback, then the signals; none done for a while (one big file): the signals alone.
        let mut report = |done: Option<(usize, u64)>| {
            Python::attach(|py| {
                let called = match (&on_progress, done) {
                    (Some(callback), Some((entries, bytes))) => callback.call1(py, (entries, bytes)).map(drop),
                    _ => Ok(()),
                };
                match called.and_then(|()| py.check_signals()) {
                    Ok(()) => true,
                    Err(err) => {
                        raised = Some(err);
                        false
                    }
                }
            })
        };
        create::create_files(root_fd, blobs_fd, &dirs, threads, &mut report)
    });
    if let Some(err) = raised {
        return Err(err);
    }
    made.map_err(|located| crate::py::failure_to_py(py, located))
}
