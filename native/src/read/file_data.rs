//! A file's data: a small file read whole into memory (`read_small_into`), a sparse file's data runs
//! (`data_extents`); mirrors `content.py::read_small` and `data_extents`.

use std::os::fd::RawFd;

use crate::failure::Errno;
use crate::sys::calls as sys;

/// `read_small` (content.py) into `data`, its earlier contents dropped, so a caller reading many files reuses one
/// buffer: one `pread` of `size + 1` in the usual case, never taking a short read for the end.
pub fn read_small_into(fd: RawFd, size: u64, data: &mut Vec<u8>) -> Result<(), Errno> {
    let want = usize::try_from(size + 1).map_err(|_| libc::EFBIG)?;
    data.clear();
    data.resize(want, 0);
    let mut total = 0usize;
    loop {
        let n = sys::pread(fd, &mut data[total..], total as u64)?;
        total += n;
        if n == 0 || total as u64 >= size {
            break;
        }
    }
    data.truncate(total);
    Ok(())
}

/// `data_extents`: `None` for a dense file (one `lseek`), else the data runs up to `size`.
pub fn data_extents(fd: RawFd, size: u64) -> Result<Option<Vec<(u64, u64)>>, Errno> {
    if size == 0 {
        return Ok(None);
    }
    let first_hole = match sys::lseek(fd, 0, libc::SEEK_HOLE) {
        Ok(h) => h,
        Err(e) if [libc::EINVAL, libc::ENXIO, libc::EOPNOTSUPP].contains(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    if first_hole >= size {
        return Ok(None);
    }
    let mut runs = Vec::new();
    let mut offset = 0u64;
    while offset < size {
        let start = match sys::lseek(fd, offset, libc::SEEK_DATA) {
            Ok(s) => s,
            Err(libc::ENXIO) => break, // only a hole from here to the end
            Err(e) => return Err(e),
        };
        let end = sys::lseek(fd, start, libc::SEEK_HOLE)?.min(size);
        runs.push((start, end - start));
        offset = end;
    }
    Ok(Some(runs))
}
