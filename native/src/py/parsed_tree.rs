//! A download's manifest parsed and kept in the core (`parse_tree`, [`ParsedTree`]), as Python sees it: its
//! `FileMeta`s made only where Python asks for them (the directories, what it makes itself, the plan's
//! representatives, a failure's entry), the restore's layout, the blobs it needs. The parse is
//! `manifest::parse`'s; the layout is `restore::layout`'s; `create_files.rs` creates runs of it.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use sha2::{Digest, Sha256};

use crate::entry_kind::Kind;
use crate::manifest::parse::parsed::{Decline, Entry as ParsedEntry};
use crate::manifest::parse::{parse, MAX_FILE_BYTES};
use crate::py::failure::decline_to_py;
use crate::py::file_metas::entry_args;
use crate::read::copy::hex;
use crate::restore::layout::Tree;
use crate::sys::threads;

/// A manifest the core parsed and checked for a download (`_native.parse_tree`), kept in the core.
#[pyclass(frozen, module = "artifactkit._native")]
pub(crate) struct ParsedTree {
    pub(crate) tree: Tree,
}

pub(crate) fn bad_run() -> PyErr {
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

    /// `file_meta(*fields)` of the entries at `indices` (every entry when `None`), as `manifest.parse_manifest` makes them.
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

    /// `(dirs, others, made, reps)`: `layout::Layout`, each made group as `(directory, count)`.
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

/// Parse and check manifest bytes as `manifest.parse_manifest` does, into a [`ParsedTree`], while a second thread hashes
/// them: bytes that do not hash to `digest` (lowercase hex) are refused as `NativeFailure("manifest_refused",
/// None, {"check": "digest", ...})` whatever they hold (the reference checks the digest before it parses); a
/// manifest the core does not accept raises `NativeFailure` (`size_limit`: the
/// largest file an entry may claim, as there).
#[pyfunction]
#[pyo3(signature = (data, digest, size_limit=MAX_FILE_BYTES))]
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
            let parsed = parse(bytes, size_limit).map(Tree::of);
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
