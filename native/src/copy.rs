//! Copy a file's bytes in the kernel and hash what landed (mirrors `artifactkit/_syscalls.py::copy_range` and
//! `artifactkit/store/content.py::hash_while_copying` / `copy_sparse`).
//!
//! The bytes never enter user space on the way to the destination: `copy_file_range` shares the
//! extents where the filesystem can clone (xfs, btrfs: a reflink) and copies in the kernel elsewhere;
//! the digest is of the destination read back, so it always names the bytes that were stored, even if
//! the source changed in a way no timestamp shows (an `mmap` write).

use std::sync::mpsc::{channel, Sender};

use sha2::{Digest, Sha256};

use crate::syscalls::{self as sys, Errno};
use std::os::fd::RawFd;

/// As content.py's `CHUNK`: the read-back's buffer.
pub const CHUNK: usize = 1 << 20;
/// The kernel copies this much per call before it tells the hasher (content.py's `COPY_CHUNK` is 8 MiB): small
/// enough that the hasher starts soon after the copy.
const COPY_CHUNK: u64 = 4 << 20;
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

/// Feed `count` zero bytes (a hole) to `h`.
pub fn hash_zeros(h: &mut Sha256, mut count: u64) {
    while count > 0 {
        let step = count.min(CHUNK as u64);
        h.update(&ZEROS[..step as usize]);
        count -= step;
    }
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

/// `hash_while_copying`: up to `size + 1` bytes (one more shows the source grew) copied in the kernel on a
/// thread of its own while this thread reads each landed range back from the destination (open for reading too)
/// and hashes it, so a large file costs about one sha256 pass rather than a copy plus a hash; `(sha256, bytes)`.
/// Fewer bytes than copied only where the destination was cut shorter behind the copy (another writer of the
/// store): the digest and the length are of what was read back.
///
/// Why the hasher reads back, not the copier: the copy and the read-back are each a memcpy in the kernel, the hash
/// is user time, and on this project's machines (tmpfs, sha2 with SHA-NI) the kernel's two passes were the slower
/// half. With the read-back on the copier, a 256 MiB publish took the copier's 460 ms while the hasher idled (the
/// benchmark's `large` cell, 2 threads); split this way each thread does about half. It is also the reference's
/// split (`content.py`'s `hash_while_copying`).
pub fn hash_while_copying(src: RawFd, dst: RawFd, size: u64) -> Result<(String, u64), Errno> {
    hash_while_copying_via(copy_range, src, dst, size)
}

/// [`hash_while_copying`] with its copy given (the tests' one that cuts the destination short), the rest the same.
fn hash_while_copying_via<F>(copy: F, src: RawFd, dst: RawFd, size: u64) -> Result<(String, u64), Errno>
where
    F: FnMut(RawFd, RawFd, u64, u64) -> Result<u64, Errno> + Send,
{
    // Unbounded: the copier never waits for the hasher, and it sends one total a chunk (`size / COPY_CHUNK + 2`).
    let (to_hasher, landed) = channel::<u64>();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut hashed = 0u64;
    let mut read_back = Ok(());
    let mut copier_outcome = Ok(());
    std::thread::scope(|s| {
        let outcome = &mut copier_outcome;
        // `to_hasher` moves into the copier: its end disconnects the channel, which ends the loop below.
        s.spawn(move || *outcome = copy_reporting(copy, src, dst, size, &to_hasher));
        for total in &landed {
            match hash_back(dst, hashed, total - hashed, &mut h, &mut buf) {
                Ok(n) => hashed += n,
                Err(e) => read_back = Err(e),
            }
            if read_back.is_err() || hashed < total {
                break; // a refused read-back, or the destination ends before what landed: nothing more to read
            }
        }
        drop(landed); // the copier's next report is refused, and it stops there
    });
    copier_outcome?;
    read_back?;
    Ok((hex(&h.finalize()), hashed))
}

/// The copier: `COPY_CHUNK` at a time (`size + 1` at most), the total landed sent to the hasher after each chunk.
/// It stops at the source's end, once the hasher has gone (it stops only at a read-back that found the destination
/// ended or was refused), or at the first error (the hasher has then hashed a prefix of what landed, and the error
/// is the outcome).
fn copy_reporting<F>(mut copy: F, src: RawFd, dst: RawFd, size: u64, to_hasher: &Sender<u64>) -> Result<(), Errno>
where
    F: FnMut(RawFd, RawFd, u64, u64) -> Result<u64, Errno>,
{
    let mut copied = 0u64;
    while copied <= size {
        let n = copy(src, dst, COPY_CHUNK.min(size + 1 - copied), copied)?;
        copied += n;
        if n == 0 || to_hasher.send(copied).is_err() {
            break;
        }
    }
    Ok(())
}

/// `copy_sparse`: only the data runs copied (in the kernel), holes kept, the digest of the logical bytes as
/// written (runs read back, holes as zeros); `(sha, length)`. A run cut short (the source shrank) ends it.
pub fn copy_sparse(src: RawFd, dst: RawFd, size: u64, extents: &[(u64, u64)]) -> Result<(String, u64), Errno> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut position = 0u64;
    for &(start, length) in extents {
        hash_zeros(&mut h, start.saturating_sub(position));
        let copied = copy_range(src, dst, length, start)?;
        let done = hash_back(dst, start, copied, &mut h, &mut buf)?;
        position = start + done;
        if copied < length {
            return Ok((hex(&h.finalize()), position));
        }
    }
    hash_zeros(&mut h, size.saturating_sub(position));
    sys::ftruncate(dst, size)?;
    Ok((hex(&h.finalize()), size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::os::fd::AsRawFd;

    fn scratch(name: &str, data: &[u8]) -> (File, File) {
        let dir = std::env::temp_dir().join(format!("artifactkit-copy-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut src = File::create(dir.join("src")).unwrap();
        src.write_all(data).unwrap();
        let src = File::open(dir.join("src")).unwrap();
        let dst = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(dir.join("dst")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap(); // the open files stay usable
        (src, dst)
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
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
        hash_zeros(&mut h, (CHUNK as u64) * 2 + 3);
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
    fn the_digest_is_of_what_landed_and_one_byte_more_shows_growth() {
        let data = pattern(2 * (COPY_CHUNK as usize) + 5);
        let (src, dst) = scratch("dense", &data);
        let (sha, n) = hash_while_copying(src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64).unwrap();
        assert_eq!((sha, n), (hex(&Sha256::digest(&data)), data.len() as u64));
        // Captured one byte shorter than it is: the copy reads one past and the length says so.
        let (src, dst) = scratch("grown", &data);
        let (_, n) = hash_while_copying(src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64 - 1).unwrap();
        assert_eq!(n, data.len() as u64);
    }

    #[test]
    fn every_size_around_the_buffers_and_chunks_hashes_what_landed() {
        let (b, c) = (CHUNK, COPY_CHUNK as usize);
        for len in [0, 1, b - 1, b, b + 1, c - 1, c, c + 1, c + b + 3] {
            let data = pattern(len);
            let (src, dst) = scratch(&format!("size-{len}"), &data);
            let got = hash_while_copying(src.as_raw_fd(), dst.as_raw_fd(), len as u64).unwrap();
            assert_eq!(got, (hex(&Sha256::digest(&data)), len as u64), "{len} bytes");
            assert_eq!(std::fs::read(format!("/proc/self/fd/{}", dst.as_raw_fd())).unwrap(), data);
        }
    }

    #[test]
    fn a_destination_cut_short_behind_the_copy_ends_the_digest_where_it_ends() {
        // Another writer of the store truncates the staged file within the last chunk's copy, before the hasher
        // is told it landed: the digest and the length are of what could be read back, and the hasher ends there
        // rather than waiting for bytes that are gone (the probe for one byte more copies nothing: the file stays cut).
        let data = pattern(2 * COPY_CHUNK as usize);
        let (src, dst) = scratch("cut", &data);
        let cut = COPY_CHUNK + 12345;
        let cut_within_the_last_copy = move |s: RawFd, d: RawFd, count: u64, offset: u64| {
            let n = copy_range(s, d, count, offset)?;
            if offset == COPY_CHUNK {
                sys::ftruncate(d, cut)?;
            }
            Ok(n)
        };
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let got =
                hash_while_copying_via(cut_within_the_last_copy, src.as_raw_fd(), dst.as_raw_fd(), 2 * COPY_CHUNK);
            let _ = done.send(got);
        });
        let got = finished.recv_timeout(std::time::Duration::from_secs(60)).expect("the copy never ended");
        assert_eq!(got, Ok((hex(&Sha256::digest(&data[..cut as usize])), cut)));
    }

    #[test]
    fn a_copy_that_fails_midway_is_the_outcome() {
        let data = pattern(3 * COPY_CHUNK as usize);
        let (src, dst) = scratch("copy-eio", &data);
        let eio_after_one = |s: RawFd, d: RawFd, count: u64, offset: u64| {
            if offset == 0 {
                copy_range(s, d, count, offset)
            } else {
                Err(libc::EIO)
            }
        };
        let got = hash_while_copying_via(eio_after_one, src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64);
        assert_eq!(got, Err(libc::EIO));
    }

    #[test]
    fn a_read_back_that_fails_is_the_outcome() {
        // A destination open for writing only: the copy lands, its read-back is refused by the kernel.
        let data = pattern(COPY_CHUNK as usize + 7);
        let (src, _) = scratch("read-ebadf", &data);
        let path = std::env::temp_dir().join(format!("artifactkit-copy-{}-write-only", std::process::id()));
        let dst = OpenOptions::new().write(true).create(true).truncate(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(hash_while_copying(src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64), Err(libc::EBADF));
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
