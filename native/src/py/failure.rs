//! A failure of the core as Python receives it: `NativeFailure(kind, position, fields)`, every `Failure` and
//! every declined manifest mapped to its kind and its fields here, in one place, which
//! `artifactkit/engine/native_errors.py` turns into the class and message the reference
//! engine raises.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::failure::{Failure, Located, StatFacts};
use crate::manifest::parse::parsed::Decline;

create_exception!(_native, NativeFailure, PyException, "A batch failed: (kind, position, fields).");

/// `os.stat_result`'s 19 fields, so Python can rebuild the very `lstat` the read-back saw.
fn stat_tuple(py: Python<'_>, f: &StatFacts) -> PyResult<Py<PyTuple>> {
    let secs = |ns: i128| ns.div_euclid(1_000_000_000);
    let float = |ns: i128| ns as f64 / 1e9;
    let head =
        (f.mode, f.ino, f.dev, f.nlink, f.uid, f.gid, f.size, secs(f.atime_ns), secs(f.mtime_ns), secs(f.ctime_ns));
    let tail = (
        float(f.atime_ns),
        float(f.mtime_ns),
        float(f.ctime_ns),
        f.atime_ns,
        f.mtime_ns,
        f.ctime_ns,
        f.blksize,
        f.blocks,
        f.rdev,
    );
    let mut items: Vec<Bound<'_, PyAny>> = head.into_pyobject(py)?.iter().collect();
    items.extend(tail.into_pyobject(py)?.iter());
    Ok(PyTuple::new(py, items)?.unbind())
}

pub(crate) fn failure_to_py(py: Python<'_>, located: Located) -> PyErr {
    let fields = PyDict::new(py);
    let kind = match fill(py, &fields, located.failure) {
        Ok(kind) => kind,
        Err(err) => return err,
    };
    NativeFailure::new_err((kind, located.at, fields.unbind()))
}

fn fill(py: Python<'_>, d: &Bound<'_, PyDict>, failure: Failure) -> PyResult<&'static str> {
    Ok(match failure {
        Failure::Os { call, errno, filename, filename2 } => {
            d.set_item("call", call)?;
            d.set_item("errno", errno)?;
            d.set_item("filename", filename)?;
            d.set_item("filename2", filename2)?;
            "os"
        }
        Failure::SourceSymlink { path } => {
            d.set_item("path", path)?;
            "source_symlink"
        }
        Failure::SourceChanged { path, when, found } => {
            d.set_item("path", path)?;
            d.set_item("when", when)?;
            d.set_item("stat", stat_tuple(py, &found)?)?;
            "source_changed"
        }
        Failure::SourceLength { path, count } => {
            d.set_item("path", path)?;
            d.set_item("count", count)?;
            "source_length"
        }
        Failure::Blob { what, sha, path, actual_size, actual_sha } => {
            d.set_item("what", what)?;
            d.set_item("sha", sha)?;
            d.set_item("path", path)?;
            d.set_item("actual_size", actual_size)?;
            d.set_item("actual_sha", actual_sha)?;
            "blob"
        }
        Failure::SourceXattrs { path, errno } => {
            d.set_item("path", path)?;
            d.set_item("errno", errno)?;
            "source_xattrs"
        }
        Failure::Xattrs { path, errno } => {
            d.set_item("path", path)?;
            d.set_item("errno", errno)?;
            "xattrs"
        }
        Failure::Flags { path, errno } => {
            d.set_item("path", path)?;
            d.set_item("errno", errno)?;
            "flags"
        }
        Failure::ReadBack { xattrs, flags } => {
            let xattrs =
                xattrs.map(|x| x.into_iter().map(|(n, v)| (n, PyBytes::new(py, &v).unbind())).collect::<Vec<_>>());
            d.set_item("xattrs", xattrs)?;
            d.set_item("flags", flags)?;
            "read_back"
        }
        Failure::Verify { wrong } => {
            let wrong = wrong.iter().map(|(at, f)| Ok((*at, stat_tuple(py, f)?))).collect::<PyResult<Vec<_>>>()?;
            d.set_item("wrong", wrong)?;
            "verify"
        }
        Failure::ScanRoot => "scan_root",
        Failure::DirReplaced { rel, when } => {
            d.set_item("rel", rel)?;
            d.set_item("when", when)?;
            "dir_replaced"
        }
        Failure::Vanished { gone, name } => {
            d.set_item("gone", gone)?;
            d.set_item("name", name)?;
            "vanished"
        }
        Failure::LinkChanged { path } => {
            d.set_item("path", path)?;
            "link_changed"
        }
        Failure::BadTarget { path, target } => {
            d.set_item("path", path)?;
            d.set_item("target", target)?;
            "bad_target"
        }
        Failure::Unsupported { paths } => {
            d.set_item("paths", paths)?;
            "unsupported"
        }
        Failure::TooManyRuns { count } => {
            d.set_item("count", count)?;
            "too_many_runs"
        }
        Failure::Stopped => "stopped",
    })
}

pub(crate) fn decline_to_py(py: Python<'_>, decline: Decline) -> PyErr {
    let fields = PyDict::new(py);
    let filled = fields.set_item("check", decline.check).and_then(|()| fields.set_item("detail", &decline.detail));
    if let Err(err) = filled {
        return err;
    }
    let kind = if decline.unsure { "manifest_unsure" } else { "manifest_refused" };
    NativeFailure::new_err((kind, decline.at, fields.unbind()))
}
