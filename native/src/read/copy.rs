//! Copy a file's bytes in the kernel and hash what landed (mirrors `artifactkit/_syscalls.py::copy_range` and
//! `artifactkit/engine/content.py::copy_sparse`; a dense file's copy on two threads is `read/hash_while_copying.rs`).
//!
//! The bytes never enter user space on the way to the destination: `copy_file_range` shares the
//! extents where the filesystem can clone (xfs, btrfs: a reflink) and copies in the kernel elsewhere;
//! the digest is of the destination read back, so it always names the bytes that were stored, even if
//! the source changed in a way no timestamp shows (an `mmap` write).

use sha2::{Digest, Sha256};

use crate::failure::Errno;
use crate::sys::calls as sys;
use crate::sys::cancel;
use std::os::fd::RawFd;

/// As content.py's `CHUNK`: the read-back's buffer.
pub const CHUNK: usize = 1 << 20;
static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// Lowercase hex of a digest, by table: a `format!` per byte was 2 % of a 100,000-file publish's CPU.
pub fn hex(digest: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(digest.len() * 2);
    for &b in digest {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    text
}

/// Feed `count` zero bytes (a hole) to `h`; `cancel::STOPPED` where the batch is asked to stop (a hole of a
/// sparse file may be as large as the filesystem allows: tebibytes hash for many minutes).
pub fn hash_zeros(h: &mut Sha256, mut count: u64) -> Result<(), Errno> {
    while count > 0 {
        cancel::check()?;
        let step = count.min(CHUNK as u64);
        h.update(&ZEROS[..step as usize]);
        count -= step;
    }
    Ok(())
}

/// `copy_range`: up to `count` bytes at `offset` of `src` to the same offset of `dst`, in the kernel;
/// `copy_file_range` first, `sendfile` from where it stopped once the kernel refuses it (`EXDEV` across
/// filesystems since 5.19, `ENOSYS`, `EINVAL`, `EOPNOTSUPP`). Fewer than `count` only where `src` ended.
pub fn copy_range(src: RawFd, dst: RawFd, count: u64, offset: u64) -> Result<u64, Errno> {
    copy_range_via(sys::copy_file_range, src, dst, count, offset)
}

/// [`copy_range`] with its `copy_file_range` given (the tests' failing one), the same loop otherwise.
fn copy_range_via<F>(mut cfr: F, src: RawFd, dst: RawFd, count: u64, offset: u64) -> Result<u64, Errno>
where
    F: FnMut(RawFd, RawFd, usize, u64) -> Result<usize, Errno>,
{
    let mut done = 0u64;
    let mut use_cfr = true;
    while done < count {
        cancel::check()?; // between the kernel's calls (each up to 2 GiB): a stop asked for ends a long run here
        let want = usize::try_from(count - done).unwrap_or(usize::MAX);
        let n = if use_cfr {
            match cfr(src, dst, want, offset + done) {
                Ok(n) => n,
                Err(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) => {
                    use_cfr = false;
                    continue;
                }
                Err(e) => return Err(e),
            }
        } else {
            sys::sendfile_at(src, dst, want, offset + done)?
        };
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    Ok(done)
}

/// Hash `length` bytes of `fd` from `start` into `h`, read back with `pread`; the bytes there (fewer only
/// where the file ends).
fn hash_back(fd: RawFd, start: u64, length: u64, h: &mut Sha256, buf: &mut [u8]) -> Result<u64, Errno> {
    let mut done = 0u64;
    while done < length {
        cancel::check()?;
        let want = (length - done).min(buf.len() as u64) as usize;
        let n = sys::pread(fd, &mut buf[..want], start + done)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        done += n as u64;
    }
    Ok(done)
}

/// `copy_sparse`: only the data runs copied (in the kernel), holes kept, the digest of the logical bytes as
/// written (runs read back, holes as zeros); `(sha, length)`. A run cut short (the source shrank) ends it.
pub fn copy_sparse(src: RawFd, dst: RawFd, size: u64, extents: &[(u64, u64)]) -> Result<(String, u64), Errno> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut position = 0u64;
    for &(start, length) in extents {
        hash_zeros(&mut h, start.saturating_sub(position))?;
        let copied = copy_range(src, dst, length, start)?;
        let done = hash_back(dst, start, copied, &mut h, &mut buf)?;
        position = start + done;
        if copied < length {
            return Ok((hex(&h.finalize()), position));
        }
    }
    hash_zeros(&mut h, size.saturating_sub(position))?;
    sys::ftruncate(dst, size)?;
    Ok((hex(&h.finalize()), size))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::os::fd::AsRawFd;

    pub(crate) fn scratch(name: &str, data: &[u8]) -> (File, File) {
        let dir = std::env::temp_dir().join(format!("artifactkit-copy-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut src = File::create(dir.join("src")).unwrap();
        src.write_all(data).unwrap();
        let src = File::open(dir.join("src")).unwrap();
        let dst = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(dir.join("dst")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap(); // the open files stay usable
        (src, dst)
    }

    pub(crate) fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn a_stop_asked_for_ends_a_sparse_copy_in_its_holes_and_runs() {
        let (src, dst) = scratch("sparse-stopped", &pattern(CHUNK));
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        // The hole (1 GiB) is not hashed at all once stopped; a run of data stops before its copy too.
        for runs in [&[][..], &[(0, CHUNK as u64)][..]] {
            let got =
                cancel::watching(Some(flag.clone()), || copy_sparse(src.as_raw_fd(), dst.as_raw_fd(), 1 << 30, runs));
            assert_eq!(got, Err(cancel::STOPPED), "{runs:?}");
        }
        assert_eq!(dst.metadata().unwrap().len(), 0, "nothing copied once stopped");
    }

    #[test]
    fn hex_is_lowercase_sha256() {
        assert_eq!(hex(&Sha256::digest(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn hex_spells_every_byte_as_two_lowercase_digits() {
        let every: Vec<u8> = (0..=255).collect();
        let by_format: String = every.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&every), by_format);
    }

    #[test]
    fn zeros_hash_like_a_buffer_of_zeros() {
        let mut h = Sha256::new();
        hash_zeros(&mut h, (CHUNK as u64) * 2 + 3).unwrap();
        assert_eq!(hex(&h.finalize()), hex(&Sha256::digest(vec![0u8; CHUNK * 2 + 3])));
    }

    #[test]
    fn a_copy_refused_midway_goes_on_with_sendfile_from_where_it_stopped() {
        // The kernel copies part, then refuses (as across filesystems): every byte must still land once.
        let data = pattern(3 * CHUNK + 17);
        let (src, dst) = scratch("midway", &data);
        let mut calls = 0;
        let partial_then_exdev = |s: RawFd, d: RawFd, count: usize, offset: u64| {
            calls += 1;
            if calls == 1 {
                sys::copy_file_range(s, d, count.min(12345), offset)
            } else {
                Err(libc::EXDEV)
            }
        };
        let n = copy_range_via(partial_then_exdev, src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64 + 1, 0);
        assert_eq!(n, Ok(data.len() as u64));
        assert!(calls >= 2);
        assert_eq!(std::fs::read(format!("/proc/self/fd/{}", dst.as_raw_fd())).unwrap(), data);
    }

    #[test]
    fn an_error_that_is_not_a_refusal_is_returned() {
        let (src, dst) = scratch("eio", b"abc");
        let eio = |_: RawFd, _: RawFd, _: usize, _: u64| Err(libc::EIO);
        assert_eq!(copy_range_via(eio, src.as_raw_fd(), dst.as_raw_fd(), 3, 0), Err(libc::EIO));
    }

    #[test]
    fn a_sparse_copy_hashes_holes_as_zeros_and_keeps_the_length() {
        let mut data = vec![0u8; 3 * CHUNK];
        data[CHUNK..CHUNK + 10].copy_from_slice(b"0123456789");
        let (src, dst) = scratch("sparse", &data);
        let (sha, n) = copy_sparse(src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64, &[(CHUNK as u64, 10)]).unwrap();
        assert_eq!((sha, n), (hex(&Sha256::digest(&data)), data.len() as u64));
        assert_eq!(std::fs::read(format!("/proc/self/fd/{}", dst.as_raw_fd())).unwrap(), data);
    }
}
