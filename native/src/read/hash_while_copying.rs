//! A dense file's bytes copied in the kernel on a thread of their own while the calling thread reads them back
//! from the destination and hashes them (mirrors `artifactkit/engine/content.py::hash_while_copying`), the
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

use crate::failure::Errno;
use crate::read::copy::{copy_range, hex, CHUNK};
use crate::sys::calls as sys;
use crate::sys::{cancel, threads};

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

enum Side {
    Copier,
    Hasher,
}

/// Each side's end, told to the other however the side ends, a panic (a bug) too: a copier's sets `copy_done`,
/// and after a panic `failed` as well (the hasher may wait for a range it claimed); a hasher's sets
/// `hasher_done`. Without it a panic on either side left the other waiting forever.
struct Ends<'a> {
    handoff: &'a Handoff,
    side: Side,
}

impl Drop for Ends<'_> {
    fn drop(&mut self) {
        let panicked = std::thread::panicking();
        self.handoff.update(|shared| match self.side {
            Side::Copier => {
                shared.copy_done = true;
                if panicked {
                    shared.failed = shared.failed.or(Some(libc::EIO));
                }
            }
            Side::Hasher => shared.hasher_done = true,
        });
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
fn hash_while_copying_via<F>(mut copy: F, src: RawFd, dst: RawFd, size: u64) -> Result<(String, u64), Errno>
where
    F: FnMut(RawFd, RawFd, u64, u64) -> Result<u64, Errno> + Send,
{
    let free = (0..BUFFERS).map(|_| vec![0u8; CHUNK]).collect();
    let handoff = Handoff { shared: Mutex::new(Shared { free, ..Shared::default() }), changed: Condvar::new() };
    let both = std::thread::scope(|s| {
        let copy = &mut copy;
        let watched = cancel::current(); // the copier stops when the hasher's batch is asked to
        let copier = threads::scoped(s, || {
            cancel::watching(watched, || {
                let _ends = Ends { handoff: &handoff, side: Side::Copier };
                copy_steps(copy, src, dst, size, &handoff)?;
                read_ahead(dst, &handoff);
                Ok(())
            })
        })?;
        let hashed = {
            let _ends = Ends { handoff: &handoff, side: Side::Hasher };
            hash_landed(dst, &handoff)
        };
        // A copier that panicked (a bug: none is meant to) is a failed copy here, never a panic in Python.
        Some((copier.join().unwrap_or(Err(libc::EIO)), hashed))
    });
    let (copied, hashed) = match both {
        Some(both) => both,
        // No thread would start (`sys/threads.rs`): the copy, then its read-back (none after a failed copy), here.
        None => {
            copy_steps(&mut copy, src, dst, size, &handoff)?;
            (Ok(()), hash_landed(dst, &handoff))
        }
    };
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
        cancel::check()?; // a stop asked for ends the hash here, and with it (`hasher_done`) the copier's read-ahead
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
/// the source's end, once the hasher has ended, at a destination shorter than what landed, or at the first error
/// (the outcome). `copy_done` is set however it ends.
fn copy_steps<F>(copy: &mut F, src: RawFd, dst: RawFd, size: u64, handoff: &Handoff) -> Result<(), Errno>
where
    F: FnMut(RawFd, RawFd, u64, u64) -> Result<u64, Errno>,
{
    let mut copied = 0u64;
    let outcome = loop {
        if copied > size || handoff.lock().hasher_done {
            break Ok(());
        }
        if let Err(e) = cancel::check() {
            break Err(e);
        }
        // Cut behind the copy: a step more would extend the file over a hole the hasher would read as zeros, a
        // full length and a digest of bytes the source never held. Stop here, so the read-back ends at the cut.
        // Not seen: a cut while a step is in flight (one in-kernel call of up to COPY_CHUNK, which writes on past
        // the cut over a hole). Only the user's own processes can cut it: the staging directories a copy writes
        // into are private to the user (docs/native.md, "What this does not cover").
        match sys::fstat(dst) {
            Err(e) => break Err(e),
            Ok(st) if u64::try_from(st.st_size).unwrap_or(0) < copied => break Ok(()),
            Ok(_) => {}
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
    outcome
}

/// Once the copy is done, while the hasher has not ended: the next unclaimed ranges read back into free buffers
/// for it (a refused read-back is the hasher's outcome, through `failed`).
fn read_ahead(dst: RawFd, handoff: &Handoff) {
    loop {
        let mut shared = handoff.lock();
        // Nothing left to claim ends it too: the hasher needs no buffer back to finish.
        while shared.free.is_empty() && !shared.hasher_done && shared.claimed < shared.landed {
            shared = handoff.wait(shared);
        }
        let (at, landed) = (shared.claimed, shared.landed);
        let Some(mut buf) = shared.free.pop().filter(|_| !shared.hasher_done && at < landed) else { return };
        let want = (landed - at).min(CHUNK as u64) as usize;
        shared.claimed += want as u64;
        drop(shared);
        match read_full(dst, &mut buf[..want], at) {
            Ok(got) => {
                handoff.update(|shared| {
                    shared.ready.insert(at, ReadBack { buf, want, got });
                });
                if got < want {
                    return; // the destination ended here: the hasher ends with this range
                }
            }
            Err(e) => {
                handoff.update(|shared| shared.failed = Some(e));
                return; // the hasher's outcome
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
#[path = "hash_while_copying_tests.rs"]
mod tests;
