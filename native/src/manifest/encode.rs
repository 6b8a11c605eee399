//! A manifest's lines from its entries, exactly as `artifactkit/manifest/encode.py` writes them: each entry
//! as `json.JSONEncoder(sort_keys=True, ensure_ascii=True, separators=(", ", ": "))` encodes `_entry_doc`
//! (`encode_entry`; its direct `file_line` is held to those bytes by the reference's own tests), the lines
//! sorted by `(path, line)` as Python sorts `str`s (by code point), as `sorted_lines` sorts them.
//!
//! Values are only what JSON makes of exact Python types; the edge (`py/manifest_lines.rs`) hands anything else
//! back to the reference, so no value is ever encoded differently. Each entry first takes what its read found
//! (`manifest/assemble.rs`, which also sorts the lines).

use std::cmp::Ordering;

use crate::failure::Failure;
use crate::manifest::fields::{Pairs, PAIR_FIELDS};

/// A Python `str`: its UTF-8 when it has one, else its code points (lone surrogates included). A `str` has
/// exactly one of the two forms, so equal texts are equal values (and hash alike).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Text {
    Utf8(String),
    Points(Vec<u32>),
}

enum PointIter<'a> {
    Utf8(std::str::Chars<'a>),
    Points(std::slice::Iter<'a, u32>),
}

impl Iterator for PointIter<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        match self {
            PointIter::Utf8(chars) => chars.next().map(u32::from),
            PointIter::Points(points) => points.next().copied(),
        }
    }
}

impl Text {
    fn points(&self) -> PointIter<'_> {
        match self {
            Text::Utf8(s) => PointIter::Utf8(s.chars()),
            Text::Points(p) => PointIter::Points(p.iter()),
        }
    }

    pub(crate) fn is(&self, s: &str) -> bool {
        matches!(self, Text::Utf8(t) if t == s)
    }

    /// Python's order of `str`s: by code point (for UTF-8 that is the order of the bytes).
    pub(crate) fn python_cmp(&self, other: &Text) -> Ordering {
        match (self, other) {
            (Text::Utf8(a), Text::Utf8(b)) => a.as_bytes().cmp(b.as_bytes()),
            _ => self.points().cmp(other.points()),
        }
    }
}

/// A JSON value as the reference's encoder writes it; `Base64` is `base64.b64encode(value).decode()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i128),
    Str(Text),
    Base64(Vec<u8>),
    List(Vec<Json>),
}

/// One entry's values, as `_entry_doc` and `encode_extended` read them off the `FileMeta` (and, for a file
/// read by this publish, its sha256, flags and extents from the read). `None`: the key is left out.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: Text,
    pub kind: Text,
    pub mode: Json,
    pub mtime_ns: Json,
    pub atime_ns: Json,
    pub size: Json,
    pub sha256: Json,
    pub target: Json,
    pub ctime_ns: Option<Json>,
    pub uid: Option<Json>,
    pub gid: Option<Json>,
    /// Only when the entry has any (`if entry.xattrs:`): `[[name, base64 value], ...]`.
    pub xattrs: Option<Json>,
    pub hardlink: Option<Json>,
    pub extents: Option<Vec<Json>>,
    pub flags: Option<Json>,
    /// The pair fields (`fields::PAIR_FIELDS`), each as its reader found it (a list, or `None`: left out).
    pub pairs: Pairs<Json>,
}

/// What a read found for a file (`plan.Content`), which replaces the capture's values of these fields.
#[derive(Debug, Clone)]
pub struct Facts {
    pub sha256: Json,
    pub flags: Option<Json>,
    pub extents: Option<Vec<Json>>,
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn push_u16_escape(out: &mut String, unit: u32) {
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[((unit >> shift) & 0xf) as usize]));
    }
}

/// `json.encoder.encode_basestring_ascii` (the C one): printable ASCII as it is, the short escapes, every
/// other code point as `\uXXXX` in lowercase hex, above the BMP as a UTF-16 surrogate pair.
fn push_string(out: &mut String, text: &Text) {
    out.push('"');
    if let Text::Utf8(s) = text {
        // The usual path is printable ASCII with nothing to escape: one copy.
        if s.bytes().all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\') {
            out.push_str(s);
            out.push('"');
            return;
        }
    }
    for c in text.points() {
        match c {
            0x22 => out.push_str("\\\""),
            0x5c => out.push_str("\\\\"),
            0x0a => out.push_str("\\n"),
            0x0d => out.push_str("\\r"),
            0x09 => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            0x20..=0x7e => out.push(char::from(c as u8)),
            0x10000.. => {
                push_u16_escape(out, 0xd800 | ((c - 0x10000) >> 10));
                push_u16_escape(out, 0xdc00 | ((c - 0x10000) & 0x3ff));
            }
            _ => push_u16_escape(out, c),
        }
    }
    out.push('"');
}

fn push_base64(out: &mut String, data: &[u8]) {
    out.push('"');
    for chunk in data.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { char::from(B64[((n >> (18 - 6 * i)) & 0x3f) as usize]) } else { '=' });
        }
    }
    out.push('"');
}

fn push_json(out: &mut String, value: &Json) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Int(i) => push_int(out, *i),
        Json::Str(text) => push_string(out, text),
        Json::Base64(data) => push_base64(out, data),
        Json::List(items) => push_list(out, items),
    }
}

/// `int.__repr__`: the digits, a `-` before a negative one (by hand: `core::fmt` cost a tenth of the encoding).
fn push_int(out: &mut String, value: i128) {
    let mut digits = [0u8; 40];
    let mut at = digits.len();
    let mut rest = value.unsigned_abs();
    // u128 division is a library call: the usual value takes the u64 loop.
    let mut small = u64::try_from(rest).unwrap_or(0);
    while rest > u128::from(u64::MAX) {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        small = u64::try_from(rest).unwrap_or(0);
    }
    loop {
        at -= 1;
        digits[at] = b'0' + (small % 10) as u8;
        small /= 10;
        if small == 0 {
            break;
        }
    }
    if value < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default()); // ASCII digits: always UTF-8
}

fn push_list(out: &mut String, items: &[Json]) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_json(out, item);
    }
    out.push(']');
}

/// `encode_entry(entry)`: its keys in sorted order, the optional ones where the reference writes them; an
/// entry with more than `max_runs` data runs is refused as `encode_extended` refuses it.
pub fn encode_entry(e: &Entry, max_runs: usize) -> Result<String, Failure> {
    if let Some(runs) = &e.extents {
        if runs.len() > max_runs {
            return Err(Failure::TooManyRuns { count: runs.len() });
        }
    }
    let (is_file, is_link) = (e.kind.is("file"), e.kind.is("symlink"));
    let mut out = String::with_capacity(256);
    // The pair fields go among the others in sorted key order: each written before the first key above its own.
    let mut recorded: [Option<(&str, &Json)>; PAIR_FIELDS.len()] =
        std::array::from_fn(|at| e.pairs[at].as_ref().map(|value| (PAIR_FIELDS[at].key, value)));
    recorded.sort_unstable_by_key(|pair| pair.map(|(key, _)| key));
    let mut pairs = recorded.into_iter().flatten().peekable();
    let mut field = |key: &str, value: Option<Value<'_>>| {
        while let Some((pair_key, pair)) = pairs.next_if(|&(pair_key, _)| pair_key < key) {
            push_field(&mut out, pair_key, Value::Json(pair));
        }
        if let Some(value) = value {
            push_field(&mut out, key, value);
        }
    };
    field("atime_ns", Some(Value::Json(&e.atime_ns)));
    field("extents", e.extents.as_deref().map(Value::Runs));
    field("flags", e.flags.as_ref().map(Value::Json));
    field("gid", e.gid.as_ref().map(Value::Json));
    field("hardlink", e.hardlink.as_ref().map(Value::Json));
    field("kind", Some(Value::Text(&e.kind)));
    field("mode", Some(Value::Json(&e.mode)));
    field("mtime_ns", Some(Value::Json(&e.mtime_ns)));
    field("path", Some(Value::Text(&e.path)));
    field("sha256", Some(Value::Json(&e.sha256)).filter(|_| is_file));
    field("size", Some(Value::Json(&e.size)).filter(|_| is_file));
    field("source_ctime_ns", e.ctime_ns.as_ref().map(Value::Json));
    field("target", Some(Value::Json(&e.target)).filter(|_| is_link));
    field("uid", e.uid.as_ref().map(Value::Json));
    field("xattrs", e.xattrs.as_ref().map(Value::Json));
    for (key, pair) in pairs {
        push_field(&mut out, key, Value::Json(pair)); // those whose keys sort after every other
    }
    out.push('}');
    Ok(out)
}

/// `"key": value`, after a comma unless it is the entry's first.
fn push_field(out: &mut String, key: &str, value: Value<'_>) {
    out.push_str(if out.is_empty() { "{\"" } else { ", \"" });
    out.push_str(key);
    out.push_str("\": ");
    match value {
        Value::Json(v) => push_json(out, v),
        Value::Text(t) => push_string(out, t),
        Value::Runs(runs) => push_list(out, runs),
    }
}

/// A field's value as it is held: no copy of a path or a list to encode it.
enum Value<'a> {
    Json(&'a Json),
    Text(&'a Text),
    Runs(&'a [Json]),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Text {
        Text::Utf8(s.to_string())
    }

    #[test]
    fn strings_escape_as_pythons_ascii_encoder() {
        let mut out = String::new();
        push_string(&mut out, &text("q\"b\\\n\r\t\u{8}\u{c}\u{1}\u{7f}é\u{1f600}~"));
        assert_eq!(out, r#""q\"b\\\n\r\t\b\f\u0001\u007f\u00e9\ud83d\ude00~""#);
        out.clear();
        push_string(&mut out, &Text::Points(vec![0x61, 0xdcff, 0xd800]));
        assert_eq!(out, r#""a\udcff\ud800""#);
    }

    #[test]
    fn ints_are_written_as_int_repr() {
        for value in [0i128, 7, -1, 10, -(1 << 63), (1 << 63) - 1, i128::MIN, i128::MAX] {
            let mut out = String::new();
            push_int(&mut out, value);
            assert_eq!(out, value.to_string());
        }
    }

    #[test]
    fn base64_pads_as_b64encode() {
        for (data, want) in [(&b""[..], "\"\""), (b"f", "\"Zg==\""), (b"fo", "\"Zm8=\""), (b"foo", "\"Zm9v\"")] {
            let mut out = String::new();
            push_base64(&mut out, data);
            assert_eq!(out, want);
        }
    }

    #[test]
    fn paths_sort_by_code_point_not_by_utf8() {
        // A lone surrogate (an undecodable byte's U+DCFF) sorts between U+D7FF and U+E000, as Python sorts it.
        let escaped = Text::Points(vec![0xdcff]);
        assert_eq!(escaped.python_cmp(&text("\u{e000}")), Ordering::Less);
        assert_eq!(escaped.python_cmp(&text("\u{d7ff}")), Ordering::Greater);
    }
}
