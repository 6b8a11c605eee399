//! Renames of a whole batch between two directories, one after another with the GIL released (mirrors the
//! reference's `os.rename` loop, `artifactkit/engine/select.py::PythonExecutor.move_files`).
//!
//! A publish's staged blobs go into `blobs/` this way once its flush barrier has made them durable, a chunk a
//! call, on a thread of the transaction's while the manifest is assembled and then on the publishing thread
//! too (`artifactkit/store/blob_moves.py`). One thread a call, not the pool: a rename between two directories
//! holds the filesystem's rename mutex (`lock_rename`), and a second thread from the start took a core from
//! the assembly: paired CLI publishes of 100,000 files were 2-6 % faster with one.

use std::ffi::{CString, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStringExt;

use crate::failure::{Failure, Located};
use crate::sys::calls as sys;

/// Rename `src` in `src_dir` to `dst` in `dst_dir` for every pair in order, replacing what `dst` names; the first
/// failure as `OSError(errno, strerror, src, None, dst)`, the pairs after it not renamed.
pub fn rename_all(src_dir: RawFd, dst_dir: RawFd, moves: &[(CString, CString)]) -> Result<(), Located> {
    for (at, (src, dst)) in moves.iter().enumerate() {
        sys::rename_at(src_dir, src, dst_dir, dst).map_err(|errno| Located {
            at,
            failure: Failure::Os {
                call: "rename",
                errno,
                filename: Some(OsString::from_vec(src.to_bytes().to_vec())),
                filename2: Some(OsString::from_vec(dst.to_bytes().to_vec())),
            },
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn names(prefix: &str, count: usize) -> Vec<CString> {
        (0..count).map(|i| CString::new(format!("{prefix}{i}")).unwrap()).collect()
    }

    fn open_dir(path: &std::path::Path) -> std::fs::File {
        std::fs::File::open(path).unwrap()
    }

    #[test]
    fn every_name_moves_and_an_existing_destination_is_replaced() {
        let base = std::env::temp_dir().join(format!("ak-moves-{}", std::process::id()));
        let (from, to) = (base.join("from"), base.join("to"));
        std::fs::create_dir_all(&from).unwrap();
        std::fs::create_dir_all(&to).unwrap();
        for i in 0..50 {
            std::fs::write(from.join(format!("s{i}")), format!("{i}")).unwrap();
        }
        std::fs::write(to.join("d7"), "old").unwrap();
        let moves: Vec<_> = names("s", 50).into_iter().zip(names("d", 50)).collect();
        let (src, dst) = (open_dir(&from), open_dir(&to));
        rename_all(src.as_raw_fd(), dst.as_raw_fd(), &moves).unwrap();
        assert_eq!(std::fs::read_dir(&from).unwrap().count(), 0);
        assert_eq!(std::fs::read_to_string(to.join("d7")).unwrap(), "7");
        assert_eq!(std::fs::read_dir(&to).unwrap().count(), 50);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_missing_source_stops_the_batch_there_naming_both_names() {
        let base = std::env::temp_dir().join(format!("ak-moves-missing-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        for i in 0..20 {
            std::fs::write(base.join(format!("s{i}")), "").unwrap();
        }
        let dir = open_dir(&base);
        let mut sources = names("s", 20);
        sources[3] = CString::new("absent").unwrap();
        let moves: Vec<_> = sources.into_iter().zip(names("d", 20)).collect();
        let err = rename_all(dir.as_raw_fd(), dir.as_raw_fd(), &moves).unwrap_err();
        assert_eq!(err.at, 3);
        match err.failure {
            Failure::Os { call, errno, filename, filename2 } => {
                assert_eq!(call, "rename");
                assert_eq!(errno, libc::ENOENT);
                assert_eq!((filename.unwrap(), filename2.unwrap()), (OsString::from("absent"), OsString::from("d3")));
            }
            other => panic!("{other:?}"),
        }
        // The three before it moved, none after it.
        let mut left: Vec<_> = std::fs::read_dir(&base).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left.len(), 20);
        assert!(["d0", "d1", "d2", "s3", "s4", "s19"].iter().all(|n| left.contains(&OsString::from(n))));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
