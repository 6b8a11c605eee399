//! The edge of the manifest parse: `parse_manifest`'s Python values (the `FileMeta`s, built by calling the
//! class, and a decline as `NativeFailure`); the parse and every check are `manifest::parse`'s.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::entry_kind::Kind;
use crate::manifest::parse::parsed::Entry;
use crate::manifest::parse::{parse, MAX_FILE_BYTES};
use crate::py::failure::decline_to_py;

/// `FileMeta`'s arguments in `model.FIELD_ORDER` (`nlink` is never in a manifest: `None`).
pub(crate) fn entry_args<'py>(
    py: Python<'py>,
    e: &Entry<'_>,
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
    let head = (PyString::new(py, &e.path), &kinds[e.kind as usize], e.mode, e.mtime_ns, e.atime_ns, e.size);
    let tail = (text(&e.sha256), text(&e.target), e.ctime_ns, e.uid, e.gid, xattrs, text(&e.hardlink), none());
    let mut args: Vec<Bound<'py, PyAny>> = head.into_pyobject(py)?.iter().collect();
    args.extend(tail.into_pyobject(py)?.iter());
    args.extend((extents, e.flags, e.rdev).into_pyobject(py)?.iter());
    PyTuple::new(py, args)
}

/// Parse and check manifest bytes as `manifest.parse_manifest` does: `(name, source_read_noatime, entries)`,
/// each entry `file_meta(*fields)`; `size_limit`: the largest file an entry may claim (`file_size_limit()`). A
/// manifest the core does not accept raises
/// `NativeFailure("manifest_refused" | "manifest_unsure", entry position or None, {"check", "detail"})`.
#[pyfunction]
#[pyo3(signature = (data, file_meta, size_limit=MAX_FILE_BYTES))]
pub(crate) fn parse_manifest<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
    file_meta: &Bound<'py, PyAny>,
    size_limit: u64,
) -> PyResult<(Bound<'py, PyString>, bool, Bound<'py, PyTuple>)> {
    let bytes = data.as_bytes();
    let parsed = py.detach(|| parse(bytes, size_limit)).map_err(|decline| decline_to_py(py, decline))?;
    let kinds: Vec<_> = Kind::ALL.iter().map(|kind| PyString::intern(py, kind.name())).collect();
    let entries =
        parsed.entries.iter().map(|e| file_meta.call1(entry_args(py, e, &kinds)?)).collect::<PyResult<Vec<_>>>()?;
    Ok((PyString::new(py, &parsed.name), parsed.noatime, PyTuple::new(py, entries)?))
}
