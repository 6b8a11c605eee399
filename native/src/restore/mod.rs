//! A download's create: what it takes of each entry (`entry`), its files and symlinks made and verified (`create`), the metadata restored on each
//! (`metadata`), and a parsed manifest kept in the core with the restore's layout of it (`layout`).

pub mod create;
pub mod entry;
pub mod layout;
pub mod metadata;
