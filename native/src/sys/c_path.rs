//! A path's bytes as a C call takes them, a NUL byte refused as `os.open` refuses it (`cstr`), and as a failure
//! names them (`os_string`).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;

use crate::failure::Failure;

/// `bytes` as a C string, or the `OSError(EINVAL)` naming them that a NUL byte makes.
pub fn cstr(bytes: &[u8]) -> Result<CString, Failure> {
    CString::new(bytes).map_err(|_| Failure::os(libc::EINVAL, Some(os_string(bytes))))
}

pub fn os_string(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}
