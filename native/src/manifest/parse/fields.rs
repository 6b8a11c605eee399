//! One entry's fields checked as `manifest.parse.parse_entry_in_full`, `manifest.extended.extended_fields` and
//! `device_number` check them, in their order, so the first refusal is the reference's first.

use std::borrow::Cow;

use super::parsed::{Decline, Entry};
use super::raw::{Fields, Int, Raw};
use crate::entry_kind::Kind;
use crate::manifest::fields::{Pair, PairField, Pairs, PAIR_FIELDS};

/// `manifest.fields.NS_LIMIT`: the kernel's signed 64-bit seconds, in ns (past 64 bits: 2262 on, before 1677).
const NS_LIMIT: i128 = (1 << 63) * 1_000_000_000;
const SIZE_LIMIT: i128 = 1 << 63;
const ID_LIMIT: i128 = 1 << 32;
const MODE_MASK: i128 = 0o7777;
/// `manifest.limits`: symlink(2)'s PATH_MAX - 1; `linux/limits.h`'s xattr bounds.
const TARGET_MAX: usize = 4095;
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;
const XATTR_LIST_MAX: usize = 65536;
const B64_MAX: usize = XATTR_SIZE_MAX.div_ceil(3) * 4;
pub const MAX_EXTENTS: usize = 1 << 20;

type Checked<T> = Result<T, Decline>;

fn refused<T>(check: &'static str) -> Checked<T> {
    Err(Decline::refused(check, None))
}

/// An integer in `[low, high)`, else refused as `check` (unsure for `-0`).
fn int_in(raw: Option<&Raw<'_>>, low: i128, high: i128, check: &'static str) -> Checked<i128> {
    match raw.map(Raw::int) {
        Some(Int::Is(value)) if low <= value && value < high => Ok(value),
        Some(Int::Unsure) => Err(Decline::unsure(check, None, "-0".into())),
        _ => refused(check),
    }
}

/// A time: an integer in `[-NS_LIMIT, NS_LIMIT)`, else refused as `check`; unsure where serde_json read a float
/// that may be an integer the reference holds ([`may_be_a_time`]).
fn time(raw: Option<&Raw<'_>>, check: &'static str) -> Checked<i128> {
    match raw {
        Some(raw) if may_be_a_time(raw) => Err(Decline::unsure(check, None, past_64_bits())),
        raw => int_in(raw, -NS_LIMIT, NS_LIMIT, check),
    }
}

/// Whether `raw` is a float past 64 bits and within the range of a time: serde_json reads an integer past 64 bits
/// (a time before 1677 or after 2554) as the float nearest it, which no longer tells `2**63 s` (refused) from
/// one ns less (a time), nor the integer (a time) from `1e20` written as such (refused). The reference decides.
fn may_be_a_time(raw: &Raw<'_>) -> bool {
    const LIMIT: f64 = NS_LIMIT as f64; // exact: 2**72 * 5**9
    matches!(raw, Raw::Float(v) if v.abs() >= 9_223_372_036_854_775_808.0 && v.abs() <= LIMIT)
}

fn past_64_bits() -> String {
    "a time past 64 bits".into()
}

/// `manifest.extended._int`: absent or `null` is unrecorded.
fn optional_int(raw: Option<&Raw<'_>>, high: i128, check: &'static str) -> Checked<Option<i128>> {
    match raw {
        None | Some(Raw::Null) => Ok(None),
        some => int_in(some, 0, high, check).map(Some),
    }
}

fn text<'a>(raw: Option<Raw<'a>>) -> Option<Cow<'a, str>> {
    match raw {
        Some(Raw::Str(s)) => Some(s),
        _ => None,
    }
}

/// The entry of `f`, every field as the reference reads it.
pub fn entry(f: Fields<'_>) -> Checked<Entry<'_>> {
    let Some(path) = text(f.path) else { return refused("path") };
    let kind = match &f.kind {
        Some(Raw::Str(name)) => Kind::named(name).map_or_else(|| refused("kind"), Ok)?,
        _ => return refused("kind"),
    };
    let mode = int_in(f.mode.as_ref(), 0, MODE_MASK + 1, "mode")?;
    let mtime_ns = time(f.mtime_ns.as_ref(), "mtime_ns")?;
    let atime_ns = time(f.atime_ns.as_ref(), "atime_ns")?;
    // Context for a diagnosis, never restored: dropped when it is not a time a manifest could hold.
    let ctime_ns = match f.ctime_ns.as_ref() {
        Some(raw) if may_be_a_time(raw) => return Err(Decline::unsure("source_ctime_ns", None, past_64_bits())),
        raw => match raw.map(Raw::int) {
            Some(Int::Is(value)) if (-NS_LIMIT..NS_LIMIT).contains(&value) => Some(value),
            Some(Int::Unsure) => return Err(Decline::unsure("source_ctime_ns", None, "-0".into())),
            _ => None,
        },
    };
    // Whether each field only some kinds have is given (`null` is not): `manifest.fields.KIND_FIELDS`, the table `fields.rs` holds.
    let given = |raw: &Option<Raw<'_>>| !matches!(raw, None | Some(Raw::Null));
    let (has_size, has_sha256, has_target) = (given(&f.size), given(&f.sha256), given(&f.target));
    let (mut size, mut sha256, mut target) = (0, None, None);
    match kind {
        Kind::File => {
            size = int_in(f.size.as_ref(), 0, SIZE_LIMIT, "size")?;
            match text(f.sha256) {
                Some(sha) if sha.len() == 64 && sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
                    sha256 = Some(sha);
                }
                _ => return refused("sha256"),
            }
        }
        Kind::Symlink => {
            if mode != 0o777 {
                return refused("symlink_mode");
            }
            let Some(to) = text(f.target) else { return refused("target") };
            // os.fsencode's length: a core string holds no surrogate, so its UTF-8 bytes are its name's.
            if to.len() > TARGET_MAX {
                return refused("target_size");
            }
            target = Some(to);
        }
        _ => {}
    }
    let uid = optional_int(f.uid.as_ref(), ID_LIMIT, "uid")?;
    let gid = optional_int(f.gid.as_ref(), ID_LIMIT, "gid")?;
    let flags = optional_int(f.flags.as_ref(), ID_LIMIT, "flags")?;
    if uid.is_some() != gid.is_some() {
        return refused("owner"); // an owner is recorded whole or not at all
    }
    let xattrs = match f.xattrs {
        Some(value) => Some(xattrs(value)?),
        None if uid.is_some() => Some(Vec::new()),
        None => None,
    };
    let hardlink = match f.hardlink {
        None | Some(Raw::Null) => None,
        Some(Raw::Str(first)) if kind.linkable() => Some(first),
        Some(_) => return refused("hardlink"),
    };
    let extents = match f.extents {
        None | Some(Raw::Null) => None,
        Some(value) => Some(extents(value, size)?),
    };
    let file = kind == Kind::File;
    let foreign = [
        (has_size, file),
        (has_sha256, file),
        (has_target, kind == Kind::Symlink),
        (extents.is_some(), file),
        (flags.is_some(), file || kind == Kind::Dir),
    ];
    if foreign.iter().any(|&(given, allowed)| given && !allowed) {
        return refused("kind_field");
    }
    let mut pairs: Pairs<Pair> = [None; PAIR_FIELDS.len()];
    for ((field, raw), value) in PAIR_FIELDS.iter().zip(f.pairs).zip(&mut pairs) {
        *value = pair(field, raw, kind)?;
    }
    let narrow = |v: Option<i128>| v.map(|v| v as u32); // each checked below 2**32 above
    Ok(Entry {
        path,
        kind,
        mode: mode as u32,
        mtime_ns,
        atime_ns,
        size: size as u64,
        sha256,
        target,
        ctime_ns,
        uid: narrow(uid),
        gid: narrow(gid),
        xattrs,
        hardlink,
        extents,
        flags: narrow(flags),
        pairs,
    })
}

/// `manifest.extended.device_number` for any pair field: `[a, b]` within its bounds, required of the kinds that
/// carry it, refused (as the field) on any other.
fn pair(field: &PairField, raw: Option<Raw<'_>>, kind: Kind) -> Checked<Option<Pair>> {
    let value = match raw {
        None | Some(Raw::Null) => None,
        Some(value) => Some(value),
    };
    if !field.carried_by(kind) {
        return if value.is_none() { Ok(None) } else { refused(field.key) };
    }
    let Some(Raw::List(items)) = value else { return refused(field.key) };
    match items.as_slice() {
        [a, b] => {
            let [(low_a, high_a), (low_b, high_b)] = field.bounds;
            let a = int_in(Some(a), low_a, high_a, field.key)?;
            let b = int_in(Some(b), low_b, high_b, field.key)?;
            Ok(Some((a as u32, b as u32))) // each checked within its bounds, below 2**32
        }
        _ => refused(field.key),
    }
}

/// `manifest.extended._xattrs`: names and values within the kernel's limits (each checked before the value
/// is decoded), sorted and unique.
fn xattrs(value: Raw<'_>) -> Checked<Vec<(Cow<'_, str>, Vec<u8>)>> {
    let Raw::List(items) = value else { return refused("xattrs") };
    let mut found: Vec<(Cow<'_, str>, Vec<u8>)> = Vec::with_capacity(items.len());
    let mut listed = 0;
    for item in items {
        let Raw::List(pair) = item else { return refused("xattrs") };
        let Ok::<[Raw<'_>; 2], _>([Raw::Str(name), Raw::Str(text)]) = pair.try_into() else {
            return refused("xattrs");
        };
        if !name.contains('.') || name.contains('\0') {
            return refused("xattrs");
        }
        listed += name.len() + 1; // listxattr(2) returns the names NUL-terminated
                                  // len(text) in Python counts characters; anything not ASCII fails the decode below anyway.
        let text_len = if text.is_ascii() { text.len() } else { text.chars().count() };
        if name.len() > XATTR_NAME_MAX || text_len > B64_MAX || listed > XATTR_LIST_MAX {
            return refused("xattrs");
        }
        let Some(data) = a2b_base64_strict(text.as_bytes()) else { return refused("xattrs") };
        if data.len() > XATTR_SIZE_MAX {
            return refused("xattrs");
        }
        if found.last().is_some_and(|(last, _)| *last >= name) {
            return refused("xattrs"); // names != sorted(set(names)): out of order or repeated
        }
        found.push((name, data));
    }
    Ok(found)
}

/// `manifest.extended._extents`: sorted, disjoint, non-empty runs inside the size, at most MAX_EXTENTS.
fn extents(value: Raw<'_>, size: i128) -> Checked<Vec<(u64, u64)>> {
    let Raw::List(items) = value else { return refused("extents") };
    if items.len() > MAX_EXTENTS {
        return refused("extents_count");
    }
    let mut runs = Vec::with_capacity(items.len());
    let mut end = 0;
    for item in &items {
        let Raw::List(pair) = item else { return refused("extents") };
        let [start, length] = pair.as_slice() else { return refused("extents") };
        let (start, length) = match (start.int(), length.int()) {
            (Int::Is(start), Int::Is(length)) => (start, length),
            (Int::Unsure, _) | (_, Int::Unsure) => return Err(Decline::unsure("extents", None, "-0".into())),
            _ => return refused("extents"),
        };
        if start < end || length <= 0 || start + length > size {
            return refused("extents");
        }
        runs.push((start as u64, length as u64));
        end = start + length;
    }
    Ok(runs)
}

/// `binascii.a2b_base64(text, strict_mode=True)` as CPython 3.11-3.13 decodes (Modules/binascii.c),
/// `None` where it raises: only the alphabet and `=`, no leading `=`, nothing after the padding that
/// ends a quad, no data after a `=`, no quad left with one or an odd two or three characters unpadded.
/// Unused low bits of the last character are ignored there, as here.
fn a2b_base64_strict(text: &[u8]) -> Option<Vec<u8>> {
    if text.first() == Some(&b'=') {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut quad_pos, mut pads, mut left, mut padding_started) = (0u32, 0u32, 0u32, false);
    for (i, &ch) in text.iter().enumerate() {
        if ch == b'=' {
            padding_started = true;
            if quad_pos >= 2 {
                pads += 1;
                if quad_pos + pads >= 4 {
                    return if i + 1 < text.len() { None } else { Some(out) };
                }
            }
            continue;
        }
        let value = u32::from(match ch {
            b'A'..=b'Z' => ch - b'A',
            b'a'..=b'z' => ch - b'a' + 26,
            b'0'..=b'9' => ch - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        });
        if padding_started {
            return None;
        }
        pads = 0;
        // Each character adds six bits; a byte is out once eight have gathered (left holds the rest).
        match quad_pos {
            0 => left = value,
            1 => {
                out.push(((left << 2) | (value >> 4)) as u8);
                left = value & 0x0f;
            }
            2 => {
                out.push(((left << 4) | (value >> 2)) as u8);
                left = value & 0x03;
            }
            _ => out.push(((left << 6) | value) as u8),
        }
        quad_pos = (quad_pos + 1) % 4;
    }
    if quad_pos == 0 {
        Some(out)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::a2b_base64_strict as decode;

    #[test]
    fn base64_decodes_as_binascii_strict_mode() {
        assert_eq!(decode(b""), Some(vec![]));
        assert_eq!(decode(b"QQ=="), Some(b"A".to_vec()));
        assert_eq!(decode(b"QR=="), Some(b"A".to_vec())); // unused bits ignored, as binascii does
        assert_eq!(decode(b"QUFB"), Some(b"AAA".to_vec()));
        assert_eq!(decode(b"QUF="), Some(b"AA".to_vec()));
        assert_eq!(decode(b"QUFB="), Some(b"AAA".to_vec())); // a pad after a whole quad is let through
        for bad in [&b"="[..], b"QQ=", b"QQ", b"Q", b"QQ==QQ==", b"QQ=Q", b"Q===", b"QQ===", b" QQ==", b"QQ==\n"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
