//! A publish's scan kept in the core (`CapturedTree`), so its files go from the walk to the reads and the
//! manifest without becoming `FileMeta` objects on the way: the publish's counterpart of a download's
//! `ParsedTree` (`py/parsed_tree.rs`).
//!
//! The walk is `scan/walk.rs`'s (the reference's calls, refusals and order), run on the calling thread with the GIL
//! released and taken again only for `on_progress` after each directory. Making 10,000 `FileMeta`s cost the
//! scan as much CPU as its syscalls; here a `FileMeta` is made only when Python asks (`metas`): a seam that
//! iterates the entries, a failure's message. What a publish asks of every entry is answered here: the files
//! it reads and their bytes, the first time no manifest can carry, the entries as the manifest encodes them
//! (`manifest_entry`, the values `py/file_metas.rs` gives a `FileMeta` and `py/manifest_lines.rs` reads off it).

use std::ffi::OsString;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::entry_kind::Kind;
use crate::failure::Located;
use crate::manifest::encode::{Entry as Doc, Json, Text};
use crate::manifest::fields::captured_pairs;
use crate::py::failure::failure_to_py;
use crate::py::file_metas::Made;
use crate::py::ints::{int_py, Ints};
use crate::py::paths::bytes_of;
use crate::read::stage;
use crate::scan::entry::Entry;
use crate::scan::second_thread::SPLIT_MIN;
use crate::scan::walk as scan;

/// A read of a captured tree: its entry's position and the entry.
pub(crate) struct CapturedRead<'a>(usize, &'a Entry);

impl stage::ToRead for CapturedRead<'_> {
    fn item(&self) -> stage::Item<'_> {
        let CapturedRead(at, e) = *self;
        stage::Item {
            index: at as u64,
            path: &e.path,
            size: e.st.size,
            mtime_ns: e.st.mtime_ns,
            ctime_ns: Some(e.st.ctime_ns),
            dev: e.st.dev,
            ino: e.st.ino,
        }
    }
}

/// The manifest's range of a time (`manifest.fields.NS_LIMIT`): `[-2**63, 2**63)` s, the kernel's `time64_t`. A
/// capture's times are inside by construction (an i64 second and its ns); the check stays as the table's.
const NS_LIMIT: i128 = (1 << 63) * 1_000_000_000;

/// A captured tree, in the scan's order; `reads`: the files a publish reads (every regular file but the later
/// names of a hard link), by position.
#[pyclass(frozen, module = "artifactkit._native")]
pub struct CapturedTree {
    pub(crate) entries: Vec<Entry>,
    listed_noatime: bool,
    reads: Vec<usize>,
}

impl CapturedTree {
    /// Reads `start..stop` as `stage::stage_files` takes them: each its position and entry, the item made from
    /// the entry when it is read (what `artifactkit/engine/native.py`'s `_item_to_wire` makes of it).
    pub(crate) fn reads_of(&self, start: usize, stop: usize) -> Option<Vec<CapturedRead<'_>>> {
        Some(self.reads.get(start..stop)?.iter().map(|&at| CapturedRead(at, &self.entries[at])).collect())
    }

    /// Entry `at` as `manifest_lines::entry_of` reads its `FileMeta`, and whether its link count is above one;
    /// `None` where a name is no UTF-8 (a `str` of lone surrogates: the reference's turn).
    pub(crate) fn manifest_entry(&self, at: usize) -> Option<(Doc, bool)> {
        let e = &self.entries[at];
        let int = |v: i128| Json::Int(v);
        let xattrs = e
            .xattrs
            .iter()
            .map(|(name, value)| Some(Json::List(vec![Json::Str(text(name)?), Json::Base64(value.clone())])))
            .collect::<Option<Vec<_>>>()?;
        let hardlink = match e.hardlink {
            Some(first) => Some(Json::Str(text(&self.entries[first].path)?)),
            None => None,
        };
        let target = match &e.target {
            Some(target) => Json::Str(text(target)?),
            None => Json::Null,
        };
        let doc = Doc {
            path: text(&e.path)?,
            kind: Text::Utf8(e.kind.name().to_owned()),
            mode: int((e.st.mode & 0o7777).into()),
            mtime_ns: int(e.st.mtime_ns),
            atime_ns: int(e.st.atime_ns),
            size: int(if e.kind == Kind::File { e.st.size.into() } else { 0 }),
            sha256: Json::Null,
            target,
            ctime_ns: Some(int(e.st.ctime_ns)),
            uid: Some(int(e.st.uid.into())),
            gid: Some(int(e.st.gid.into())),
            xattrs: (!xattrs.is_empty()).then_some(Json::List(xattrs)),
            hardlink,
            extents: None,
            flags: e.flags.map(|flags| int(flags.into())),
            pairs: captured_pairs(e.kind, &e.st)
                .map(|pair| pair.map(|(a, b)| Json::List(vec![int(a.into()), int(b.into())]))),
        };
        Some((doc, e.st.nlink != 1))
    }
}

fn text(bytes: &[u8]) -> Option<Text> {
    std::str::from_utf8(bytes).ok().map(|s| Text::Utf8(s.to_owned()))
}

#[pymethods]
impl CapturedTree {
    fn __len__(&self) -> usize {
        self.entries.len()
    }

    #[getter]
    fn listed_noatime(&self) -> bool {
        self.listed_noatime
    }

    /// Every entry as the `FileMeta` the reference's scan makes of it (`file_meta`: the class).
    fn metas<'py>(&self, py: Python<'py>, file_meta: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let mut made = Made::new(py, file_meta);
        for (at, e) in self.entries.iter().enumerate() {
            let hardlink = match e.hardlink {
                Some(first) => Some(made.path(first, &self.entries[first])?),
                None => None,
            };
            made.make(at, e, hardlink)?;
        }
        made.into_tuple()
    }

    /// `ScannedTree.identities`: every path -> `(dev, ino)`.
    fn identities<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut ints = Ints::new(py);
        let found = PyDict::new(py);
        for e in &self.entries {
            found
                .set_item(crate::py::paths::fs_str(py, &e.path)?, (ints.of(e.st.dev)?, int_py(py, e.st.ino.into())?))?;
        }
        Ok(found)
    }

    /// How many regular files (a hard link's every name).
    fn file_count(&self) -> usize {
        self.entries.iter().filter(|e| e.kind == Kind::File).count()
    }

    /// The position of the first entry with an mtime or atime no manifest carries, if any.
    fn first_unrepresentable(&self) -> Option<usize> {
        let inside = |ns: i128| (-NS_LIMIT..NS_LIMIT).contains(&ns);
        self.entries.iter().position(|e| !(inside(e.st.mtime_ns) && inside(e.st.atime_ns)))
    }

    /// The reads' count, and their bytes.
    fn read_totals(&self) -> (usize, u64) {
        (self.reads.len(), self.reads.iter().map(|&at| self.entries[at].st.size).sum())
    }

    /// The positions of the entries of `kind` (`"symlink"`, `"dir"`, ...), in order: what a publish looks at again
    /// to count the source atimes its reads moved (`store/source_atimes.py`).
    fn positions_of(&self, kind: &str) -> Vec<usize> {
        self.entries.iter().enumerate().filter(|(_, e)| e.kind.name() == kind).map(|(at, _)| at).collect()
    }

    /// `(path, atime_ns)` as captured, of the entries at `positions`: what a publish compares a fresh `lstat` with,
    /// without a `FileMeta` of every entry (making them cost a 100,000-entry publish 0.3-2 s).
    fn path_atimes<'py>(
        &self,
        py: Python<'py>,
        positions: Vec<usize>,
    ) -> PyResult<Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
        positions
            .into_iter()
            .map(|at| {
                let e = self.entries.get(at).ok_or_else(|| {
                    pyo3::exceptions::PyIndexError::new_err(format!("entry {at} of {}", self.entries.len()))
                })?;
                Ok((crate::py::paths::fs_str(py, &e.path)?, int_py(py, e.st.atime_ns)?))
            })
            .collect()
    }

    /// The position in the tree of read `k`.
    fn read_position(&self, k: usize) -> Option<usize> {
        self.reads.get(k).copied()
    }
}

/// Capture the tree at `root` as `engine/reference/scan.py::scan_tree` without a cache, kept in the core; `on_progress(entries
/// so far)` after each directory, with the GIL, before the next directory is opened (as the reference; with two
/// threads the next may be captured ahead already, and is captured again at its turn if it changed).
/// `threads`: 2 or more adds a second thread (`scan/second_thread.rs`: the next directory ahead, or a directory of
/// `split_min` names or more split).
#[pyfunction]
#[pyo3(signature = (root, read_links, on_progress, threads=1, split_min=SPLIT_MIN))]
pub fn capture_tree(
    py: Python<'_>,
    root: OsString,
    read_links: bool,
    on_progress: Py<PyAny>,
    threads: usize,
    split_min: usize,
) -> PyResult<CapturedTree> {
    let root = bytes_of(root);
    let mut raised: Option<PyErr> = None;
    let walked = py.detach(|| {
        let mut progress = |entries: &[Entry]| {
            Python::attach(|py| match on_progress.call1(py, (entries.len(),)).and_then(|_| py.check_signals()) {
                Ok(_) => true,
                Err(err) => {
                    raised = Some(err);
                    false // the walk stops before its next directory, reporting `Stopped`
                }
            })
        };
        scan::scan_tree(&root, read_links, threads, split_min, &mut progress)
    });
    if let Some(err) = raised {
        return Err(err);
    }
    let tree = walked.map_err(|failure| failure_to_py(py, Located { at: 0, failure }))?;
    let reads = (0..tree.entries.len())
        .filter(|&at| tree.entries[at].kind == Kind::File && tree.entries[at].hardlink.is_none())
        .collect();
    Ok(CapturedTree { entries: tree.entries, listed_noatime: tree.listed_noatime, reads })
}
