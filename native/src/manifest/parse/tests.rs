//! The parse on hand-made manifests; the differential tests (`tests/native/test_manifest_parse_differential.py`)
//! hold it to the reference on generated ones.

use super::parsed::{Decline, Parsed};
use super::MAX_FILE_BYTES;
use crate::entry_kind::Kind;
use crate::manifest::fields::PAIR_FIELDS;

const SHA: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

fn doc(entries: &str) -> String {
    format!(
        r#"{{"entries": [{{"atime_ns": 1, "kind": "dir", "mode": 493, "mtime_ns": -2, "path": "."}}{entries}],
        "format": "artifactkit.manifest/2", "name": "demo", "source_read_noatime": false}}"#
    )
}

fn file(fields: &str) -> String {
    format!(
        r#", {{"atime_ns": 3, "kind": "file", "mode": 420, "mtime_ns": 4, "path": "a", "sha256": "{SHA}", "size": 6{fields}}}"#
    )
}

fn parse(data: &[u8]) -> Result<Parsed<'_>, Decline> {
    super::parse(data, MAX_FILE_BYTES)
}

fn check(text: &str) -> Result<(), Decline> {
    parse(text.as_bytes()).map(|_| ())
}

fn refused_by(text: &str) -> &'static str {
    match parse(text.as_bytes()) {
        Err(Decline { unsure: false, check, .. }) => check,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_usual_manifest_reads_into_its_entries() {
    let text = doc(&file(r#", "uid": 0, "gid": 5, "flags": 0, "source_ctime_ns": 7"#));
    let parsed = parse(text.as_bytes()).unwrap();
    assert_eq!((parsed.name.as_ref(), parsed.noatime, parsed.entries.len()), ("demo", false, 2));
    let a = &parsed.entries[1];
    assert_eq!((a.kind, a.mode, a.size, a.mtime_ns, a.atime_ns, a.ctime_ns), (Kind::File, 0o644, 6, 4, 3, Some(7)));
    assert_eq!((a.uid, a.gid, a.flags, a.xattrs.as_deref().map(<[_]>::len)), (Some(0), Some(5), Some(0), Some(0)));
}

#[test]
fn repeated_keys_keep_the_last_value() {
    let text = doc(&file(r#", "mode": "bad", "mode": 384"#));
    let parsed = parse(text.as_bytes()).unwrap();
    assert_eq!(parsed.entries[1].mode, 0o600);
}

#[test]
fn each_check_refuses_what_the_reference_refuses() {
    assert_eq!(refused_by(&doc(&file(r#", "mode": 4096"#))), "mode");
    assert_eq!(refused_by(&doc(&file(r#", "mode": true"#))), "mode");
    assert_eq!(refused_by(&doc(&file(r#", "path": "../a""#))), "tree");
    assert_eq!(refused_by(&doc(&file(r#", "path": "b/a""#))), "tree");
    assert_eq!(refused_by(&doc(&file(r#", "size": 9223372036854775808"#))), "size");
    assert_eq!(refused_by(&doc(&file(r#", "uid": 4294967296"#))), "uid");
    assert_eq!(refused_by(&doc(&file(r#", "xattrs": [["user.a", "QQ="]]"#))), "xattrs");
    assert_eq!(refused_by(&doc(&file(r#", "extents": [[0, 7]]"#))), "extents");
    for field in &PAIR_FIELDS {
        let on_a_file = format!(r#", "{}": [1, 2]"#, field.key);
        assert_eq!(refused_by(&doc(&file(&on_a_file))), field.key, "a file carries no pair field");
    }
    assert_eq!(refused_by(&doc(&file(r#", "hardlink": "a""#))), "hardlinks");
    assert_eq!(refused_by(&doc(&file(r#", "uid": 0"#))), "owner");
    assert_eq!(refused_by(&doc(&file(r#", "gid": 0, "uid": null"#))), "owner");
    assert_eq!(refused_by(&doc(&file(r#", "target": "x""#))), "kind_field");
    assert_eq!(refused_by(&doc(&file(r#", "kind": "socket""#))), "kind");
    assert_eq!(refused_by(&doc("").replace("\"demo\"", "\".demo\"")), "name");
    assert_eq!(refused_by(&doc("").replace("false", "0")), "noatime");
    assert_eq!(refused_by(&doc("").replace("manifest/2", "manifest/3")), "format");
    assert_eq!(refused_by("[]"), "doc");
    assert!(matches!(parse(b"\"\xff\""), Err(Decline { unsure: false, check: "utf8", .. })));
}

#[test]
fn a_path_longer_than_path_max_is_refused_and_the_longest_read() {
    let chain = |bytes: usize| {
        let parts = vec!["a"; bytes.div_ceil(2)];
        let dirs: String = (1..parts.len())
            .map(|level| {
                format!(
                    r#", {{"atime_ns": 1, "kind": "dir", "mode": 493, "mtime_ns": 1, "path": "{}"}}"#,
                    parts[..level].join("/")
                )
            })
            .collect();
        doc(&(dirs + &file(&format!(r#", "path": "{}""#, parts.join("/")))))
    };
    assert_eq!(parse(chain(4095).as_bytes()).unwrap().entries.len(), 2049);
    assert_eq!(refused_by(&chain(4097)), "path_max");
}

#[test]
fn more_lists_and_objects_than_the_size_pays_for_are_unsure_before_anything_is_read() {
    let dense = |unit: &str, count: usize| doc(&file(&format!(r#", "x": [{}]"#, vec![unit; count].join(","))));
    // 65,536 bytes are free; past them 8 bytes a list and 16 an object: "[0]," and "{}," pay for neither.
    assert!(check(&dense("[0]", 7000)).is_ok());
    for text in [dense("[0]", 40_000), dense("{}", 40_000)] {
        assert!(matches!(check(&text), Err(Decline { unsure: true, check: "containers", .. })));
    }
    // Inside strings they cost nothing: escaped quotes and backslashes end no string.
    let named = dense(r#""[{\"[{\\\"[{""#, 40_000);
    assert!(check(&named).is_ok(), "{}", &named[..200]);
}

#[test]
fn shapes_the_core_does_not_decide_are_unsure() {
    for text in [
        doc(&file(r#", "mode": -0"#)),
        doc(&file(r#", "x": [[[[[]]]]]"#)),
        doc(&file(r#", "path": "\ud800""#)),
        doc(&file(r#", "x": 1e400"#)),
        doc("").replace("false", "NaN"),
    ] {
        assert!(matches!(check(&text), Err(Decline { unsure: true, .. })), "{text}");
    }
}

#[test]
fn a_file_past_the_size_limit_is_refused_at_its_position() {
    let text = doc(&file(""));
    assert!(super::parse(text.as_bytes(), 6).is_ok());
    let refused = super::parse(text.as_bytes(), 5).map(|_| ());
    assert_eq!(refused, Err(Decline { unsure: false, check: "file_size", at: Some(1), detail: String::new() }));
}

#[test]
fn a_later_name_must_claim_its_first_names_every_inode_field() {
    let later = |fields: &str| {
        let second = file(&format!(r#", "hardlink": "a", "path": "b"{fields}"#));
        doc(&format!("{}{second}", file(r#", "uid": 1, "gid": 2, "flags": 0"#)))
    };
    assert!(check(&later(r#", "uid": 1, "gid": 2, "flags": 0"#)).is_ok());
    for fields in [
        r#", "uid": 1, "gid": 3, "flags": 0"#,
        r#", "uid": 1, "gid": 2, "flags": 16"#,
        r#", "uid": 1, "gid": 2, "flags": 0, "mode": 384"#,
        r#", "uid": 1, "gid": 2, "flags": 0, "atime_ns": 9"#,
        r#", "uid": 1, "gid": 2, "flags": 0, "xattrs": [["user.k", "dg=="]]"#,
        r#", "uid": 1, "gid": 2, "flags": 0, "extents": [[0, 6]]"#,
    ] {
        assert_eq!(refused_by(&later(fields)), "hardlinks", "{fields}");
    }
}

#[test]
fn a_time_is_any_the_kernels_64_bit_seconds_hold() {
    // Past 64-bit ns (2262) and up to u64: integers serde_json reads exactly, taken as they are.
    let text = doc(&file(r#", "mtime_ns": 9223372036854775809, "atime_ns": 18446744073709551615"#));
    let a = &parse(text.as_bytes()).unwrap().entries[1];
    assert_eq!((a.mtime_ns, a.atime_ns), ((1 << 63) + 1, (1 << 64) - 1));
    // Past 64 bits it reads a float, which cannot tell 2**63 s (refused) from 1 ns less: the reference decides.
    for time in ["-9223372036854775809", "9223372036854775807999999999", "9223372036854775808000000000"] {
        let text = doc(&file(&format!(r#", "mtime_ns": {time}"#)));
        assert!(matches!(check(&text), Err(Decline { unsure: true, check: "mtime_ns", .. })), "{time}");
    }
    // Far past the kernel's range, as an integer or a float, no time at all.
    assert_eq!(refused_by(&doc(&file(r#", "atime_ns": 1267650600228229401496703205376"#))), "atime_ns");
    assert_eq!(refused_by(&doc(&file(r#", "atime_ns": -1e30"#))), "atime_ns");
}
