//! The encoder and the pair rows held to the field table (`fields.rs`): each kind writes exactly the keys the table
//! gives it, and the pair fields are the table's last rows, with their kinds.

use crate::entry_kind::Kind;
use crate::manifest::encode::{encode_entry, Entry, Json, Text};
use crate::manifest::fields::{MANIFEST_FIELDS, PAIR_FIELDS};

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
        pairs: PAIR_FIELDS.each_ref().map(|field| some(field.key, Json::List(vec![int.clone(), int.clone()]))),
    }
}

#[test]
fn each_pair_field_is_a_row_of_the_table_with_its_kinds_and_last_in_its_order() {
    let tail: Vec<(&str, &[&str])> = PAIR_FIELDS.iter().map(|field| (field.key, field.kinds)).collect();
    assert!(MANIFEST_FIELDS.ends_with(&tail));
}

#[test]
fn the_encoder_writes_every_key_the_table_gives_a_kind_and_no_other() {
    for kind in Kind::ALL.map(Kind::name) {
        let line = encode_entry(&full(kind), 9).unwrap_or_default();
        let written: Vec<&str> =
            MANIFEST_FIELDS.iter().map(|(key, _)| *key).filter(|key| line.contains(&format!("\"{key}\": "))).collect();
        let carried: Vec<&str> = MANIFEST_FIELDS.iter().map(|(key, _)| *key).filter(|key| carries(key, kind)).collect();
        assert_eq!(written, carried, "{kind}: {line}");
        assert_eq!(line.matches("\": ").count(), carried.len(), "{kind} writes a key no row has: {line}");
    }
}
