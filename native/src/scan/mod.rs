//! A publish's scan: what it captures of each name (`entry`), the walk in the reference's order (`walk`), one directory's capture (`directory`) and the
//! second thread that captures ahead or splits a wide directory (`second_thread`).

pub mod directory;
pub mod entry;
pub mod second_thread;
pub mod walk;
