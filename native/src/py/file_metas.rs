//! An entry as the `FileMeta` the reference makes of it, its fields in `model.FIELD_ORDER`: a scanned one as the
//! reference's scan makes it (`Made`: its path and its shared ints made once), a parsed one as the reference's
//! parse does (`entry_args`); the pair fields (`manifest::fields::PAIR_FIELDS`) last, as `FileMeta` orders them.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::entry_kind::Kind;
use crate::manifest::fields::{captured_pairs, Pair, Pairs, PAIR_FIELDS};
use crate::manifest::parse::parsed::Entry as ParsedEntry;
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
        let fixed = [
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
        ];
        let mut fields = Vec::with_capacity(fixed.len() + PAIR_FIELDS.len());
        fields.extend(fixed);
        push_pairs(py, &captured_pairs(e.kind, f), &mut fields)?;
        let meta = self.file_meta.call1(PyTuple::new(py, fields)?)?;
        if self.metas.len() <= at {
            self.metas.resize(at + 1, None);
        }
        self.metas[at] = Some(meta);
        Ok(())
    }
}

/// `FileMeta`'s arguments in `model.FIELD_ORDER` (`nlink` is never in a manifest: `None`).
pub(crate) fn entry_args<'py>(
    py: Python<'py>,
    e: &ParsedEntry<'_>,
    kinds: &[Bound<'py, PyString>],
) -> PyResult<Bound<'py, PyTuple>> {
    let none = || py.None().into_bound(py);
    let text =
        |s: &Option<std::borrow::Cow<'_, str>>| s.as_deref().map_or_else(none, |s| PyString::new(py, s).into_any());
    let xattrs = match &e.xattrs {
        None => none(),
        Some(xattrs) => {
            PyTuple::new(py, xattrs.iter().map(|(name, value)| (name.as_ref(), PyBytes::new(py, value))))?.into_any()
        }
    };
    let extents = match &e.extents {
        None => none(),
        Some(runs) => PyTuple::new(py, runs)?.into_any(),
    };
    // Times past 64 bits (2262 on, before 1677) are ints too; the common ones take int_py's fast conversion.
    let (mtime, atime) = (int_py(py, e.mtime_ns)?, int_py(py, e.atime_ns)?);
    let ctime = e.ctime_ns.map_or_else(|| Ok(none()), |ns| int_py(py, ns))?;
    let head = (PyString::new(py, &e.path), &kinds[e.kind as usize], e.mode, mtime, atime, e.size);
    let tail = (text(&e.sha256), text(&e.target), ctime, e.uid, e.gid, xattrs, text(&e.hardlink), none());
    let mut args: Vec<Bound<'py, PyAny>> = head.into_pyobject(py)?.iter().collect();
    args.extend(tail.into_pyobject(py)?.iter());
    args.extend((extents, e.flags).into_pyobject(py)?.iter());
    push_pairs(py, &e.pairs, &mut args)?;
    PyTuple::new(py, args)
}

/// The pair fields as `FileMeta` holds them (`(a, b)` or `None`), in `PAIR_FIELDS`' order: its last arguments.
fn push_pairs<'py>(py: Python<'py>, pairs: &Pairs<Pair>, args: &mut Vec<Bound<'py, PyAny>>) -> PyResult<()> {
    for &pair in pairs {
        args.push(pair.into_pyobject(py)?.into_any());
    }
    Ok(())
}
