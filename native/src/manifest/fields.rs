//! The manifest's fields as `artifactkit/manifest/fields.py` has them: each key an entry may hold and the kinds
//! that carry it. `tests/test_house_manifest.py` holds this table to the Python one (and the parse to both,
//! through the reference's); the test here holds the encoder to this table.

const ALL: &[&str] = &["file", "dir", "symlink", "fifo", "char", "block"];
const LINKABLE: &[&str] = &["file", "symlink", "fifo", "char", "block"];

/// `(key, the kinds that carry it)`, in `FileMeta`'s order (`nlink` is never written).
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
    ("rdev", &["char", "block"]),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::encode::{encode_entry, Entry, Json, Text};

    fn carries(key: &str, kind: &str) -> bool {
        MANIFEST_FIELDS.iter().any(|(k, kinds)| *k == key && kinds.contains(&kind))
    }

    /// An entry of `kind` with every field the table lets it carry recorded (and nothing else).
    fn full(kind: &str) -> Entry {
        let int = Json::Int(1);
        let some = |key: &str, value: Json| carries(key, kind).then_some(value);
        Entry {
            path: Text::Utf8("d/p".into()),
            kind: Text::Utf8(kind.into()),
            mode: int.clone(),
            mtime_ns: int.clone(),
            atime_ns: int.clone(),
            size: int.clone(),
            sha256: Json::Str(Text::Utf8("ab".repeat(32))),
            target: Json::Str(Text::Utf8("t".into())),
            ctime_ns: some("source_ctime_ns", int.clone()),
            uid: some("uid", int.clone()),
            gid: some("gid", int.clone()),
            xattrs: some("xattrs", Json::List(vec![Json::List(vec![Json::Str(Text::Utf8("user.a".into()))])])),
            hardlink: some("hardlink", Json::Str(Text::Utf8("d/a".into()))),
            extents: some("extents", int.clone()).map(|_| vec![Json::List(vec![Json::Int(0), Json::Int(1)])]),
            flags: some("flags", int.clone()),
            rdev: some("rdev", Json::List(vec![int.clone(), int])),
        }
    }

    #[test]
    fn the_encoder_writes_every_key_the_table_gives_a_kind_and_no_other() {
        for kind in ALL {
            let line = encode_entry(&full(kind), 9).unwrap_or_default();
            let written: Vec<&str> = MANIFEST_FIELDS
                .iter()
                .map(|(key, _)| *key)
                .filter(|key| line.contains(&format!("\"{key}\": ")))
                .collect();
            let carried: Vec<&str> =
                MANIFEST_FIELDS.iter().map(|(key, _)| *key).filter(|key| carries(key, kind)).collect();
            assert_eq!(written, carried, "{kind}: {line}");
            assert_eq!(line.matches("\": ").count(), carried.len(), "{kind} writes a key no row has: {line}");
        }
    }
}
