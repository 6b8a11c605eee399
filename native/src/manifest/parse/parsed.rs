//! What the parse makes of a manifest: the entries it accepts (`Parsed`), or why it leaves the manifest to the
//! reference (`Decline`).

use std::borrow::Cow;

use crate::entry_kind::Kind;
use crate::manifest::fields::{Pair, Pairs};

/// Why the core leaves a manifest to the reference parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decline {
    /// `false`: a check the reference makes fails; `true`: a shape the core does not decide.
    pub unsure: bool,
    /// The check: a field of an entry (`"mode"`, `"xattrs"`...), or `"containers"`, `"json"`, `"utf8"`, `"doc"`,
    /// `"format"`, `"entries"`, `"entry"`, `"file_size"`, `"tree"`, `"path_max"`, `"hardlinks"`, `"name"`,
    /// `"noatime"`.
    pub check: &'static str,
    /// The entry's position in the list, where the check is one entry's.
    pub at: Option<usize>,
    pub detail: String,
}

impl Decline {
    pub fn refused(check: &'static str, at: Option<usize>) -> Self {
        Self { unsure: false, check, at, detail: String::new() }
    }
    pub fn unsure(check: &'static str, at: Option<usize>, detail: String) -> Self {
        Self { unsure: true, check, at, detail }
    }
    pub fn at(self, at: usize) -> Self {
        Self { at: Some(at), ..self }
    }
}

/// One entry, every field of `FileMeta` but `nlink` (never in a manifest).
#[derive(Debug)]
pub struct Entry<'a> {
    pub path: Cow<'a, str>,
    pub kind: Kind,
    pub mode: u32,
    pub mtime_ns: i128,
    pub atime_ns: i128,
    pub size: u64,
    pub sha256: Option<Cow<'a, str>>,
    pub target: Option<Cow<'a, str>>,
    pub ctime_ns: Option<i128>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub xattrs: Option<Vec<(Cow<'a, str>, Vec<u8>)>>,
    pub hardlink: Option<Cow<'a, str>>,
    pub extents: Option<Vec<(u64, u64)>>,
    pub flags: Option<u32>,
    pub pairs: Pairs<Pair>,
}

impl Entry<'_> {
    /// The entry with every borrowed string copied: what the core keeps of a parse beyond its bytes' lifetime
    /// (`layout::Tree`).
    pub fn into_owned(self) -> Entry<'static> {
        let own = |s: Option<Cow<'_, str>>| s.map(|s| Cow::Owned(s.into_owned()));
        Entry {
            path: Cow::Owned(self.path.into_owned()),
            sha256: own(self.sha256),
            target: own(self.target),
            xattrs: self.xattrs.map(|x| x.into_iter().map(|(n, v)| (Cow::Owned(n.into_owned()), v)).collect()),
            hardlink: own(self.hardlink),
            kind: self.kind,
            mode: self.mode,
            mtime_ns: self.mtime_ns,
            atime_ns: self.atime_ns,
            size: self.size,
            ctime_ns: self.ctime_ns,
            uid: self.uid,
            gid: self.gid,
            extents: self.extents,
            flags: self.flags,
            pairs: self.pairs,
        }
    }
}

/// A manifest the reference would accept, as it would read it.
#[derive(Debug)]
pub struct Parsed<'a> {
    pub name: Cow<'a, str>,
    pub noatime: bool,
    pub entries: Vec<Entry<'a>>,
    /// Each entry's parent directory, by position (the root's is itself): what the tree's shape check found.
    pub parents: Vec<usize>,
}
