//! The edge of a publish's reads and moves (`read/stage.rs`, `read/renames.rs`): items in, `Staged` out, and the state one
//! publish's calls share.
//!
//! A publish keeps its reads here, in its `StageState`, rather than handing 10,000 `Staged` tuples to Python: the
//! manifest's lines (`manifest_lines`) and the moves into `blobs/` (`rename_staged`) take them straight from the state,
//! and Python makes a `Staged` only of a read it asks for (`artifactkit/engine/native_values.py`'s `KeptReads`). Measured before this (`many`, 10,000 files): the tuples
//! and the transaction's walk over them were 15-20 ms of the publishing thread a publish, on one thread or two.

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;

use crate::manifest::encode::{Facts, Json, Text};
use crate::py::captured_tree::CapturedTree;
use crate::py::failure::failure_to_py;
use crate::py::paths::bytes_of;
use crate::read::progress::{Tally, Told};
use crate::read::{renames, stage};

type Extents = Option<Vec<(u64, u64)>>;
/// `artifactkit/engine/native.py`'s `_item_to_wire`'s item: (index, path, size, mtime_ns, ctime_ns, dev, ino).
type WireItem = (u64, OsString, u64, i128, Option<i128>, u64, u64);
/// `Staged` as a tuple: (index, sha256, noatime, flags, extents, staged).
type StagedTuple = (u64, String, bool, Option<i32>, Extents, bool);

/// What one publish's `stage_files` calls share (`stage::Seen`): the content they staged, and the one listing
/// of `blobs/` the publish took (`None`: a `stat` each), so a publish may come in batches and still stage each
/// content once; and every read of its calls, in order.
#[pyclass(module = "artifactkit._native")]
pub struct StageState {
    seen: stage::Seen,
    pub(crate) reads: Vec<stage::Staged>,
}

#[pymethods]
impl StageState {
    #[new]
    #[pyo3(signature = (listed=None))]
    fn new(listed: Option<HashSet<String>>) -> Self {
        Self { seen: stage::Seen { staged: HashSet::new(), listed, repaired: Vec::new() }, reads: Vec::new() }
    }

    /// The damaged blobs (same name, other bytes) this publish's reads staged their own bytes over, in order.
    fn repaired(&self) -> Vec<String> {
        self.seen.repaired.clone()
    }

    /// How many reads `stage_files` kept here.
    fn __len__(&self) -> usize {
        self.reads.len()
    }

    /// Kept read `k` as a `Staged` tuple.
    fn read(&self, k: usize) -> PyResult<StagedTuple> {
        let read =
            self.reads.get(k).ok_or_else(|| PyIndexError::new_err(format!("read {k} of {}", self.reads.len())))?;
        Ok(tuple_of(read))
    }

    /// Whether every kept read opened its file with `O_NOATIME`.
    fn all_noatime(&self) -> bool {
        self.reads.iter().all(|read| read.noatime)
    }

    /// The tree positions of the kept reads in `start..stop` that opened their file without `O_NOATIME` (refused:
    /// not the file's owner), so their reads may have moved its atime.
    fn atime_positions(&self, start: usize, stop: usize) -> PyResult<Vec<u64>> {
        let reads = self.reads.get(start..stop).ok_or_else(|| {
            PyIndexError::new_err(format!("reads {start}..{stop} of {} are not kept", self.reads.len()))
        })?;
        Ok(reads.iter().filter(|read| !read.noatime).map(|read| read.index).collect())
    }

    /// How many kept reads in `start..stop` were staged.
    fn staged_count(&self, start: usize, stop: usize) -> PyResult<usize> {
        Ok(self.staged_in(start, stop)?.count())
    }

    /// `(staging name, digest)` of each kept read in `start..stop` that was staged: the moves `rename_staged` makes.
    fn moves(&self, start: usize, stop: usize) -> PyResult<Vec<(String, String)>> {
        Ok(self.staged_in(start, stop)?.map(|read| (stage::stage_name(read.index), read.sha256.clone())).collect())
    }
}

impl StageState {
    fn staged_in(&self, start: usize, stop: usize) -> PyResult<impl Iterator<Item = &stage::Staged>> {
        let reads = self.reads.get(start..stop).ok_or_else(|| {
            PyIndexError::new_err(format!("reads {start}..{stop} of {} are not kept", self.reads.len()))
        })?;
        Ok(reads.iter().filter(|read| read.staged))
    }
}

fn tuple_of(s: &stage::Staged) -> StagedTuple {
    (s.index, s.sha256.clone(), s.noatime, s.flags, s.extents.clone(), s.staged)
}

/// A kept read's `(sha256, flags, extents)` as the encoder takes the `Staged` tuple's values (`manifest_edge`'s
/// `facts_of` of a `str`, an `int` or `None`, and a tuple of `(start, stop)` tuples or `None`).
pub(crate) fn facts_of_kept(read: &stage::Staged) -> Facts {
    let int = |v: u64| Json::Int(i128::from(v));
    Facts {
        sha256: Json::Str(Text::Utf8(read.sha256.clone())),
        flags: read.flags.map(|flags| Json::Int(i128::from(flags))),
        extents: read
            .extents
            .as_ref()
            .map(|runs| runs.iter().map(|&(a, b)| Json::List(vec![int(a), int(b)])).collect()),
    }
}

/// What a call reads: reads `start..stop` of a captured tree (its items made here from the core's own entries), or
/// `_item_to_wire`'s items of any plan (a stat cache's).
#[derive(FromPyObject)]
pub enum Reads<'py> {
    Captured((PyRef<'py, CapturedTree>, usize, usize)),
    Items(Vec<WireItem>),
}

/// Read, hash and stage `reads` of the tree at `root` into the staging dir `txn_fd`, unless `blobs_fd` holds the
/// blob or an earlier call with this `state` staged it; their `Staged` kept in `state` (`StageState.read`), in
/// order: how many it kept. `on_progress(files, file bytes)` with what was read since it was last called, on the
/// calling thread, with the GIL, every `progress::EVERY_FILES` files or `progress::EVERY_BYTES` bytes and once at
/// the end, so one call may take a whole publish.
#[pyfunction]
#[pyo3(signature = (root, txn_fd, blobs_fd, reads, threads, state, on_progress=None))]
#[allow(clippy::too_many_arguments)] // what a read needs: the tree, both directories, the reads, the threads, the state
pub fn stage_files(
    py: Python<'_>,
    root: OsString,
    txn_fd: i32,
    blobs_fd: i32,
    reads: Reads<'_>,
    threads: usize,
    mut state: PyRefMut<'_, StageState>,
    on_progress: Option<Py<PyAny>>,
) -> PyResult<usize> {
    let found = match reads {
        Reads::Captured((tree, start, stop)) => {
            let items = tree
                .reads_of(start, stop)
                .ok_or_else(|| PyIndexError::new_err(format!("reads {start}..{stop} are not in the captured tree")))?;
            stage_items(py, root, txn_fd, blobs_fd, &items, threads, &mut state, on_progress.as_ref())?
        }
        Reads::Items(items) => {
            let items: Vec<stage::Item> = items
                .iter()
                .map(|(index, path, size, mtime_ns, ctime_ns, dev, ino)| stage::Item {
                    index: *index,
                    path: path.as_bytes(),
                    size: *size,
                    mtime_ns: *mtime_ns,
                    ctime_ns: *ctime_ns,
                    dev: *dev,
                    ino: *ino,
                })
                .collect();
            stage_items(py, root, txn_fd, blobs_fd, &items, threads, &mut state, on_progress.as_ref())?
        }
    };
    let kept = found.len();
    if state.reads.is_empty() {
        state.reads = found; // a publish's one call: its reads kept as they came, not copied
    } else {
        state.reads.extend(found);
    }
    Ok(kept)
}

#[allow(clippy::too_many_arguments)] // stage_files', the items made
fn stage_items<T: stage::ToRead>(
    py: Python<'_>,
    root: OsString,
    txn_fd: i32,
    blobs_fd: i32,
    items: &[T],
    threads: usize,
    state: &mut StageState,
    on_progress: Option<&Py<PyAny>>,
) -> PyResult<Vec<stage::Staged>> {
    let root = bytes_of(root);
    let seen = &mut state.seen;
    let mut told = Told::default();
    let mut raised: Option<PyErr> = None;
    let staged = py.detach(|| {
        // What was read since the last call told, then the signals (a Ctrl-C in one big file); what the callback
        // or a handler raised is raised.
        let mut tell = |tally: &Tally, end: bool| {
            Python::attach(|py| {
                let called = match on_progress {
                    Some(callback) => {
                        told.since(tally, end).into_iter().try_for_each(|step| callback.call1(py, step).map(drop))
                    }
                    None => Ok(()),
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
        stage::stage_files(&root, txn_fd, blobs_fd, items, threads, seen, &mut tell)
    });
    if let Some(err) = raised {
        return Err(err);
    }
    staged.map_err(|located| failure_to_py(py, located))
}

/// `os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)` of every move of `StageState.moves(start, stop)`,
/// in order, the GIL released, their names made here: each staged read's staging name to its digest.
#[pyfunction]
pub fn rename_staged(
    py: Python<'_>,
    src_fd: i32,
    dst_fd: i32,
    state: PyRef<'_, StageState>,
    start: usize,
    stop: usize,
) -> PyResult<()> {
    // Neither name holds a NUL ("blob-" and digits; a digest's hex), but a refusal is the error, never a panic.
    let to_c = |name: String| CString::new(name).map_err(|_| PyValueError::new_err("rename: embedded null character"));
    let moves = state
        .staged_in(start, stop)?
        .map(|read| Ok((to_c(stage::stage_name(read.index))?, to_c(read.sha256.clone())?)))
        .collect::<PyResult<Vec<_>>>()?;
    drop(state);
    py.detach(|| renames::rename_all(src_fd, dst_fd, &moves)).map_err(|located| failure_to_py(py, located))
}
