//! The edge of `manifest/encode.rs`: a publish's entries (`FileMeta`), what the plan knew and what the reads found
//! (`Staged`) converted to the encoder's values — only values of exact JSON types; anything else answers
//! `None`, and Python's reference assembles that manifest instead.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::manifest::assemble::{Assembly, Lines};
use crate::manifest::encode::{Entry, Facts, Json, Text};
use crate::manifest::fields::{no_pairs, Pairs, PAIR_FIELDS};
use crate::py::captured_tree::CapturedTree;
use crate::py::failure::failure_to_py;
use crate::py::stage::{facts_of_kept, StageState};

/// Entries read off their `FileMeta`s and encoded this many at a time, the GIL released for each chunk's
/// encoding: a chunk's `Entry` values are 3 MB, a whole tree's were 80 MB for 100,000 files.
const CHUNK: usize = 4096;

/// The value of a `PyResult<Option<T>>`, or `Ok(None)` from the function: not of an exact JSON type.
macro_rules! exact {
    ($e:expr) => {
        match $e? {
            Some(v) => v,
            None => return Ok(None),
        }
    };
}

/// A `str` as the encoder takes it: its UTF-8, or (lone surrogates) its code points.
fn text_of(s: &Bound<'_, PyString>) -> PyResult<Text> {
    if let Ok(utf8) = s.to_str() {
        return Ok(Text::Utf8(utf8.to_owned()));
    }
    let wide = s.call_method1(intern!(s.py(), "encode"), ("utf-32-le", "surrogatepass"))?;
    let bytes = wide.cast::<PyBytes>()?.as_bytes();
    Ok(Text::Points(bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()))
}

/// What JSON makes of a value of an exact JSON type (`None`, `bool`, `int`, `str`, `tuple`/`list` of them);
/// `None` for anything else (a subclass, a float, an int beyond 128 bits): the reference encodes those.
fn json_of(v: &Bound<'_, PyAny>) -> PyResult<Option<Json>> {
    Ok(if v.is_none() {
        Some(Json::Null)
    } else if v.is_exact_instance_of::<PyBool>() {
        Some(Json::Bool(v.is_truthy()?))
    } else if v.is_exact_instance_of::<PyInt>() {
        v.extract::<i64>().map(i128::from).or_else(|_| v.extract::<i128>()).ok().map(Json::Int)
    } else if v.is_exact_instance_of::<PyString>() {
        Some(Json::Str(text_of(v.cast::<PyString>()?)?))
    } else if let Ok(tuple) = v.cast_exact::<PyTuple>() {
        // Indexed, not iterated: an iterator is a tracked object, and one per entry set off the cyclic GC.
        tuple.iter().map(|item| json_of(&item)).collect::<PyResult<Option<Vec<_>>>>()?.map(Json::List)
    } else if let Ok(list) = v.cast_exact::<PyList>() {
        list.iter().map(|item| json_of(&item)).collect::<PyResult<Option<Vec<_>>>>()?.map(Json::List)
    } else {
        None
    })
}

/// `json_of` where the reference leaves a `None` out (`if value is not None`): `Some(None)` then.
fn optional(v: &Bound<'_, PyAny>) -> PyResult<Option<Option<Json>>> {
    if v.is_none() {
        return Ok(Some(None));
    }
    Ok(json_of(v)?.map(Some))
}

/// Data runs as `[list(run) for run in extents]` writes them: a list of lists.
fn runs_of(v: &Bound<'_, PyAny>) -> PyResult<Option<Option<Vec<Json>>>> {
    Ok(match exact!(optional(v)) {
        Some(Json::List(runs)) if runs.iter().all(|r| matches!(r, Json::List(_))) => Some(Some(runs)),
        None => Some(None),
        Some(_) => None,
    })
}

/// `[[name, base64 value], ...]` of an exact tuple of `(str, bytes)` pairs; `Some(None)` for none at all.
fn xattrs_of(v: &Bound<'_, PyAny>) -> PyResult<Option<Option<Json>>> {
    if v.is_none() {
        return Ok(Some(None));
    }
    let Ok(tuple) = v.cast_exact::<PyTuple>() else { return Ok(None) };
    let mut pairs = Vec::new();
    for pair in tuple.iter() {
        let Ok((name, value)) = pair.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>() else { return Ok(None) };
        let Ok(value) = value.cast_exact::<PyBytes>() else { return Ok(None) };
        pairs.push(Json::List(vec![exact!(json_of(&name)), Json::Base64(value.as_bytes().to_vec())]));
    }
    Ok(Some(if pairs.is_empty() { None } else { Some(Json::List(pairs)) }))
}

/// A read's `(sha256, flags, extents)`.
fn facts_of(
    sha256: &Bound<'_, PyAny>,
    flags: &Bound<'_, PyAny>,
    extents: &Bound<'_, PyAny>,
) -> PyResult<Option<Facts>> {
    Ok(Some(Facts {
        sha256: exact!(json_of(sha256)),
        flags: exact!(optional(flags)),
        extents: exact!(runs_of(extents)),
    }))
}

/// A `FileMeta` as `_entry_doc` reads it, and whether its link count is above one (a hard link's first name).
fn entry_of<'py>(meta: &Bound<'py, PyAny>) -> PyResult<Option<(Entry, bool)>> {
    let py = meta.py();
    let get = |name: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyAny>> { meta.getattr(name) };
    let (path, kind) = (get(intern!(py, "path"))?, get(intern!(py, "kind"))?);
    let (Ok(path), Ok(kind)) = (path.cast_exact::<PyString>(), kind.cast_exact::<PyString>()) else {
        return Ok(None);
    };
    let mut pairs: Pairs<Json> = no_pairs();
    for (field, value) in PAIR_FIELDS.iter().zip(&mut pairs) {
        *value = match exact!(optional(&get(&PyString::intern(py, field.key))?)) {
            Some(Json::List(items)) => Some(Json::List(items)),
            None => None,
            Some(_) => return Ok(None),
        };
    }
    let linked = match exact!(json_of(&get(intern!(py, "nlink"))?)) {
        Json::Null => false,
        Json::Int(n) => n != 1,
        _ => return Ok(None),
    };
    let entry = Entry {
        path: text_of(path)?,
        kind: text_of(kind)?,
        mode: exact!(json_of(&get(intern!(py, "mode"))?)),
        mtime_ns: exact!(json_of(&get(intern!(py, "mtime_ns"))?)),
        atime_ns: exact!(json_of(&get(intern!(py, "atime_ns"))?)),
        size: exact!(json_of(&get(intern!(py, "size"))?)),
        sha256: exact!(json_of(&get(intern!(py, "sha256"))?)),
        target: exact!(json_of(&get(intern!(py, "target"))?)),
        ctime_ns: exact!(optional(&get(intern!(py, "ctime_ns"))?)),
        uid: exact!(optional(&get(intern!(py, "uid"))?)),
        gid: exact!(optional(&get(intern!(py, "gid"))?)),
        xattrs: exact!(xattrs_of(&get(intern!(py, "xattrs"))?)),
        hardlink: exact!(optional(&get(intern!(py, "hardlink"))?)),
        extents: exact!(runs_of(&get(intern!(py, "extents"))?)),
        flags: exact!(optional(&get(intern!(py, "flags"))?)),
        pairs,
    };
    Ok(Some((entry, linked)))
}

/// A read's `(sha256, flags, extents)` as Python holds them, converted when its entry is.
type Read<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>);

/// Every entry's read, by index: what the plan knew (`known`: index -> `(sha256, flags, extents)`), then what
/// the reads found (`found`: `Staged` tuples), as `assemble`'s `content` dict merges them.
fn all_reads<'py>(
    count: usize,
    known: &Bound<'py, PyDict>,
    found: &[Bound<'py, PyTuple>],
) -> PyResult<Vec<Option<Read<'py>>>> {
    let mut reads: Vec<Option<Read<'py>>> = vec![None; count];
    for (index, value) in known.iter() {
        let read: Read<'py> = value.extract()?;
        if let Some(slot) = reads.get_mut(index.extract::<usize>()?) {
            *slot = Some(read);
        }
    }
    for read in found {
        // Staged: (position, sha256, noatime, flags, extents, staged, stage_dir, ...).
        if let Some(slot) = reads.get_mut(read.get_item(0)?.extract::<usize>()?) {
            *slot = Some((read.get_item(1)?, read.get_item(3)?, read.get_item(4)?));
        }
    }
    Ok(reads)
}

/// `assemble`'s manifest's lines by the core, in order: every entry with what the plan knew of it (`known`:
/// index -> `(sha256, flags, extents)`) or its read found (`found`), and the `lines` already encoded, sorted as
/// `manifest.encode.sorted_lines` sorts them. `entries`: a captured tree (its entries taken from
/// the core's capture, no `FileMeta` made; `found`: `Staged` tuples or the `StageState` that kept them) or any
/// `FileMeta`s (`found`: `Staged` tuples). `None` if a value is not of an exact JSON type, a name or line is no
/// UTF-8 or a hard link has no first name: the reference's turn.
#[pyfunction]
#[pyo3(signature = (entries, found, max_runs, lines=Vec::new(), known=None))]
pub fn manifest_lines<'py>(
    py: Python<'py>,
    entries: Bound<'py, PyAny>,
    found: Bound<'py, PyAny>,
    max_runs: usize,
    lines: Vec<(Bound<'py, PyString>, Bound<'py, PyString>)>,
    known: Option<Bound<'py, PyDict>>,
) -> PyResult<Option<EncodedLines>> {
    let known = known.unwrap_or_else(|| PyDict::new(py));
    if let Ok(tree) = entries.cast::<CapturedTree>() {
        if !lines.is_empty() || !known.is_empty() {
            return Err(PyValueError::new_err("a captured tree's manifest takes neither lines nor known facts"));
        }
        let tree = tree.try_borrow().map_err(|_| PyRuntimeError::new_err("the captured tree is in use"))?;
        return of_captured(py, &tree, &found, max_runs);
    }
    let (entries, found): (Vec<Bound<'py, PyAny>>, Vec<Bound<'py, PyTuple>>) = (entries.extract()?, found.extract()?);
    of_entries(py, &lines, &entries, &known, &found, max_runs)
}

/// [`manifest_lines`] of any `FileMeta`s, read off them a chunk at a time.
fn of_entries<'py>(
    py: Python<'py>,
    lines: &[(Bound<'py, PyString>, Bound<'py, PyString>)],
    entries: &[Bound<'py, PyAny>],
    known: &Bound<'py, PyDict>,
    found: &[Bound<'py, PyTuple>],
    max_runs: usize,
) -> PyResult<Option<EncodedLines>> {
    let mut encoded = Lines::with_capacity(lines.len() + entries.len());
    for (path, line) in lines {
        let Ok(line) = line.to_str() else { return Ok(None) };
        encoded.push(text_of(path)?, line);
    }
    let reads = all_reads(entries.len(), known, found)?;
    let mut assembly = Assembly::new(encoded);
    for (chunk, metas) in entries.chunks(CHUNK).enumerate() {
        for (offset, meta) in metas.iter().enumerate() {
            let at = chunk * CHUNK + offset;
            let (entry, linked) = exact!(entry_of(meta));
            let facts = match reads.get(at) {
                Some(Some((sha256, flags, extents))) => Some(exact!(facts_of(sha256, flags, extents))),
                _ => None,
            };
            assembly.add(at, entry, facts, linked);
        }
        py.detach(|| assembly.encode(max_runs));
        py.check_signals()?; // a Ctrl-C ends a 100,000-entry manifest here, not after it (issue 53)
    }
    let Some(lines) = py.detach(|| assembly.finish(max_runs)).map_err(|located| failure_to_py(py, located))? else {
        return Ok(None);
    };
    Ok(Some(EncodedLines { lines, next: 0 }))
}

/// A manifest's lines in their order, handed to Python a chunk at a time (`for chunk in lines`: lists of `str`):
/// joined into one text they were the manifest's bytes again beside the lines (284 MB for a million files), and
/// format 3 never stores that text (`manifest/tree_write.py` makes the tree's objects of the lines).
#[pyclass(module = "artifactkit._native")]
pub struct EncodedLines {
    lines: Lines,
    next: usize,
}

#[pymethods]
impl EncodedLines {
    fn __iter__(this: PyRef<'_, Self>) -> PyRef<'_, Self> {
        this
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Vec<Bound<'py, PyString>>>> {
        let end = self.lines.len().min(self.next.saturating_add(CHUNK));
        if self.next >= end {
            return Ok(None);
        }
        let mut chunk = Vec::with_capacity(end - self.next);
        for at in self.next..end {
            // The encoder writes JSON with every non-ASCII character escaped: never anything but ASCII.
            let text = std::str::from_utf8(self.lines.at(at))
                .map_err(|_| PyRuntimeError::new_err("an encoded manifest line is not ASCII"))?;
            chunk.push(PyString::new(py, text));
        }
        self.next = end;
        Ok(Some(chunk))
    }

    fn __len__(&self) -> usize {
        self.lines.len()
    }
}

/// [`manifest_lines`] of a captured tree (`py/captured_tree.rs`): the lines it makes of the same entries as
/// `FileMeta`s, with no `FileMeta` made.
fn of_captured<'py>(
    py: Python<'py>,
    tree: &CapturedTree,
    found: &Bound<'py, PyAny>,
    max_runs: usize,
) -> PyResult<Option<EncodedLines>> {
    let count = tree.entries.len();
    let mut facts: Vec<Option<Facts>> = Vec::with_capacity(count);
    if let Ok(state) = found.cast::<StageState>() {
        // The core's own values: of exact JSON types by construction.
        facts.resize_with(count, || None);
        // Never borrowed mutably here (staging is over), but a refusal is an error, never a panic.
        let state = state.try_borrow().map_err(|_| PyRuntimeError::new_err("the publish's StageState is in use"))?;
        for read in &state.reads {
            if let Some(slot) = usize::try_from(read.index).ok().and_then(|at| facts.get_mut(at)) {
                *slot = Some(facts_of_kept(read));
            }
        }
    } else {
        let found: Vec<Bound<'py, PyTuple>> = found.extract()?;
        for read in all_reads(count, &PyDict::new(py), &found)? {
            facts.push(match read {
                Some((sha256, flags, extents)) => Some(exact!(facts_of(&sha256, &flags, &extents))),
                None => None,
            });
        }
    }
    // A Ctrl-C's handler runs only once this returns: the signals are looked for after each chunk, so that one
    // during a 100,000-entry manifest (0.4-0.9 s on two loaded cores) stops it there (issue 53).
    let mut raised: Option<PyErr> = None;
    let assembled = py.detach(|| {
        let mut assembly = Assembly::new(Lines::with_capacity(count));
        for (at, facts) in facts.into_iter().enumerate() {
            let Some((entry, linked)) = tree.manifest_entry(at) else { return Ok(None) };
            assembly.add(at, entry, facts, linked);
            if at % CHUNK == CHUNK - 1 {
                assembly.encode(max_runs); // the entries' values go as their lines are made
                if let Err(err) = Python::attach(|py| py.check_signals()) {
                    raised = Some(err);
                    return Ok(None);
                }
            }
        }
        assembly.finish(max_runs)
    });
    if let Some(err) = raised {
        return Err(err);
    }
    let Some(lines) = assembled.map_err(|located| failure_to_py(py, located))? else {
        return Ok(None);
    };
    Ok(Some(EncodedLines { lines, next: 0 }))
}
