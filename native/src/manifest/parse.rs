//! `parse_tree`'s work in the core: manifest bytes read and checked as `manifest.parse.parse_manifest` reads
//! and checks them, into the entries it makes — or a [`Decline`], after which Python runs the reference
//! parse on the same bytes, so every refusal is the reference's own error (class, message, fields).
//!
//! The core decides acceptance only. A [`Decline`] is "refused" where a check of the reference certainly
//! fails (named by `check`, at entry `at`), "unsure" for a shape this parse leaves to the reference
//! (`json.rs` lists them: lone surrogates, integers past 64 bits, `-0`, deep nesting, serde_json's own
//! refusals). Both end in the reference parse; the split is there for the differential tests, which hold
//! every "refused" to a refusal of the reference, and every acceptance to the reference's entries.

pub mod fields;
mod json;
pub mod parsed;
mod raw;

use std::collections::HashMap;

use json::Entries;
use parsed::{Decline, Entry, Parsed};
use raw::Raw;

use crate::entry_kind::Kind;

/// `manifest.limits.MAX_FILE_BYTES`: the file size limit where the caller gives none (Python always gives
/// `file_size_limit()`, the setting's value; a test holds the two defaults equal).
pub const MAX_FILE_BYTES: u64 = 1 << 40;

/// The formats `manifest.encode.READABLE_FORMATS` reads (version 1 is read by the same rules).
const READABLE_FORMATS: [&str; 2] = ["artifactkit.manifest/1", "artifactkit.manifest/2"];
const ROOT: &str = ".";
/// `manifest.limits.MAX_PATH_BYTES`: PATH_MAX less its NUL, the longest path a system call takes.
const MAX_PATH_BYTES: usize = 4095;

/// Read and check `data` in the reference's order: its lists and objects counted, JSON, the document, each
/// entry, every file's size against `file_size_limit`, the tree's shape, its hard links, the artifact name,
/// `source_read_noatime`.
pub fn parse(data: &[u8], file_size_limit: u64) -> Result<Parsed<'_>, Decline> {
    if json::too_dense(data) {
        return Err(Decline::unsure("containers", None, "more lists and objects than its size pays for".into()));
    }
    // bytes.decode("utf-8") refuses what from_utf8 refuses: bad sequences, encoded surrogates, overlongs.
    let text = std::str::from_utf8(data).map_err(|_| Decline::refused("utf8", None))?;
    let doc = json::read(text)?;
    if !doc.is_object {
        return Err(Decline::refused("doc", None));
    }
    match &doc.format {
        Some(Raw::Str(form)) if READABLE_FORMATS.contains(&form.as_ref()) => {}
        _ => return Err(Decline::refused("format", None)),
    }
    let entries = match doc.entries {
        Some(Entries::Checked(entries)) => entries,
        Some(Entries::Declined(decline)) => return Err(decline),
        Some(Entries::NotList) | None => return Err(Decline::refused("entries", None)),
    };
    // `manifest.limits.check_file_sizes`: a claim past the limit would cost a download hours of hashing zeros.
    if let Some(at) = entries.iter().position(|e| e.size > file_size_limit) {
        return Err(Decline::refused("file_size", Some(at)));
    }
    let (by_path, parents) = tree_shape(&entries)?;
    hard_links(&entries, &by_path)?;
    let name = match doc.name {
        Some(Raw::Str(name)) if artifact_name(&name) => name,
        _ => return Err(Decline::refused("name", None)),
    };
    let noatime = match doc.noatime {
        None => true,
        Some(Raw::Bool(noatime)) => noatime,
        Some(_) => return Err(Decline::refused("noatime", None)),
    };
    Ok(Parsed { name, noatime, entries, parents })
}

/// `paths._clean`: `"."`, or a relative path without an empty, `.` or `..` component, and no NUL.
fn clean(path: &str) -> bool {
    if path == ROOT {
        return true;
    }
    let bytes = path.as_bytes();
    !path.is_empty()
        && bytes[0] != b'/'
        && bytes[bytes.len() - 1] != b'/'
        && !path.contains('\0')
        && path.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
}

/// `paths.check_tree_shape`: unique clean paths, a root directory, every parent a listed directory, every path
/// no longer than `MAX_PATH_BYTES` (`"path_max"`, the reference's `TreeTooDeepError`: a path here is UTF-8,
/// its bytes a name's), every link target non-empty and without NUL. The entries by path, for the hard-link
/// check, and each one's parent.
fn tree_shape<'e>(entries: &'e [Entry<'_>]) -> Result<(HashMap<&'e str, usize>, Vec<usize>), Decline> {
    let refused = |at: usize| Decline::refused("tree", Some(at));
    let mut by_path = HashMap::with_capacity(entries.len());
    for (at, entry) in entries.iter().enumerate() {
        if !clean(&entry.path) || by_path.insert(entry.path.as_ref(), at).is_some() {
            return Err(refused(at));
        }
    }
    let root = match by_path.get(ROOT) {
        Some(&root) if entries[root].kind == Kind::Dir => root,
        _ => return Err(Decline::refused("tree", None)),
    };
    let mut parents = vec![root; entries.len()];
    for (at, entry) in entries.iter().enumerate() {
        if entry.path == ROOT {
            continue;
        }
        let parent = entry.path.rsplit_once('/').map_or(ROOT, |(head, _)| head);
        match by_path.get(parent) {
            Some(&p) if entries[p].kind == Kind::Dir => parents[at] = p,
            _ => return Err(refused(at)),
        }
        if entry.path.len() > MAX_PATH_BYTES {
            return Err(Decline::refused("path_max", Some(at)));
        }
        if let Some(target) = &entry.target {
            if target.is_empty() || target.contains('\0') {
                return Err(refused(at));
            }
        }
    }
    Ok((by_path, parents))
}

/// `manifest.extended.check_hardlinks`: a second name names an earlier first name of its kind, with the
/// same content, target and device number, and the same inode metadata (`INODE_FIELDS`).
fn hard_links(entries: &[Entry<'_>], by_path: &HashMap<&str, usize>) -> Result<(), Decline> {
    for (at, entry) in entries.iter().enumerate() {
        let Some(first) = &entry.hardlink else { continue };
        let good = by_path.get(first.as_ref()).map(|&f| &entries[f]).is_some_and(|first| {
            first.kind == entry.kind
                && first.hardlink.is_none()
                && first.path < entry.path
                && (&first.sha256, first.size, first.pairs, &first.target)
                    == (&entry.sha256, entry.size, entry.pairs, &entry.target)
                && (first.mode, first.uid, first.gid, first.mtime_ns, first.atime_ns)
                    == (entry.mode, entry.uid, entry.gid, entry.mtime_ns, entry.atime_ns)
                && (&first.xattrs, first.flags, &first.extents) == (&entry.xattrs, entry.flags, &entry.extents)
        });
        if !good {
            return Err(Decline::refused("hardlinks", Some(at)));
        }
    }
    Ok(())
}

/// `paths.check_artifact_name`: `[A-Za-z0-9][A-Za-z0-9._+-]{0,127}`, whole.
fn artifact_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=128).contains(&bytes.len())
        && bytes[0].is_ascii_alphanumeric()
        && bytes[1..].iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'))
}

#[cfg(test)]
mod tests;
