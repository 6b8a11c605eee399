//! A path's bytes as a C call takes them, a NUL byte refused as `os.open` refuses it (`cstr`), and as a failure
//! names them (`os_string`, `os`: the `OSError` of a call on that path).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;

use crate::failure::{Errno, Failure};

/// `bytes` as a C string, or the `OSError(EINVAL)` naming them that a NUL byte makes.
pub fn cstr(bytes: &[u8]) -> Result<CString, Failure> {
    // No call was made: the path was refused before one (the reference's `os` refuses it with a ValueError).
    CString::new(bytes).map_err(|_| Failure::os("", libc::EINVAL, Some(os_string(bytes))))
}

pub fn os_string(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

/// The `OSError(errno, "call: ...", path)` the call `call` on the path `name` failed with.
pub fn os(call: &'static str, errno: Errno, name: &[u8]) -> Failure {
    Failure::os(call, errno, Some(os_string(name)))
}
