//! The manifest's JSON read with serde_json into what the checks need, and nothing more: the document's four
//! keys, each entry's known fields as [`Raw`] values (in a [`Fields`]), everything else skipped unkept.
//!
//! Python's `json` and serde_json read the same grammar, with these differences, each made a [`Decline`]
//! of the "unsure" kind so that `manifest.limits.decode_manifest` decides: serde_json refuses `NaN` and
//! `Infinity` (so does the reference, through `parse_constant`), a lone surrogate escape such as `\ud800`
//! (Python keeps it), an integer past 64 bits when it overflows a float too (Python reads it, up to
//! 4,300 digits), and it reads `-0` as a float (Python as the integer 0; see [`Raw::Float`]). Nesting
//! deeper than the format's five levels is unsure as well: the reference's limit is the interpreter's
//! recursion limit, less the caller's own frames, which no parse outside Python can know. So is a manifest
//! with more lists and objects than its size pays for ([`too_dense`]), which the reference refuses before
//! decoding it. Repeated keys: the last value counts, as in Python's dict.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::fields;
use super::parsed::{Decline, Entry};
use super::raw::{Fields, Raw};
use crate::manifest::fields::PAIR_FIELDS;

/// How deep the format nests: document, entry list, entry, xattr list (or extents), xattr pair (or run).
pub const MAX_DEPTH: usize = 5;
/// `manifest.limits.LIST_BYTES`, `OBJECT_BYTES`, `FREE_CONTAINER_BYTES`: what a manifest's size pays for.
const LIST_BYTES: usize = 8;
const OBJECT_BYTES: usize = 16;
const FREE_CONTAINER_BYTES: usize = 64 << 10;
/// The most items of one list a check must see: `manifest.limits.MAX_EXTENTS` runs and one more. A longer list
/// is refused by every check of a field (no field holds more), so the rest is read but not kept: one file's
/// 2,097,152 runs of `[0,1]`, each padded to 8 bytes, cost the core 23 times their size, 15 now.
const KEPT_ITEMS: usize = (1 << 20) + 1;
const TOO_DEEP: &str = "nested deeper than the format's five levels";

/// The entry list as read: every entry checked ([`super::fields::entry`]) as soon as its object ends, so
/// no entry's raw fields outlive it; the first refusal is kept and the rest of the list only read.
pub enum Entries<'a> {
    NotList,
    Checked(Vec<Entry<'a>>),
    Declined(Decline),
}

/// The document's keys the parse reads (last value of each), or a document that is not an object.
#[derive(Default)]
pub struct Doc<'a> {
    pub is_object: bool,
    pub format: Option<Raw<'a>>,
    pub name: Option<Raw<'a>>,
    pub noatime: Option<Raw<'a>>,
    pub entries: Option<Entries<'a>>,
}

/// Whether `data` holds more lists and objects outside its strings than its size pays for
/// (`manifest.limits.check_containers`, which refuses it): the core skips what nobody reads and would take
/// such a manifest in its stride, but the engines must give one answer. Exact for valid JSON, as the
/// reference's count is; on anything else neither count decides alone (the core declines, the reference
/// refuses).
pub fn too_dense(data: &[u8]) -> bool {
    let budget = data.len().max(FREE_CONTAINER_BYTES);
    let cost = |lists: usize, objects: usize| LIST_BYTES * lists + OBJECT_BYTES * objects;
    // Those inside strings too, counted in bytes per 255 (which the compiler makes SIMD): a plain count took
    // a fifth of a 10,000-entry manifest's parse.
    let (mut lists, mut objects) = (0, 0);
    for chunk in data.chunks(255) {
        let (mut l, mut o) = (0u8, 0u8);
        for &b in chunk {
            l += u8::from(b == b'[');
            o += u8::from(b == b'{');
        }
        (lists, objects) = (lists + usize::from(l), objects + usize::from(o));
    }
    if cost(lists, objects) <= budget {
        return false;
    }
    let (mut lists, mut objects, mut inside, mut escaped) = (0, 0, false, false);
    for &b in data {
        match (inside, b) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => inside = !inside,
            (false, b'[') => lists += 1,
            (false, b'{') => objects += 1,
            _ => {}
        }
    }
    cost(lists, objects) > budget
}

/// The document of `text`, or unsure (serde_json refused it, or it nests too deep).
pub fn read(text: &str) -> Result<Doc<'_>, Decline> {
    let mut de = serde_json::Deserializer::from_str(text);
    let doc = de.deserialize_any(Value::<DocKind>::at(1)).and_then(|doc| de.end().map(|()| doc));
    doc.map_err(|err| Decline::unsure("json", None, err.to_string()))
}

/// The kinds of value read at one place: a document, an entry list, an entry, a field, a skipped value.
trait Place<'de>: Sized {
    type Out;
    /// What any value but the one this place reads by its own visit (a scalar, an other container) is.
    fn other(raw: Raw<'de>) -> Self::Out;
    fn seq<A: SeqAccess<'de>>(depth: usize, seq: A) -> Result<Self::Out, A::Error> {
        let mut items = Vec::new();
        let mut seq = seq;
        while items.len() < KEPT_ITEMS {
            match seq.next_element_seed(Value::<FieldKind>::at(depth + 1))? {
                Some(item) => items.push(item),
                None => return Ok(Self::other(Raw::List(items))),
            }
        }
        SkipKind::seq(depth, seq)?;
        Ok(Self::other(Raw::List(items)))
    }
    fn map<A: MapAccess<'de>>(depth: usize, map: A) -> Result<Self::Out, A::Error> {
        skip_map(depth, map)?;
        Ok(Self::other(Raw::Object))
    }
}

/// A value read at `depth` (the level a container there would have) by the rules of place `P`.
struct Value<P> {
    depth: usize,
    place: std::marker::PhantomData<P>,
}

impl<P> Value<P> {
    fn at(depth: usize) -> Self {
        Self { depth, place: std::marker::PhantomData }
    }
}

impl<'de, P: Place<'de>> DeserializeSeed<'de> for Value<P> {
    type Value = P::Out;
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<P::Out, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de, P: Place<'de>> Visitor<'de> for Value<P> {
    type Value = P::Out;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<P::Out, E> {
        Ok(P::other(Raw::Null))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<P::Out, E> {
        Ok(P::other(Raw::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<P::Out, E> {
        Ok(P::other(Raw::Int(v.into())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<P::Out, E> {
        Ok(P::other(Raw::Int(v.into())))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<P::Out, E> {
        Ok(P::other(Raw::Float(v)))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<P::Out, E> {
        Ok(P::other(Raw::Str(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<P::Out, E> {
        Ok(P::other(Raw::Str(Cow::Owned(v.to_owned()))))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<P::Out, A::Error> {
        deep_enough(self.depth)?;
        P::seq(self.depth, seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<P::Out, A::Error> {
        deep_enough(self.depth)?;
        P::map(self.depth, map)
    }
}

fn deep_enough<E: de::Error>(depth: usize) -> Result<(), E> {
    if depth > MAX_DEPTH {
        return Err(E::custom(TOO_DEEP));
    }
    Ok(())
}

/// A key, borrowed from the text unless it has an escape.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Cow<'de, str>, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// A value nobody reads (an unknown key's): walked for its depth and its syntax, kept nowhere.
struct SkipKind;
impl<'de> Place<'de> for SkipKind {
    type Out = ();
    fn other(_: Raw<'de>) {}
    fn seq<A: SeqAccess<'de>>(depth: usize, seq: A) -> Result<(), A::Error> {
        let mut seq = seq;
        while seq.next_element_seed(Value::<SkipKind>::at(depth + 1))?.is_some() {}
        Ok(())
    }
}

fn skip_map<'de, A: MapAccess<'de>>(depth: usize, map: A) -> Result<(), A::Error> {
    let mut map = map;
    while map.next_key::<IgnoredAny>()?.is_some() {
        map.next_value_seed(Value::<SkipKind>::at(depth + 1))?;
    }
    Ok(())
}

/// A field's value, kept whole (lists of lists for xattrs, extents and pair fields).
struct FieldKind;
impl<'de> Place<'de> for FieldKind {
    type Out = Raw<'de>;
    fn other(raw: Raw<'de>) -> Raw<'de> {
        raw
    }
}

/// The document: its four keys read, the rest skipped.
struct DocKind;
impl<'de> Place<'de> for DocKind {
    type Out = Doc<'de>;
    fn other(_: Raw<'de>) -> Doc<'de> {
        Doc::default()
    }
    fn seq<A: SeqAccess<'de>>(depth: usize, seq: A) -> Result<Doc<'de>, A::Error> {
        SkipKind::seq(depth, seq)?;
        Ok(Doc::default())
    }
    fn map<A: MapAccess<'de>>(depth: usize, map: A) -> Result<Doc<'de>, A::Error> {
        let mut map = map;
        let mut doc = Doc { is_object: true, ..Doc::default() };
        while let Some(key) = map.next_key_seed(Key)? {
            match key.as_ref() {
                "format" => doc.format = Some(map.next_value_seed(Value::<FieldKind>::at(depth + 1))?),
                "name" => doc.name = Some(map.next_value_seed(Value::<FieldKind>::at(depth + 1))?),
                "source_read_noatime" => doc.noatime = Some(map.next_value_seed(Value::<FieldKind>::at(depth + 1))?),
                "entries" => doc.entries = Some(map.next_value_seed(Value::<EntriesKind>::at(depth + 1))?),
                _ => map.next_value_seed(Value::<SkipKind>::at(depth + 1))?,
            }
        }
        Ok(doc)
    }
}

/// The entry list: each item an entry; any other value not a list.
struct EntriesKind;
impl<'de> Place<'de> for EntriesKind {
    type Out = Entries<'de>;
    fn other(_: Raw<'de>) -> Entries<'de> {
        Entries::NotList
    }
    fn seq<A: SeqAccess<'de>>(depth: usize, seq: A) -> Result<Entries<'de>, A::Error> {
        let mut seq = seq;
        let mut checked = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(fields) = seq.next_element_seed(Value::<EntryKind>::at(depth + 1))? {
            let at = checked.len();
            match fields.map_or_else(|| Err(Decline::refused("entry", None)), fields::entry) {
                Ok(entry) => checked.push(entry),
                Err(decline) => {
                    SkipKind::seq(depth, seq)?;
                    return Ok(Entries::Declined(decline.at(at)));
                }
            }
        }
        Ok(Entries::Checked(checked))
    }
}

/// One entry: its known fields kept, unknown ones skipped; `None` for a value that is not an object.
struct EntryKind;
impl<'de> Place<'de> for EntryKind {
    type Out = Option<Fields<'de>>;
    fn other(_: Raw<'de>) -> Option<Fields<'de>> {
        None
    }
    fn seq<A: SeqAccess<'de>>(depth: usize, seq: A) -> Result<Option<Fields<'de>>, A::Error> {
        SkipKind::seq(depth, seq)?;
        Ok(None)
    }
    fn map<A: MapAccess<'de>>(depth: usize, map: A) -> Result<Option<Fields<'de>>, A::Error> {
        let mut map = map;
        let mut f = Fields::default();
        while let Some(key) = map.next_key_seed(Key)? {
            let slot = match key.as_ref() {
                "path" => &mut f.path,
                "kind" => &mut f.kind,
                "mode" => &mut f.mode,
                "mtime_ns" => &mut f.mtime_ns,
                "atime_ns" => &mut f.atime_ns,
                "source_ctime_ns" => &mut f.ctime_ns,
                "size" => &mut f.size,
                "sha256" => &mut f.sha256,
                "target" => &mut f.target,
                "uid" => &mut f.uid,
                "gid" => &mut f.gid,
                "flags" => &mut f.flags,
                "xattrs" => &mut f.xattrs,
                "hardlink" => &mut f.hardlink,
                "extents" => &mut f.extents,
                other => match PAIR_FIELDS.iter().position(|field| field.key == other) {
                    Some(at) => &mut f.pairs[at],
                    None => {
                        map.next_value_seed(Value::<SkipKind>::at(depth + 1))?;
                        continue;
                    }
                },
            };
            *slot = Some(map.next_value_seed(Value::<FieldKind>::at(depth + 1))?);
        }
        Ok(Some(f))
    }
}
