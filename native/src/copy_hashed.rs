//! A dense file's bytes copied in the kernel on a thread of their own while the calling thread reads them back
//! from the destination and hashes them (mirrors `artifactkit/store/content.py::hash_while_copying`), the
//! read-back shared by the copier once its copy is done.
//!
//! The digest is of the destination read back, so it names the bytes that were stored even if the source
//! changed in a way no timestamp shows (an `mmap` write). Why the work is split this way: the copy and the
//! read-back are each a pass of the kernel's memcpy, the hash is user time, and on this project's machines
//! (tmpfs, sha2 with SHA-NI) the two kernel passes outweigh the hash. With both passes on the copier, a 256 MiB
//! publish took the copier's 460 ms of system time while the hasher's sha256 took 190 ms (the benchmark's
//! `large` cell, 2 threads); with the read-back on the hasher alone, the copier was done in 240 ms and the hasher
//! in 410 (`strace -f -T`). So the hasher reads back what landed while the copier copies, and once the copier is
//! done it reads ahead of the hasher into a few buffers, which the hasher then only hashes.

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use sha2::{Digest, Sha256};

use crate::copy::{copy_range, hex, CHUNK};
use crate::syscalls::{self as sys, Errno};

/// The kernel copies this much per call before it tells the hasher (content.py's `COPY_CHUNK` is 8 MiB): small
/// enough that the hasher starts soon after the copy.
const COPY_CHUNK: u64 = 4 << 20;
/// Buffers of `CHUNK` the copier may fill ahead of the hasher once its copy is done.
const BUFFERS: usize = 4;

/// A range read back by the copier: `got` of its `want` bytes are the destination's (fewer only where it ended).
struct ReadBack {
    buf: Vec<u8>,
    want: usize,
    got: usize,
}

/// What the two threads share, under one lock. Every range below `claimed` has its reader: the hasher reads its
/// own claims itself, the copier's wait in `ready` until the hasher reaches them. Both claim in order, so the
/// range at the hasher's position is always its own, in `ready`, being read by the copier, or next to claim.
#[derive(Default)]
struct Shared {
    landed: u64,
    copy_done: bool,
    claimed: u64,
    ready: BTreeMap<u64, ReadBack>,
    free: Vec<Vec<u8>>,
    /// The hasher has ended (the destination's end, a refused read-back, or all of it hashed): the copier stops.
    hasher_done: bool,
    /// A read-back the kernel refused the copier.
    failed: Option<Errno>,
}

struct Handoff {
    shared: Mutex<Shared>,
    changed: Condvar,
}

impl Handoff {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A poisoned lock means a thread panicked (a bug): what it left is still each field's last value.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, Shared>) -> MutexGuard<'a, Shared> {
        self.changed.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, change: impl FnOnce(&mut Shared)) {
        change(&mut self.lock());
        self.changed.notify_all();
    }
}

/// `hash_while_copying`: up to `size + 1` bytes (one more shows the source grew) copied in the kernel on a
/// thread of its own, read back from the destination (open for reading too) and hashed on this one, so a large
/// file costs about one sha256 pass rather than a copy plus a hash; `(sha256, bytes)`. Fewer bytes than copied
/// only where the destination was cut shorter behind the copy (another writer of the store): the digest and the
/// length are of what was read back, and the copier stops at its next step.
pub fn hash_while_copying(src: RawFd, dst: RawFd, size: u64) -> Result<(String, u64), Errno> {
    hash_while_copying_via(copy_range, src, dst, size)
}

/// [`hash_while_copying`] with its copy given (the tests' one that cuts the destination short), the rest the same.
fn hash_while_copying_via<F>(copy: F, src: RawFd, dst: RawFd, size: u64) -> Result<(String, u64), Errno>
where
    F: FnMut(RawFd, RawFd, u64, u64) -> Result<u64, Errno> + Send,
{
    let free = (0..BUFFERS).map(|_| vec![0u8; CHUNK]).collect();
    let handoff = Handoff { shared: Mutex::new(Shared { free, ..Shared::default() }), changed: Condvar::new() };
    let (copied, hashed) = std::thread::scope(|s| {
        let copier = s.spawn(|| copy_then_read_ahead(copy, src, dst, size, &handoff));
        let hashed = hash_landed(dst, &handoff);
        handoff.update(|shared| shared.hasher_done = true);
        // A copier that panicked (a bug: none is meant to) is a failed copy here, never a panic in Python.
        (copier.join().unwrap_or(Err(libc::EIO)), hashed)
    });
    copied?;
    let (h, count) = hashed?;
    Ok((hex(&h.finalize()), count))
}

/// The hasher: from offset 0, each range as its reader left it, in order, until everything the copier landed
/// is hashed, or a range ends short (the destination ended there), or a read-back is refused.
fn hash_landed(dst: RawFd, handoff: &Handoff) -> Result<(Sha256, u64), Errno> {
    let mut h = Sha256::new();
    let mut own = vec![0u8; CHUNK];
    let mut at = 0u64;
    loop {
        let mut shared = handoff.lock();
        let (buf, want, got) = loop {
            if let Some(e) = shared.failed {
                return Err(e);
            }
            if let Some(read) = shared.ready.remove(&at) {
                break (Some(read.buf), read.want, read.got);
            }
            if shared.claimed == at && shared.landed > at {
                let want = (shared.landed - at).min(CHUNK as u64) as usize;
                shared.claimed += want as u64;
                break (None, want, 0);
            }
            if shared.copy_done && shared.claimed == at {
                return Ok((h, at)); // everything that landed is hashed
            }
            shared = handoff.wait(shared);
        };
        drop(shared);
        let got = match buf {
            Some(buf) => {
                h.update(&buf[..got]);
                handoff.update(|shared| shared.free.push(buf));
                got
            }
            None => {
                let got = read_full(dst, &mut own[..want], at)?;
                h.update(&own[..got]);
                got
            }
        };
        at += got as u64;
        if got < want {
            return Ok((h, at)); // the destination ends before what landed: nothing more to read
        }
    }
}

/// The copier: `COPY_CHUNK` at a time (`size + 1` at most), the total landed shared after each step; it stops at
/// the source's end, once the hasher has ended, or at the first error (the outcome). Then, while the hasher has
/// not, it reads the next unclaimed ranges back into free buffers for it.
fn copy_then_read_ahead<F>(mut copy: F, src: RawFd, dst: RawFd, size: u64, handoff: &Handoff) -> Result<(), Errno>
where
    F: FnMut(RawFd, RawFd, u64, u64) -> Result<u64, Errno>,
{
    let mut copied = 0u64;
    let outcome = loop {
        if copied > size || handoff.lock().hasher_done {
            break Ok(());
        }
        match copy(src, dst, COPY_CHUNK.min(size + 1 - copied), copied) {
            Err(e) => break Err(e),
            Ok(0) => break Ok(()),
            Ok(n) => {
                copied += n;
                handoff.update(|shared| shared.landed = copied);
            }
        }
    };
    handoff.update(|shared| shared.copy_done = true);
    outcome?;
    loop {
        let mut shared = handoff.lock();
        // Nothing left to claim ends it too: the hasher needs no buffer back to finish.
        while shared.free.is_empty() && !shared.hasher_done && shared.claimed < shared.landed {
            shared = handoff.wait(shared);
        }
        let (at, landed) = (shared.claimed, shared.landed);
        let Some(mut buf) = shared.free.pop().filter(|_| !shared.hasher_done && at < landed) else { return Ok(()) };
        let want = (landed - at).min(CHUNK as u64) as usize;
        shared.claimed += want as u64;
        drop(shared);
        match read_full(dst, &mut buf[..want], at) {
            Ok(got) => {
                handoff.update(|shared| {
                    shared.ready.insert(at, ReadBack { buf, want, got });
                });
                if got < want {
                    return Ok(()); // the destination ended here: the hasher ends with this range
                }
            }
            Err(e) => {
                handoff.update(|shared| shared.failed = Some(e));
                return Ok(()); // the hasher's outcome
            }
        }
    }
}

/// `buf.len()` bytes of `fd` from `at`, or fewer where the file ends.
fn read_full(fd: RawFd, buf: &mut [u8], at: u64) -> Result<usize, Errno> {
    let mut done = 0;
    while done < buf.len() {
        let n = sys::pread(fd, &mut buf[done..], at + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::tests::{pattern, scratch};
    use std::fs::OpenOptions;
    use std::os::fd::AsRawFd;

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

    fn handoff_with(buffers: usize) -> Handoff {
        let free = (0..buffers).map(|_| vec![0u8; CHUNK]).collect();
        Handoff { shared: Mutex::new(Shared { free, ..Shared::default() }), changed: Condvar::new() }
    }

    #[test]
    fn ranges_the_copier_read_ahead_are_hashed_in_order_without_a_read_of_the_hashers_own() {
        // The copier alone first, with a buffer for every range: it copies, then reads all of it ahead. The hasher
        // then gets an fd that cannot be read: any range it read itself would be refused (EBADF).
        let data = pattern(2 * COPY_CHUNK as usize + CHUNK / 2);
        let (src, dst) = scratch("ahead", &data);
        let handoff = handoff_with(data.len() / CHUNK + 1);
        copy_then_read_ahead(copy_range, src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64, &handoff).unwrap();
        assert_eq!(handoff.lock().ready.len(), data.len() / CHUNK + 1);
        let (h, n) = hash_landed(-1, &handoff).unwrap();
        assert_eq!((hex(&h.finalize()), n), (hex(&Sha256::digest(&data)), data.len() as u64));
    }

    #[test]
    fn a_range_read_ahead_short_ends_the_digest_there() {
        // Cut behind the copy before the copier reads ahead: its ranges end at the cut, and so does the digest.
        let data = pattern(3 * CHUNK);
        let (src, dst) = scratch("ahead-cut", &data);
        let cut = CHUNK + 777;
        let cut_after_copying = |s: RawFd, d: RawFd, count: u64, offset: u64| {
            let n = copy_range(s, d, count, offset)?;
            if n == 0 {
                sys::ftruncate(d, cut as u64)?;
            }
            Ok(n)
        };
        let handoff = handoff_with(4);
        copy_then_read_ahead(cut_after_copying, src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64, &handoff).unwrap();
        let (h, n) = hash_landed(-1, &handoff).unwrap();
        assert_eq!((hex(&h.finalize()), n), (hex(&Sha256::digest(&data[..cut])), cut as u64));
    }
}
