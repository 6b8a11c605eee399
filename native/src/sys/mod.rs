//! The system's side: every raw call into the C library (`calls`, the only `unsafe`), the threads the core
//! starts (`threads`), the scoped pool a batch runs on (`pool`) and a batch's cancellation (`cancel`).

pub mod c_path;
pub mod calls;
pub mod cancel;
pub mod pool;
pub mod threads;
