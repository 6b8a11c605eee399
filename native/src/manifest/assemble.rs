//! A publish's manifest assembled from its entries as `publish.assemble` assembles it: each entry with what
//! its read found (`with_content`), every later name of a hard link with its first name's (`fill_hardlinks`),
//! each encoded (`manifest::encode_entry`), the lines sorted by `(path, line)` as Python sorts them
//! (`manifest.encode.sorted_lines`), handed over in that order, never joined into one text.
//!
//! Entries come in one at a time and are encoded a chunk at a time, and every line goes into one buffer:
//! holding a whole tree's `Entry` values (0.8 KB each) and a `String` per line (grown to 512 bytes for a
//! 290-byte line) was 150 MB at the peak of a 100,000-file publish, half of its process's memory; the lines
//! in one buffer are the manifest's own 29 MB. Only a hard link's later names wait for the end.

use std::collections::HashMap;

use crate::failure::Located;
use crate::manifest::encode::{encode_entry, Entry, Facts, Json, Text};

/// The lines' buffers are of this size (a longer line has one of its own): never grown, so never copied (a
/// growing 29 MB buffer was copied whole, old and new alive at once, where `malloc` had it on the heap).
const BLOCK: usize = 1 << 20;

/// Every line in a few large buffers, each line indexed by its path and where it lies.
#[derive(Debug, Default)]
pub struct Lines {
    blocks: Vec<Vec<u8>>,
    index: Vec<(Text, Place)>,
    total: usize,
}

/// Where a line lies: its buffer, its start and its end there.
#[derive(Debug, Clone, Copy)]
struct Place(usize, usize, usize);

impl Lines {
    pub fn with_capacity(count: usize) -> Self {
        Self { blocks: Vec::new(), index: Vec::with_capacity(count), total: 0 }
    }

    pub fn push(&mut self, path: Text, line: &str) {
        let bytes = line.as_bytes();
        if self.blocks.last().is_none_or(|block| block.capacity() - block.len() < bytes.len()) {
            self.blocks.push(Vec::with_capacity(BLOCK.max(bytes.len())));
        }
        let at = self.blocks.len().saturating_sub(1);
        if let Some(block) = self.blocks.last_mut() {
            let start = block.len();
            block.extend_from_slice(bytes);
            self.total += bytes.len();
            self.index.push((path, Place(at, start, block.len())));
        }
    }

    fn line(blocks: &[Vec<u8>], Place(at, start, end): Place) -> &[u8] {
        // `push` recorded these very bounds.
        blocks.get(at).and_then(|block| block.get(start..end)).unwrap_or_default()
    }

    /// `sorted_lines`' order: by `(path, line)` as Python compares them (a line is ASCII JSON, so its bytes'
    /// order is its code points'). Equal keys are equal lines: an unstable sort writes the same bytes.
    pub fn sort(&mut self) {
        let Self { blocks, index, .. } = self;
        index.sort_unstable_by(|a, b| {
            a.0.python_cmp(&b.0).then_with(|| Self::line(blocks, a.1).cmp(Self::line(blocks, b.1)))
        });
    }

    /// How many lines there are.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// The `at`th line in their order (sorted once [`Lines::sort`] ran); empty past the last.
    pub fn at(&self, at: usize) -> &[u8] {
        self.index.get(at).map(|(_, place)| Self::line(&self.blocks, *place)).unwrap_or_default()
    }
}

/// What the assembly holds between chunks: the lines so far, the entries of this chunk still to encode, the
/// facts of every hard link's first name (a file read with a link count above one), its later names, and
/// the first entry (by position) the encoder refused.
#[derive(Debug, Default)]
pub struct Assembly {
    lines: Lines,
    ready: Vec<(usize, Entry)>,
    firsts: HashMap<Text, Facts>,
    later: Vec<(usize, Entry)>,
    refused: Option<Located>,
}

impl Assembly {
    pub fn new(lines: Lines) -> Self {
        Self { lines, ..Self::default() }
    }

    /// Entry `at` with what its read found, if it was read; `linked`: its link count is above one.
    pub fn add(&mut self, at: usize, mut entry: Entry, facts: Option<Facts>, linked: bool) {
        if let Some(facts) = facts {
            if linked {
                self.firsts.insert(entry.path.clone(), facts.clone());
            }
            (entry.sha256, entry.flags, entry.extents) = (facts.sha256, facts.flags, facts.extents);
        }
        if entry.hardlink.is_some() && entry.kind.is("file") {
            self.later.push((at, entry));
        } else {
            self.ready.push((at, entry));
        }
    }

    /// Encode the entries added since the last call into the lines (no Python values: the GIL may be released).
    pub fn encode(&mut self, max_runs: usize) {
        for (at, entry) in self.ready.drain(..) {
            match encode_entry(&entry, max_runs) {
                Ok(line) => self.lines.push(entry.path, &line),
                // The reference encodes in order and raises at the first: the lowest position refused.
                Err(failure) => {
                    if self.refused.as_ref().is_none_or(|first| at < first.at) {
                        self.refused = Some(Located { at, failure });
                    }
                }
            }
        }
    }

    /// The lines in order once every entry is in: the later names of hard links with their first names'
    /// facts, then sorted. `Ok(None)` for a later name without its first (the reference's turn: it raises).
    pub fn finish(mut self, max_runs: usize) -> Result<Option<Lines>, Located> {
        for (at, mut entry) in std::mem::take(&mut self.later) {
            let Some(Json::Str(first)) = &entry.hardlink else { return Ok(None) };
            let Some(facts) = self.firsts.get(first) else { return Ok(None) };
            (entry.sha256, entry.flags, entry.extents) =
                (facts.sha256.clone(), facts.flags.clone(), facts.extents.clone());
            self.ready.push((at, entry));
        }
        self.encode(max_runs);
        if let Some(refused) = self.refused {
            return Err(refused);
        }
        self.lines.sort();
        Ok(Some(self.lines))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Failure;
    use crate::manifest::fields::no_pairs;

    fn text(s: &str) -> Text {
        Text::Utf8(s.to_string())
    }

    fn body(lines: &Lines) -> String {
        let all: Vec<&[u8]> = (0..lines.len()).map(|at| lines.at(at)).collect();
        String::from_utf8(all.join(&b",\n"[..])).unwrap_or_default()
    }

    #[test]
    fn the_lines_come_sorted_as_python_sorts_them_and_none_past_the_last() {
        let mut lines = Lines::default();
        assert!(lines.len() == 0 && body(&lines).is_empty());
        lines.push(text("b"), "{\"b\": 1}");
        lines.push(text("a"), "{\"a\": 2}");
        lines.push(text("a"), "{\"a\": 1}"); // equal paths: by the line, as Python's tuples compare
        lines.push(Text::Points(vec![0xdcff]), "{}"); // U+DCFF (an undecodable byte) sorts before U+E000
        lines.push(text("\u{e000}"), "{\"e\": 0}");
        lines.sort();
        assert_eq!(body(&lines), "{\"a\": 1},\n{\"a\": 2},\n{\"b\": 1},\n{},\n{\"e\": 0}");
        assert_eq!((lines.len(), lines.at(5)), (5, &b""[..]));
    }

    fn file(path: &str, hardlink: Option<&str>, runs: usize) -> Entry {
        let (int, none) = (Json::Int(1), Json::Null);
        Entry {
            path: text(path),
            kind: text("file"),
            mode: int.clone(),
            mtime_ns: int.clone(),
            atime_ns: int.clone(),
            size: int,
            sha256: none.clone(),
            target: none,
            ctime_ns: None,
            uid: None,
            gid: None,
            xattrs: None,
            hardlink: hardlink.map(|h| Json::Str(text(h))),
            extents: (runs > 0).then(|| vec![Json::List(vec![Json::Int(0), Json::Int(1)]); runs]),
            flags: None,
            pairs: no_pairs(),
        }
    }

    #[test]
    fn later_names_of_a_hard_link_take_their_first_names_facts_or_refuse_without_one() {
        let facts = Facts { sha256: Json::Str(text("aa")), flags: Some(Json::Int(8)), extents: None };
        let mut linked = Assembly::default();
        linked.add(0, file("b", Some("a"), 0), None, true); // a later name may come before its first
        linked.add(1, file("a", None, 0), Some(facts.clone()), true);
        let lines = linked.finish(9).ok().flatten().map(|lines| body(&lines)).unwrap_or_default();
        assert_eq!(lines.matches("\"sha256\": \"aa\"").count(), 2, "{lines}");
        assert_eq!(lines.matches("\"flags\": 8").count(), 2, "{lines}");
        let mut unlinked = Assembly::default();
        unlinked.add(0, file("a", None, 0), Some(facts), false); // "a" is no first name
        unlinked.add(1, file("b", Some("a"), 0), None, true);
        assert!(matches!(unlinked.finish(9), Ok(None)));
    }

    #[test]
    fn the_entry_refused_is_the_first_in_order_even_when_a_later_name_waited_for_the_end() {
        let facts = Facts { sha256: Json::Str(text("aa")), flags: None, extents: Some(vec![Json::Int(0); 3]) };
        let mut assembly = Assembly::default();
        assembly.add(0, file("b", Some("a"), 0), None, true); // takes a's 3 runs: encoded last, refused first
        assembly.add(1, file("a", None, 0), Some(facts), true);
        assembly.add(2, file("c", None, 3), None, true);
        assembly.encode(2);
        let refused = assembly.finish(2).err();
        assert!(matches!(refused, Some(Located { at: 0, failure: Failure::TooManyRuns { count: 3 } })), "{refused:?}");
    }
}
