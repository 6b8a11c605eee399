//! The door between Python and the core: the `#[pymodule]` `artifactkit._native`, and in the modules below it
//! every Python-facing class and function, the conversions of Python values (at this edge and only here), and
//! the mapping of every failure to `NativeFailure(kind, at, fields)` (`failure.rs`), which
//! `artifactkit/engine/native_errors.py` turns into the class and message the reference engine raises. The only
//! PyO3 code of the crate. One function per job, each called by `artifactkit/engine/native.py`: `capture_tree`,
//! `stage_files`, `rename_staged`, `manifest_lines`, `parse_tree`, `create_files`.

mod captured_tree;
mod create_files;
mod failure;
mod file_metas;
mod ints;
mod manifest_lines;
mod parsed_tree;
mod paths;
mod stage;

use pyo3::prelude::*;

use failure::NativeFailure;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NativeFailure", m.py().get_type::<NativeFailure>())?;
    m.add("RESTORABLE_FLAGS", crate::restore::metadata::RESTORABLE_FLAGS)?;
    m.add("COMPARED_FLAGS", crate::restore::metadata::COMPARED_FLAGS)?;
    m.add("IN_MEMORY_LIMIT", crate::read::stage::IN_MEMORY_LIMIT)?;
    m.add_class::<stage::StageState>()?;
    m.add_function(wrap_pyfunction!(stage::stage_files, m)?)?;
    m.add_function(wrap_pyfunction!(stage::rename_staged, m)?)?;
    m.add_class::<parsed_tree::ParsedTree>()?;
    m.add_function(wrap_pyfunction!(create_files::create_files, m)?)?;
    m.add_function(wrap_pyfunction!(parsed_tree::parse_tree, m)?)?;
    m.add_class::<captured_tree::CapturedTree>()?;
    m.add_function(wrap_pyfunction!(captured_tree::capture_tree, m)?)?;
    m.add_class::<manifest_lines::EncodedLines>()?;
    m.add_function(wrap_pyfunction!(manifest_lines::manifest_lines, m)?)?;
    Ok(())
}
