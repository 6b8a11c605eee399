//! `scan_tree` for Python: the walk (`scan/walk.rs`) on a thread of its own, the `FileMeta` values made here.
//!
//! The walk needs no GIL; making a `FileMeta` needs it and costs about as much as the walk's syscalls for the
//! same entry. So the two overlap: after each directory the walk hands this thread what it captured and
//! waits; this thread calls `on_progress(entries so far)` — before the walk opens the next directory, as the
//! reference does, so a hook that changes the tree there sees the same walk (a directory the second thread
//! captured ahead is captured again if it changed) — lets the walk go on, and makes
//! that directory's values while it does. An entry the rest of the walk may still change (a directory: its
//! flags are read when it is opened; a link: its target is read at the end; a name with others (a file, a link): its
//! hard link is marked at the end) is made once the walk is done. The GIL is released while this thread
//! waits for the walk, so other Python threads run as they did when the whole walk ran without it.

use std::ffi::OsString;
use std::sync::mpsc::{sync_channel, Receiver};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::entry_kind::Kind;
use crate::failure::Located;
use crate::py::failure::failure_to_py;
use crate::py::file_metas::Made;
use crate::py::paths::bytes_of;
use crate::scan::entry::Entry;
use crate::scan::second_thread::SPLIT_MIN;
use crate::scan::walk as scan;
use crate::sys::threads;

/// What the walk hands over after a directory: the entries so far, and those of them made now, by position.
type Captured = (usize, Vec<(usize, Entry)>);

/// Whether the walk is done with `e` when it is handed over (see the module's comment).
fn settled(e: &Entry, read_links: bool) -> bool {
    match e.kind {
        Kind::Dir => false,
        Kind::Symlink if read_links => false, // its target is read after the walk
        _ => e.st.nlink <= 1,                 // a later name's first name is known only then too
    }
}

/// One directory's capture from the walk, waited for without the GIL (`None`: the walk is over).
fn next_captured(py: Python<'_>, rx: Receiver<Captured>) -> (Option<Captured>, Receiver<Captured>) {
    py.detach(move || {
        let got = rx.recv().ok();
        (got, rx)
    })
}

/// Capture the tree at `root` as `scan.py::scan_tree` without a cache: `(entries as FileMeta, identities,
/// listed_noatime)`; `on_progress(entries so far)` after each directory (with the GIL, as the reference).
/// `threads`: 2 or more adds a second thread (`scan/second_thread.rs`: the next directory ahead, or a directory of
/// `split_min` names or more split).
#[pyfunction]
#[pyo3(signature = (root, read_links, on_progress, file_meta, threads=1, split_min=SPLIT_MIN))]
pub fn scan_tree<'py>(
    py: Python<'py>,
    root: OsString,
    read_links: bool,
    on_progress: Py<PyAny>,
    file_meta: Bound<'py, PyAny>,
    threads: usize,
    split_min: usize,
) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>, bool)> {
    let root = bytes_of(root);
    let mut made = Made::new(py, file_meta);
    let mut raised: Option<PyErr> = None;
    let (captured_tx, mut captured_rx) = sync_channel::<Captured>(0);
    let (go_tx, go_rx) = sync_channel::<bool>(0);
    let walk_root = root.clone();
    let scanned = std::thread::scope(|s| {
        let walk = threads::scoped(s, move || {
            let root = walk_root;
            let mut handed = 0;
            let mut progress = |entries: &[Entry]| {
                let fresh = (handed..entries.len())
                    .filter(|&i| settled(&entries[i], read_links))
                    .map(|i| (i, entries[i].clone()));
                let fresh: Vec<(usize, Entry)> = fresh.collect();
                handed = entries.len();
                captured_tx.send((entries.len(), fresh)).is_ok() && go_rx.recv().unwrap_or(false)
            };
            let tree = scan::scan_tree(&root, read_links, threads, split_min, &mut progress);
            drop(captured_tx); // the walk is over: this thread's next wait ends
            tree
        })?;
        loop {
            let (got, rx) = next_captured(py, captured_rx);
            captured_rx = rx;
            let Some((count, fresh)) = got else { break };
            if raised.is_none() {
                if let Err(err) = on_progress.call1(py, (count,)).and_then(|_| py.check_signals()) {
                    raised = Some(err);
                }
            }
            // `false` stops the walk before its next directory; it then reports `Stopped`.
            if go_tx.send(raised.is_none()).is_err() || raised.is_some() {
                continue;
            }
            for (at, e) in &fresh {
                if let Err(err) = made.make(*at, e, None) {
                    raised = Some(err);
                    break;
                }
            }
        }
        Some(walk.join())
    });
    let scanned = match scanned {
        Some(joined) => joined.map_err(|_| PyRuntimeError::new_err("the native scan's walk stopped unexpectedly"))?,
        // No thread would start (`sys/threads.rs`): the walk on this thread, the GIL held, its progress told as it goes.
        None => scan::scan_tree(&root, read_links, threads, split_min, &mut |entries| {
            let told = on_progress.call1(py, (entries.len(),)).and_then(|_| py.check_signals());
            raised = told.err();
            raised.is_none()
        }),
    };
    if let Some(err) = raised {
        return Err(err);
    }
    let tree = scanned.map_err(|failure| failure_to_py(py, Located { at: 0, failure }))?;
    for (at, e) in tree.entries.iter().enumerate() {
        made.path(at, e)?;
    }
    for (at, e) in tree.entries.iter().enumerate() {
        if made.metas.get(at).is_some_and(Option::is_some) {
            continue;
        }
        let hardlink = match e.hardlink {
            Some(first) => Some(made.path(first, &tree.entries[first])?),
            None => None,
        };
        made.make(at, e, hardlink)?;
    }
    let identities = PyDict::new(py);
    for (e, path) in tree.entries.iter().zip(made.paths.iter().flatten()) {
        identities.set_item(path, (made.ints.of(e.st.dev)?, e.st.ino))?;
    }
    let metas: Vec<Bound<'py, PyAny>> = made.metas.into_iter().flatten().collect();
    Ok((PyTuple::new(py, metas)?, identities, tree.listed_noatime))
}
