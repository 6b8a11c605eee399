//! Capture a source tree before reading anything: mirrors `artifactkit/engine/reference/scan.py::_scan_tree` without a
//! stat cache, step for step — the same calls on the same paths, in the same order on one thread — so that
//! every entry, every refusal and every `OSError` (errno and filename) is the reference's.
//!
//! Per directory (`scan/directory.rs`): open it by path with `O_NOATIME` (without it where refused), check it is the
//! inode its parent listed, read its flags, list it, `lstat` every name, then read each entry's xattrs by path.
//! Where the scan has two threads, the second captures the next directory ahead or half of a wide one's names
//! (`scan/second_thread.rs`); the walk takes every directory in here, in the reference's order. Link targets only once
//! every `lstat` is taken (`readlink` moves a link's atime), through their directory's fd, each link
//! `lstat`-ed again after its `readlink`. Names are ordered as Python orders the `str`s
//! `os.fsdecode` makes of them (code points; an undecodable byte is U+DC80..U+DCFF), not as bytes.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::OwnedFd;

use crate::entry_kind::Kind;
use crate::failure::{Failure, StatFacts};
use crate::scan::directory::{capture_dir, dir_key, read_xattrs, DirPart};
use crate::scan::entry::{fs_points, slash, Entry, Tree, Xattrs, ROOT};
use crate::scan::second_thread::Capture;
use crate::sys::c_path::{cstr, os, os_string};
use crate::sys::calls as sys;

struct Scan<'a, 'scope, 'env> {
    root: &'a [u8],
    entries: Vec<Entry>,
    /// Every directory captured: its path -> (its position in `entries`, its identity).
    dirs: HashMap<Vec<u8>, (usize, (u64, u64))>,
    refused: Vec<Vec<u8>>,
    capture: Capture<'scope, 'env>,
}

impl Scan<'_, '_, '_> {
    /// `_Scan.add` without a cache: each entry's capture, its xattrs read already (by `top/name`, sockets' too).
    fn add(&mut self, relpaths: Vec<Vec<u8>>, stats: Vec<libc::stat>, xattrs: Vec<Xattrs>) {
        for ((path, st), xattrs) in relpaths.into_iter().zip(stats).zip(xattrs) {
            let Some(kind) = Kind::of(st.st_mode) else {
                self.refused.push(path); // the rest is scanned so that the error names every one
                continue;
            };
            let st = StatFacts::of(&st);
            if kind == Kind::Dir {
                self.dirs.insert(path.clone(), (self.entries.len(), (st.dev, st.ino)));
            }
            self.entries.push(Entry { path, kind, st, xattrs, target: None, flags: None, hardlink: None });
        }
    }

    /// `_scan_dir` of `rel` on this thread, the names split with the helper where it is free (`Capture::names`).
    fn capture_here(&mut self, rel: &[u8]) -> Result<DirPart, Failure> {
        let identity = self.dirs.get(dir_key(rel)).map(|d| d.1);
        let capture = &mut self.capture;
        let part =
            capture_dir(self.root, rel, identity, false, |dir, top, names, rels| capture.names(dir, top, names, rels))?;
        // Not asked for O_NOATIME only: a part always comes back.
        part.ok_or_else(|| Failure::os("", libc::EIO, None))
    }

    /// Hand the directory scanned after the current one to the helper, if free, to capture meanwhile.
    fn look_ahead(&mut self, next: &[u8]) {
        if let Some(&(_, identity)) = self.dirs.get(dir_key(next)) {
            self.capture.start_ahead(self.root, next, identity);
        }
    }

    /// The rest of `_scan_dir`, in the walk's order: the directory's flags and its entries taken in; whether
    /// `O_NOATIME` held, and the subdirectories to scan next.
    fn take_in(&mut self, rel: &[u8], part: DirPart) -> (bool, Vec<Vec<u8>>) {
        if let Some(&(at, _)) = self.dirs.get(dir_key(rel)) {
            self.entries[at].flags = part.flags;
        }
        let subdirs = part
            .relpaths
            .iter()
            .zip(&part.stats)
            .filter(|(_, st)| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .map(|(p, _)| p.clone())
            .collect();
        self.add(part.relpaths, part.stats, part.xattrs);
        (part.noatime, subdirs)
    }
}

/// `_hardlink_names`: every second and later name of an inode within the tree -> its first name's position,
/// and its first name's capture: one inode has one (each name's `lstat` differs only where something moved the
/// inode between the two, a reader its atime say, and a manifest whose names disagree is refused).
fn mark_hardlinks(entries: &mut [Entry]) {
    let mut groups: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        if e.kind.linkable() && e.st.nlink > 1 {
            groups.entry((e.st.dev, e.st.ino)).or_default().push(i);
        }
    }
    for names in groups.values().filter(|names| names.len() > 1) {
        let Some(&first) = names.iter().min_by_key(|&&i| fs_points(&entries[i].path)) else { continue };
        for &i in names.iter().filter(|&&i| i != first) {
            entries[i].hardlink = Some(first);
            entries[i].st = entries[first].st;
            entries[i].xattrs = entries[first].xattrs.clone();
        }
    }
}

/// `_LinkReader`: link targets through their directory's fd, opened once per directory and checked to be the
/// directory the scan listed.
struct LinkReader<'a> {
    root: &'a [u8],
    parent: Option<Vec<u8>>,
    fd: Option<OwnedFd>,
}

impl LinkReader<'_> {
    fn target(&mut self, dirs: &HashMap<Vec<u8>, (usize, (u64, u64))>, e: &Entry) -> Result<Vec<u8>, Failure> {
        let (parent, name) = match e.path.iter().rposition(|b| *b == b'/') {
            Some(i) => (&e.path[..i], &e.path[i + 1..]),
            None => (&e.path[..0], &e.path[..]),
        };
        if self.parent.as_deref() != Some(parent) || self.fd.is_none() {
            self.fd = None;
            self.parent = None;
            let path = if parent.is_empty() { self.root.to_vec() } else { slash(self.root, parent) };
            let c = cstr(&path)?;
            let fd = sys::open_at(libc::AT_FDCWD, &c, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
                .map_err(|e| os("open", e, &path))?;
            let st = sys::fstat(sys::raw(&fd)).map_err(|errno| os("fstat", errno, &path))?;
            let key = if parent.is_empty() { ROOT } else { parent };
            if dirs.get(key).map(|d| d.1) != Some((st.st_dev, st.st_ino)) {
                return Err(Failure::DirReplaced { rel: os_string(key), when: 1 });
            }
            self.parent = Some(parent.to_vec());
            self.fd = Some(fd);
        }
        let Some(fd) = &self.fd else { return Err(Failure::os("", libc::EBADF, None)) };
        read_target(sys::raw(fd), &cstr(name)?, name, e)
    }
}

/// `read_target`: the target of the link `name`, which must still be the link the scan's `lstat` captured.
fn read_target(dir: i32, c: &CStr, name: &[u8], e: &Entry) -> Result<Vec<u8>, Failure> {
    let read = sys::readlink_at(dir, c)
        .map_err(|e| ("readlink", e))
        .and_then(|target| Ok((target, sys::lstat_at(dir, c).map_err(|e| ("lstat", e))?)));
    let (target, now) = match read {
        Ok((target, st)) => (target, Some(StatFacts::of(&st))),
        Err((_, libc::ENOENT | libc::EINVAL)) => (Vec::new(), None), // gone, or no longer a link
        Err((call, errno)) => return Err(os(call, errno, name)),
    };
    let before = &e.st;
    let same = now.is_some_and(|now| {
        (now.dev, now.ino, now.ctime_ns, now.mtime_ns, now.size)
            == (before.dev, before.ino, before.ctime_ns, before.mtime_ns, before.size)
            && now.size == target.len() as u64
    });
    if !same {
        return Err(Failure::LinkChanged { path: os_string(&e.path) });
    }
    if target.is_empty() {
        return Err(Failure::BadTarget { path: os_string(&e.path), target: os_string(&target) });
    }
    Ok(target)
}

/// Capture the tree at `root` (`scan_tree(root, read_links=...)` without a cache); `progress(entries so far)`
/// after each directory, as the reference calls `on_progress(len(entries))`; `false` from it stops the scan.
/// An entry handed to `progress` may still change before the scan returns: a directory's flags (read once it
/// is opened), a link's target (read at the end), a later name of a hard link (marked at the end).
/// `threads`: 2 or more adds a second thread (`scan/second_thread.rs`: the next directory ahead, or a directory of
/// `split_min` names or more split).
pub fn scan_tree(
    root: &[u8],
    read_links: bool,
    threads: usize,
    split_min: usize,
    progress: &mut dyn FnMut(&[Entry]) -> bool,
) -> Result<Tree, Failure> {
    std::thread::scope(|scope| walk(root, read_links, Capture::new(scope, threads, split_min), progress))
}

fn walk(
    root: &[u8],
    read_links: bool,
    capture: Capture<'_, '_>,
    progress: &mut dyn FnMut(&[Entry]) -> bool,
) -> Result<Tree, Failure> {
    let st = sys::lstat_at(libc::AT_FDCWD, &cstr(root)?).map_err(|e| os("lstat", e, root))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(Failure::ScanRoot);
    }
    let mut scan = Scan { root, entries: Vec::new(), dirs: HashMap::new(), refused: Vec::new(), capture };
    // Its xattrs from "root/.": a directory, whatever the form of root.
    let xattrs = read_xattrs(&slash(root, ROOT))?;
    scan.add(vec![ROOT.to_vec()], vec![st], vec![xattrs]);
    // Depth first, each directory's subdirectories in name order: the reference's order.
    let mut listed_noatime = true;
    let mut pending: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel) = pending.pop() {
        let part = match scan.capture.take(root, &rel) {
            Some(captured_ahead) => captured_ahead,
            None => {
                // The helper, if free, captures the next directory while this thread captures this one.
                if let Some(next) = pending.last() {
                    scan.look_ahead(next);
                }
                scan.capture_here(&rel)?
            }
        };
        let (noatime, subdirs) = scan.take_in(&rel, part);
        listed_noatime &= noatime;
        if !progress(&scan.entries) {
            return Err(Failure::Stopped);
        }
        pending.extend(subdirs.into_iter().rev());
    }
    if !scan.refused.is_empty() {
        return Err(Failure::Unsupported { paths: scan.refused.iter().map(|p| os_string(p)).collect() });
    }
    let Scan { mut entries, dirs, .. } = scan;
    mark_hardlinks(&mut entries);
    if read_links {
        // Only now, every lstat taken: readlink moves the link's own atime.
        let mut reader = LinkReader { root, parent: None, fd: None };
        for e in entries.iter_mut().filter(|e| e.kind == Kind::Symlink) {
            e.target = Some(reader.target(&dirs, e)?);
        }
    }
    Ok(Tree { entries, listed_noatime })
}
