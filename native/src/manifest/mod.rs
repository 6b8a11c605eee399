//! The manifest's format: an entry encoded as the reference writes it (`encode`), a manifest's lines sorted and
//! joined (`assemble`), and manifest bytes read and checked as the reference reads them (`parse`).

pub mod assemble;
pub mod encode;
// The field table: read by tests only (here and tests/test_house_manifest.py), which hold the encoder and the
// Python table to it.
#[cfg(test)]
mod fields;
pub mod parse;
