//! A scanned entry as the `FileMeta` the reference's scan makes of it (`Made`): its fields in
//! `model.FIELD_ORDER`, its path and its shared ints made once.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::entry_kind::Kind;
use crate::py::ints::{int_py, Ints};
use crate::py::paths::fs_str;
use crate::scan::entry::Entry;

/// The kind's name, one `str` for every entry of that kind.
fn kind_str(py: Python<'_>, kind: Kind) -> &Bound<'_, PyString> {
    match kind {
        Kind::File => intern!(py, "file"),
        Kind::Dir => intern!(py, "dir"),
        Kind::Symlink => intern!(py, "symlink"),
        Kind::Fifo => intern!(py, "fifo"),
        Kind::Char => intern!(py, "char"),
        Kind::Block => intern!(py, "block"),
    }
}

/// The values made so far, by position in the scan's order.
pub(crate) struct Made<'py> {
    py: Python<'py>,
    file_meta: Bound<'py, PyAny>,
    pub(crate) paths: Vec<Option<Bound<'py, PyAny>>>,
    pub(crate) metas: Vec<Option<Bound<'py, PyAny>>>,
    /// One Python int per distinct mode, owner, link count, flags and device (`py/ints.rs`).
    pub(crate) ints: Ints<'py>,
}

impl<'py> Made<'py> {
    pub(crate) fn new(py: Python<'py>, file_meta: Bound<'py, PyAny>) -> Self {
        Made { py, file_meta, paths: Vec::new(), metas: Vec::new(), ints: Ints::new(py) }
    }

    /// Every value made, in position order (each position made once).
    pub(crate) fn into_tuple(self) -> PyResult<Bound<'py, PyTuple>> {
        let metas: Vec<Bound<'py, PyAny>> = self.metas.into_iter().flatten().collect();
        PyTuple::new(self.py, metas)
    }

    pub(crate) fn path(&mut self, at: usize, e: &Entry) -> PyResult<Bound<'py, PyAny>> {
        if self.paths.len() <= at {
            self.paths.resize(at + 1, None);
        }
        if let Some(path) = &self.paths[at] {
            return Ok(path.clone());
        }
        let path = fs_str(self.py, &e.path)?;
        self.paths[at] = Some(path.clone());
        Ok(path)
    }

    /// `FileMeta` of `e` (at `at`), its fields in model.FIELD_ORDER as meta_from_stat passes them (owners
    /// recorded); `hardlink`: its first name's path, for a later name.
    pub(crate) fn make(&mut self, at: usize, e: &Entry, hardlink: Option<Bound<'py, PyAny>>) -> PyResult<()> {
        let py = self.py;
        let path = self.path(at, e)?;
        let f = &e.st;
        let none = py.None().into_bound(py);
        let target = match &e.target {
            Some(t) => fs_str(py, t)?,
            None => none.clone(),
        };
        let xattrs = e
            .xattrs
            .iter()
            .map(|(n, v)| PyTuple::new(py, [fs_str(py, n)?, PyBytes::new(py, v).into_any()]))
            .collect::<PyResult<Vec<_>>>()?;
        let rdev = match e.kind {
            Kind::Char | Kind::Block => (libc::major(f.rdev), libc::minor(f.rdev)).into_pyobject(py)?.into_any(),
            _ => none.clone(),
        };
        let fields = [
            path,
            kind_str(py, e.kind).clone().into_any(),
            self.ints.of(f.mode & 0o7777)?,
            int_py(py, f.mtime_ns)?,
            int_py(py, f.atime_ns)?,
            (if e.kind == Kind::File { f.size } else { 0 }).into_pyobject(py)?.into_any(),
            none.clone(),
            target,
            int_py(py, f.ctime_ns)?,
            self.ints.of(f.uid)?,
            self.ints.of(f.gid)?,
            PyTuple::new(py, xattrs)?.into_any(),
            hardlink.unwrap_or_else(|| none.clone()),
            self.ints.of(f.nlink)?,
            none.clone(),
            match e.flags {
                Some(flags) => self.ints.of(flags)?,
                None => none.clone(),
            },
            rdev,
        ];
        let meta = self.file_meta.call1(PyTuple::new(py, fields)?)?;
        if self.metas.len() <= at {
            self.metas.resize(at + 1, None);
        }
        self.metas[at] = Some(meta);
        Ok(())
    }
}
