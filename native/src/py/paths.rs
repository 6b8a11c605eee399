//! Paths between Python and the core: a `str` path's bytes as `os.fsencode` makes them, and bytes as the `str`
//! `os.fsdecode` makes of them.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use pyo3::prelude::*;

pub(crate) fn bytes_of(s: OsString) -> Vec<u8> {
    s.into_vec()
}

/// Bytes as `os.fsdecode` makes a `str` of them (PyO3 decodes with the filesystem encoding's handler).
pub(crate) fn fs_str<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    Ok(OsStr::from_bytes(bytes).into_pyobject(py)?.into_any())
}
