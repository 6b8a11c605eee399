//! What the create takes: a directory's files and symlinks (`Dir`), each as an `Entry` borrowed from wherever the
//! batch's entries live.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Symlink,
}

/// What creating a file or symlink needs of its entry, borrowed from wherever the batch's entries live:
/// `artifactkit/engine/native.py`'s `_entry_to_wire` tuples (`py/create_files.rs`'s `Wire`) or the core's own parse of the manifest
/// (`layout::Tree`), so a parsed manifest reaches the create without a copy through Python.
pub struct Entry<'a> {
    pub path: &'a [u8],
    pub kind: Kind,
    pub mode: u32,
    pub mtime_ns: i128,
    pub atime_ns: i128,
    pub size: u64,
    pub sha256: Option<&'a str>,
    pub target: Option<&'a [u8]>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub xattrs: Option<Vec<(&'a [u8], &'a [u8])>>,
    pub extents: Option<&'a [(u64, u64)]>,
    pub flags: Option<i32>,
}

impl Entry<'_> {
    pub fn name(&self) -> &[u8] {
        self.path.rsplit(|b| *b == b'/').next().unwrap_or(self.path)
    }
}

/// One directory (relative to the root, "." for the root) and the entries to create in it.
pub struct Dir<'a> {
    pub rel: &'a [u8],
    pub entries: Vec<Entry<'a>>,
}
