//! A download's create: its files and symlinks made and verified (`create`), the metadata restored on each
//! (`metadata`), and a parsed manifest kept in the core with the restore's layout of it (`layout`).

pub mod create;
pub mod layout;
pub mod metadata;
