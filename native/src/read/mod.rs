//! A file's content: read once, hashed, staged where its blob is new (`stage`), copied in the kernel and hashed
//! as it lands (`copy`, `hash_while_copying`), a stored blob checked by content (`blob_check`), the reads counted
//! for progress (`progress`) and the staged blobs moved into place (`renames`). A download's create reuses the
//! copies and the blob check.

pub mod blob_check;
pub mod copy;
pub mod file_data;
pub mod hash_while_copying;
pub mod progress;
pub mod renames;
pub mod stage;
