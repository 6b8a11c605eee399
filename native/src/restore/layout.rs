//! A parsed manifest kept in the core for its download (`_native.parse_tree`): the entries as the parse read
//! them, and the restore's layout of them — which entries are directories, which the core creates in each
//! directory, which Python makes (FIFOs, devices, hard links' later names) — so a download's files go from
//! the parse to `restore::create_files` without becoming Python objects on the way.
//!
//! Python keeps the policy: it plans (`restore_meta.plan`) the directories, what it makes itself, and one
//! entry of each distinct combination of the fields the plan reads ([`Layout::reps`]), and takes this path
//! only when the plan changes and refuses none of them; anything else is planned entry by entry, as before.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use crate::entry_kind::Kind;
use crate::manifest::fields::{Pair, Pairs};
use crate::manifest::parse::parsed::{Entry, Parsed};
use crate::restore::entry as restore;
use crate::restore::metadata::flags_bits;

/// The fields `restore_meta.plan` reads of an entry besides its path (`tests/store/test_restore_layout.py`
/// records what it reads): entries equal in these are planned alike.
type PlanKey<'t> =
    (u8, u32, Option<u32>, Option<u32>, Option<u32>, Pairs<Pair>, Option<&'t [(Cow<'static, str>, Vec<u8>)]>);

/// Where each entry goes in a restore, by position in the manifest.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Every directory, the root included, in manifest order.
    pub dirs: Vec<usize>,
    /// What Python makes itself: FIFOs and devices, and the later names of hard links, in manifest order.
    pub others: Vec<usize>,
    /// Per directory with any (its position), the files and symlinks the core creates in it, in manifest order.
    pub made: Vec<(usize, Vec<usize>)>,
    /// The first of the made entries with each distinct [`PlanKey`].
    pub reps: Vec<usize>,
}

/// A manifest the core accepted, kept whole.
pub struct Tree {
    pub name: String,
    pub noatime: bool,
    pub entries: Vec<Entry<'static>>,
    pub layout: Layout,
}

impl Tree {
    pub fn of(parsed: Parsed<'_>) -> Self {
        let entries: Vec<Entry<'static>> = parsed.entries.into_iter().map(Entry::into_owned).collect();
        let layout = layout(&entries, &parsed.parents);
        Tree { name: parsed.name.into_owned(), noatime: parsed.noatime, entries, layout }
    }

    /// Entries `start..stop` of the made group `group`, as the create takes them.
    pub fn run(&self, group: usize, start: usize, stop: usize) -> Option<Vec<restore::Entry<'_>>> {
        let (_, made) = self.layout.made.get(group)?;
        made.get(start..stop)?.iter().map(|&at| restore_entry(&self.entries[at])).collect()
    }

    /// The bytes of the regular files among entries `start..stop` of group `group` (a batch's weight).
    pub fn run_bytes(&self, group: usize, start: usize, stop: usize) -> Option<u64> {
        let (_, made) = self.layout.made.get(group)?;
        let at = made.get(start..stop)?;
        Some(at.iter().map(|&i| &self.entries[i]).filter(|e| e.kind == Kind::File).map(|e| e.size).sum())
    }
}

/// The layout of entries the parse accepted, with the parent the parse found for each.
fn layout(entries: &[Entry<'static>], parents: &[usize]) -> Layout {
    let mut found = Layout::default();
    // Each directory's made entries; a directory's slot looked up only when the parent changes.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut slots: HashMap<usize, usize> = HashMap::new();
    let mut current: Option<(usize, usize)> = None;
    let mut keys: HashSet<PlanKey<'_>> = HashSet::new();
    let mut last: Option<PlanKey<'_>> = None;
    for (at, entry) in entries.iter().enumerate() {
        if entry.kind == Kind::Dir {
            found.dirs.push(at);
            continue;
        }
        if entry.hardlink.is_some() || entry.kind.special() {
            found.others.push(at);
            continue;
        }
        let dir = parents[at];
        let slot = match current {
            Some((d, slot)) if d == dir => slot,
            _ => *slots.entry(dir).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            }),
        };
        current = Some((dir, slot));
        groups[slot].push(at);
        let key =
            (entry.kind as u8, entry.mode, entry.uid, entry.gid, entry.flags, entry.pairs, entry.xattrs.as_deref());
        // Neighbours mostly share a key: hashed only when it is not the last one seen.
        if last.as_ref() != Some(&key) && keys.insert(key) {
            found.reps.push(at);
        }
        last = Some(key);
    }
    found.made = found
        .dirs
        .iter()
        .filter_map(|dir| slots.get(dir).map(|&slot| (*dir, std::mem::take(&mut groups[slot]))))
        .collect();
    found
}

/// A file or symlink as `restore::create_files` takes it (`None` for any other kind).
fn restore_entry<'t>(e: &'t Entry<'static>) -> Option<restore::Entry<'t>> {
    let kind = match e.kind {
        Kind::File => restore::Kind::File,
        Kind::Symlink => restore::Kind::Symlink,
        _ => return None,
    };
    Some(restore::Entry {
        path: e.path.as_bytes(),
        kind,
        mode: e.mode,
        mtime_ns: e.mtime_ns,
        atime_ns: e.atime_ns,
        size: e.size,
        sha256: e.sha256.as_deref(),
        target: e.target.as_deref().map(str::as_bytes),
        uid: e.uid,
        gid: e.gid,
        xattrs: e.xattrs.as_ref().map(|x| x.iter().map(|(n, v)| (n.as_bytes(), v.as_slice())).collect()),
        extents: e.extents.as_deref(),
        flags: e.flags.map(flags_bits),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse::{parse, MAX_FILE_BYTES};

    const SHA: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

    fn tree(entries: &[String]) -> Tree {
        let text = format!(
            r#"{{"entries": [{}], "format": "artifactkit.manifest/2", "name": "t", "source_read_noatime": true}}"#,
            entries.join(", ")
        );
        Tree::of(parse(text.as_bytes(), MAX_FILE_BYTES).unwrap())
    }

    fn dir(path: &str) -> String {
        format!(r#"{{"atime_ns": 1, "kind": "dir", "mode": 493, "mtime_ns": 2, "path": "{path}"}}"#)
    }

    fn file(path: &str, mode: u32, extra: &str) -> String {
        format!(
            r#"{{"atime_ns": 1, "kind": "file", "mode": {mode}, "mtime_ns": 2, "path": "{path}", "sha256": "{SHA}", "size": 6{extra}}}"#
        )
    }

    #[test]
    fn each_directory_gets_its_own_files_in_manifest_order() {
        let t = tree(&[
            dir("."),
            dir("a"),
            file("a/x", 420, ""),
            dir("a/b"),
            file("a/b/y", 420, ""),
            file("a/z", 420, ""),
            file("top", 420, ""),
        ]);
        assert_eq!(t.layout.dirs, vec![0, 1, 3]);
        assert_eq!(t.layout.made, vec![(0, vec![6]), (1, vec![2, 5]), (3, vec![4])]);
        assert_eq!((t.layout.others.len(), t.layout.reps.clone()), (0, vec![2]));
        assert_eq!(t.run_bytes(1, 0, 2), Some(12));
        assert_eq!(t.run(1, 1, 2).unwrap()[0].path, b"a/z");
        assert!(t.run(1, 1, 3).is_none() && t.run(3, 0, 1).is_none());
    }

    #[test]
    fn what_python_makes_is_left_to_it_and_every_plan_key_has_a_representative() {
        let t = tree(&[
            dir("."),
            file("a", 420, ""),
            file("b", 420, r#", "hardlink": "a""#),
            r#"{"atime_ns": 1, "kind": "fifo", "mode": 420, "mtime_ns": 2, "path": "f"}"#.to_owned(),
            file("g", 493, ""),
            file("h", 420, r#", "uid": 5, "gid": 5"#),
            file("i", 420, r#", "uid": 5, "gid": 5, "flags": 2147483648"#),
        ]);
        assert_eq!(t.layout.others, vec![2, 3]);
        assert_eq!(t.layout.made, vec![(0, vec![1, 4, 5, 6])]);
        assert_eq!(t.layout.reps, vec![1, 4, 5, 6]);
        assert_eq!(t.run(0, 3, 4).unwrap()[0].flags, Some(i32::MIN), "the ioctl's C int, bit for bit");
    }
}
