//! What a scan captures of each name (`Entry`, a whole `Tree`), and the path arithmetic the walk and a
//! directory's capture share: names joined as Python joins them, ordered as Python orders their `str`s.

use crate::entry_kind::Kind;
use crate::failure::StatFacts;

pub(crate) const ROOT: &[u8] = b".";

/// Extended attributes as `(name, value)` pairs, in Python's order of their names.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// One captured entry: `meta_from_stat(relpath, st, owners=True, xattrs=...)` and what the scan adds.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: Vec<u8>,
    pub kind: Kind,
    pub st: StatFacts,
    pub xattrs: Xattrs,
    pub target: Option<Vec<u8>>,
    /// A directory's flags (`None`: not recorded); files' are read with their content, later.
    pub flags: Option<i32>,
    /// The position of this inode's first name in path order, for its second and later names.
    pub hardlink: Option<usize>,
}

#[derive(Debug)]
pub struct Tree {
    pub entries: Vec<Entry>,
    pub listed_noatime: bool,
}

/// The code points Python's `os.fsdecode` makes of `bytes` (UTF-8 with `surrogateescape`): the key of
/// Python's order of names and paths.
pub fn fs_points(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.extend(chunk.valid().chars().map(u32::from));
        out.extend(chunk.invalid().iter().map(|b| 0xDC00 + u32::from(*b)));
    }
    out
}

/// `f"{a}/{b}"`.
pub(crate) fn slash(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len() + 1 + b.len());
    out.extend_from_slice(a);
    out.push(b'/');
    out.extend_from_slice(b);
    out
}

/// `os.path.join(a, b)` for a relative `b`: no second slash after one `a` ends with.
pub(crate) fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.ends_with(b"/") {
        [a, b].concat()
    } else {
        slash(a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecodable_bytes_sort_as_python_sorts_their_surrogates() {
        // U+DCFF (an escaped 0xff) sorts after U+D7FF and before U+E000, unlike the bytes.
        let mut names: Vec<Vec<u8>> = vec!["\u{e000}".into(), vec![0xff], "\u{d7ff}".into(), b"a".to_vec()];
        names.sort_by_cached_key(|n| fs_points(n));
        assert_eq!(names, vec![b"a".to_vec(), "\u{d7ff}".into(), vec![0xff], "\u{e000}".into()]);
        assert_eq!(fs_points(b"a\xe2\x82/"), vec![0x61, 0xDCE2, 0xDC82, 0x2F]);
    }

    #[test]
    fn join_is_os_path_join() {
        assert_eq!(join(b"/a/", b"b"), b"/a/b");
        assert_eq!(join(b"/a", b"b"), b"/a/b");
        assert_eq!(slash(b"/a/", b"b"), b"/a//b");
    }
}
