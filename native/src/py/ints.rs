//! Python ints of the core's values: the fast conversion, and one object per value where entries share them.

use std::collections::HashMap;

use pyo3::prelude::*;

/// A Python int of an i128: the fast conversion where it fits in 64 bits (every real time does).
pub fn int_py<'py>(py: Python<'py>, value: i128) -> PyResult<Bound<'py, PyAny>> {
    Ok(match i64::try_from(value) {
        Ok(v) => v.into_pyobject(py)?.into_any(),
        Err(_) => value.into_pyobject(py)?.into_any(),
    })
}

/// One Python int per distinct value of the fields entries share (mode, owners, link count, flags, device):
/// a new int is 32 bytes (each its own for mode, uid 1000, gid 1000 and device: 9.4 MiB of 100,000 files).
pub struct Ints<'py> {
    py: Python<'py>,
    made: HashMap<i128, Bound<'py, PyAny>>,
}

impl<'py> Ints<'py> {
    pub fn new(py: Python<'py>) -> Self {
        Self { py, made: HashMap::new() }
    }

    pub fn of(&mut self, value: impl Into<i128>) -> PyResult<Bound<'py, PyAny>> {
        let value = value.into();
        if let Some(made) = self.made.get(&value) {
            return Ok(made.clone());
        }
        let made = int_py(self.py, value)?;
        self.made.insert(value, made.clone());
        Ok(made)
    }
}
