//! The manifest's format: an entry encoded as the reference writes it (`encode`), a manifest's lines sorted and
//! joined (`assemble`), and manifest bytes read and checked as the reference reads them (`parse`); the fields
//! each of them knows, as rows (`fields`).

pub mod assemble;
pub mod encode;
pub mod fields;
pub mod parse;
#[cfg(test)]
mod table_tests;
