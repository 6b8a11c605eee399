//! The edge of a download's create: `create_files`' Python values — a batch of `entry_to_wire` tuples, or runs
//! of a [`ParsedTree`] the core parsed itself. The create and every check are `restore::create`'s.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::py::failure::failure_to_py;
use crate::py::parsed_tree::{bad_run, ParsedTree};
use crate::restore::create;
use crate::restore::entry::{Dir, Entry, Kind};
use crate::restore::metadata::flags_bits;

/// `artifactkit/engine/native.py`'s `_entry_to_wire`'s 13 fields, as owned values (`Entry` borrows them).
struct Wire {
    path: Vec<u8>,
    kind: Kind,
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
        if t.len() != 13 {
            return Err(PyValueError::new_err("a wire entry has 13 fields (engine.native._entry_to_wire)"));
        }
        let kind: String = t.get_item(1)?.extract()?;
        let kind = match kind.as_str() {
            "file" => Kind::File,
            "symlink" => Kind::Symlink,
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
            flags: t.get_item(12)?.extract::<Option<i64>>()?.map(flags_bits),
        })
    }

    fn entry(&self) -> Entry<'_> {
        Entry {
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
            Ok(Dir { rel, entries })
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
    made.map_err(|located| failure_to_py(py, located))
}
