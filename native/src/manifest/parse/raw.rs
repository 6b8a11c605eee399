//! A JSON value as the field checks see it (`Raw`, `Int`), and one entry object's known fields (`Fields`): what
//! the JSON reading hands the checks.

use std::borrow::Cow;

use crate::manifest::fields::Pairs;

/// A JSON value as the checks see it.
#[derive(Debug)]
pub enum Raw<'a> {
    Null,
    Bool(bool),
    /// Every integer that fits 64 bits, signed or not.
    Int(i128),
    /// A number with a fraction or an exponent, an integer past 64 bits, or `-0` (which Python reads as
    /// the integer 0): the checks treat the last as unsure ([`Raw::int`]), and a time's checks one past 64 bits
    /// within a time's range (`fields::may_be_a_time`).
    Float(f64),
    Str(Cow<'a, str>),
    List(Vec<Raw<'a>>),
    Object,
}

/// What a number is to a check that wants an integer.
pub enum Int {
    Is(i128),
    /// Not an integer, or one past every range a field allows.
    Not,
    /// serde_json's `-0.0`: the integer 0 if it was written `-0`, a float if `-0.0`.
    Unsure,
}

impl Raw<'_> {
    pub fn int(&self) -> Int {
        match self {
            Raw::Int(value) => Int::Is(*value),
            Raw::Float(value) if *value == 0.0 && value.is_sign_negative() => Int::Unsure,
            _ => Int::Not,
        }
    }
}

/// The known fields of one entry object; `None` where the key is absent (not the same as `null` for
/// `xattrs`, whose presence alone asks for a list).
#[derive(Default)]
pub struct Fields<'a> {
    pub path: Option<Raw<'a>>,
    pub kind: Option<Raw<'a>>,
    pub mode: Option<Raw<'a>>,
    pub mtime_ns: Option<Raw<'a>>,
    pub atime_ns: Option<Raw<'a>>,
    pub ctime_ns: Option<Raw<'a>>,
    pub size: Option<Raw<'a>>,
    pub sha256: Option<Raw<'a>>,
    pub target: Option<Raw<'a>>,
    pub uid: Option<Raw<'a>>,
    pub gid: Option<Raw<'a>>,
    pub flags: Option<Raw<'a>>,
    pub xattrs: Option<Raw<'a>>,
    pub hardlink: Option<Raw<'a>>,
    pub extents: Option<Raw<'a>>,
    /// The pair fields, in `fields::PAIR_FIELDS`' order.
    pub pairs: Pairs<Raw<'a>>,
}
