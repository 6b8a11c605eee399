//! The manifest's fields as `artifactkit/manifest/fields.py` has them: each key an entry may hold and the kinds
//! that carry it (`MANIFEST_FIELDS`), and the rows of the pair fields (`PAIR_FIELDS`: two bounded integers, the
//! Python table's `device` type), from which the parse, the encoder, the conversions to and from `FileMeta`, the
//! capture and a refusal's name all follow: adding a pair field is one row here. `tests/test_house_manifest.py`
//! holds this table to the Python one (and the parse to both, through the reference's); `table_tests.rs` holds
//! the encoder and the pair rows to it.

use crate::entry_kind::Kind;
use crate::failure::StatFacts;

#[cfg(test)]
const ALL: &[&str] = &["file", "dir", "symlink", "fifo", "char", "block"];
#[cfg(test)]
const LINKABLE: &[&str] = &["file", "symlink", "fifo", "char", "block"];
const DEVICES: &[&str] = &["char", "block"];

/// `(key, the kinds that carry it)`, in `FileMeta`'s order (`nlink` is never written). Read by tests (here and
/// `tests/test_house_manifest.py`), which hold the encoder, the pair rows and the Python table to it.
#[cfg(test)]
pub const MANIFEST_FIELDS: &[(&str, &[&str])] = &[
    ("path", ALL),
    ("kind", ALL),
    ("mode", ALL),
    ("mtime_ns", ALL),
    ("atime_ns", ALL),
    ("size", &["file"]),
    ("sha256", &["file"]),
    ("target", &["symlink"]),
    ("source_ctime_ns", ALL),
    ("uid", ALL),
    ("gid", ALL),
    ("xattrs", ALL),
    ("hardlink", LINKABLE),
    ("extents", &["file"]),
    ("flags", &["file", "dir"]),
    ("rdev", DEVICES),
];

/// One value of a pair field: its two integers, each within its row's bounds.
pub type Pair = (u32, u32);

/// A field of two bounded integers (`[a, b]` in a manifest, the tuple `(a, b)` on a `FileMeta`).
pub struct PairField {
    /// The JSON key, which is also `FileMeta`'s attribute and the check a refusal names.
    pub key: &'static str,
    /// The kinds that carry it (`MANIFEST_FIELDS`' row, as kinds): required of them, refused on any other.
    pub kinds: &'static [&'static str],
    /// `[low, high)` of each integer (the Python row's `bounds`).
    pub bounds: [(i128, i128); 2],
    /// What a capture records of an entry of a kind that carries it.
    pub captured: fn(&StatFacts) -> Pair,
}

impl PairField {
    pub fn carried_by(&self, kind: Kind) -> bool {
        self.kinds.contains(&kind.name())
    }
}

/// Every pair field, in `FileMeta`'s order, where they come last (after `MANIFEST_FIELDS`' other rows):
/// `py/file_metas.rs` passes them there by position. `linux/kdev_t.h`'s bounds of a device number.
pub const PAIR_FIELDS: [PairField; 1] =
    [PairField { key: "rdev", kinds: DEVICES, bounds: [(0, 1 << 12), (0, 1 << 20)], captured: StatFacts::device }];

/// One value (or none) per pair field, in `PAIR_FIELDS`' order.
pub type Pairs<T> = [Option<T>; PAIR_FIELDS.len()];

/// No pair field recorded.
pub fn no_pairs<T>() -> Pairs<T> {
    std::array::from_fn(|_| None)
}

/// The pair fields a capture of an entry of `kind` records, each where its kind carries it.
pub fn captured_pairs(kind: Kind, st: &StatFacts) -> Pairs<Pair> {
    PAIR_FIELDS.each_ref().map(|field| field.carried_by(kind).then(|| (field.captured)(st)))
}
