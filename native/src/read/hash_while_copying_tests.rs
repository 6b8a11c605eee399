//! `read/hash_while_copying.rs`'s tests: the two threads' outcomes on real files, cut, failing and panicking copies.

use super::*;
use crate::read::copy::tests::{pattern, scratch};
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
        let got = hash_while_copying_via(cut_within_the_last_copy, src.as_raw_fd(), dst.as_raw_fd(), 2 * COPY_CHUNK);
        let _ = done.send(got);
    });
    let got = finished.recv_timeout(std::time::Duration::from_secs(60)).expect("the copy never ended");
    assert_eq!(got, Ok((hex(&Sha256::digest(&data[..cut as usize])), cut)));
}

#[test]
fn a_destination_cut_between_steps_stops_the_copy_there() {
    // Cut after the second of three steps: were the third copied, it would extend the file over a hole the
    // hasher would read as zeros, a full length and a digest of bytes the source never held. The copier sees
    // the cut before its next step and stops, so the digest and the length end at the cut.
    let data = pattern(3 * COPY_CHUNK as usize);
    let (src, dst) = scratch("cut-between", &data);
    let cut = COPY_CHUNK + 12345;
    let cut_after_the_second_copy = move |s: RawFd, d: RawFd, count: u64, offset: u64| {
        let n = copy_range(s, d, count, offset)?;
        if offset == COPY_CHUNK {
            sys::ftruncate(d, cut)?;
        }
        Ok(n)
    };
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let got = hash_while_copying_via(cut_after_the_second_copy, src.as_raw_fd(), dst.as_raw_fd(), 3 * COPY_CHUNK);
        let _ = done.send((got, std::fs::metadata(format!("/proc/self/fd/{}", dst.as_raw_fd())).map(|m| m.len())));
    });
    let (got, len) = finished.recv_timeout(std::time::Duration::from_secs(60)).expect("the copy never ended");
    assert_eq!(got, Ok((hex(&Sha256::digest(&data[..cut as usize])), cut)));
    assert_eq!(len.unwrap(), cut, "the copy went on past the cut");
}

#[test]
fn a_copier_that_panics_is_a_failed_copy_not_a_hang() {
    let data = pattern(3 * COPY_CHUNK as usize);
    let (src, dst) = scratch("panics", &data);
    let panics_at_the_second_step = |s: RawFd, d: RawFd, count: u64, offset: u64| {
        assert!(offset < COPY_CHUNK, "a copier's bug");
        copy_range(s, d, count, offset)
    };
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let got = hash_while_copying_via(panics_at_the_second_step, src.as_raw_fd(), dst.as_raw_fd(), 3 * COPY_CHUNK);
        let _ = done.send(got);
    });
    let got = finished.recv_timeout(std::time::Duration::from_secs(60)).expect("hung after the copier panicked");
    assert_eq!(got, Err(libc::EIO));
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
    copy_steps(&mut copy_range, src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64, &handoff).unwrap();
    read_ahead(dst.as_raw_fd(), &handoff);
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
    let mut cut_after_copying = |s: RawFd, d: RawFd, count: u64, offset: u64| {
        let n = copy_range(s, d, count, offset)?;
        if n == 0 {
            sys::ftruncate(d, cut as u64)?;
        }
        Ok(n)
    };
    let handoff = handoff_with(4);
    copy_steps(&mut cut_after_copying, src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64, &handoff).unwrap();
    read_ahead(dst.as_raw_fd(), &handoff);
    let (h, n) = hash_landed(-1, &handoff).unwrap();
    assert_eq!((hex(&h.finalize()), n), (hex(&Sha256::digest(&data[..cut])), cut as u64));
}

#[test]
fn without_a_copier_thread_the_copy_then_its_read_back_on_one_thread_give_the_same_digest() {
    // What `hash_while_copying_via` does where no thread would start: no read-ahead, the hasher reads it all.
    let data = pattern(2 * COPY_CHUNK as usize + 12_345);
    let (src, dst) = scratch("alone", &data);
    let handoff = handoff_with(BUFFERS);
    copy_steps(&mut copy_range, src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64, &handoff).unwrap();
    let (h, n) = hash_landed(dst.as_raw_fd(), &handoff).unwrap();
    assert_eq!((hex(&h.finalize()), n), (hex(&Sha256::digest(&data)), data.len() as u64));
    assert!(handoff.lock().ready.is_empty(), "nothing was read ahead");
}

#[test]
fn a_stop_asked_for_mid_copy_ends_the_copier_and_the_hasher_at_their_next_step() {
    let data = pattern(6 * (COPY_CHUNK as usize));
    let (src, dst) = scratch("stopped", &data);
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut steps = 0;
    let asks_to_stop_after_one = |s: RawFd, d: RawFd, count: u64, offset: u64| {
        steps += 1;
        flag.store(true, std::sync::atomic::Ordering::Relaxed); // the caller's Ctrl-C, seen by its poll
        copy_range(s, d, count, offset)
    };
    let got = cancel::watching(Some(flag.clone()), || {
        hash_while_copying_via(asks_to_stop_after_one, src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64)
    });
    assert_eq!(got, Err(cancel::STOPPED));
    assert_eq!(steps, 1, "the copier went on after the stop");
    // Unwatched (no batch asked to stop it), the same copy is whole.
    let (src, dst) = scratch("unwatched", &data);
    assert!(hash_while_copying(src.as_raw_fd(), dst.as_raw_fd(), data.len() as u64).is_ok());
}
