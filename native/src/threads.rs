//! Every thread the core starts, started where the system may refuse it. std's `Scope::spawn` panics when the
//! kernel refuses a thread (`EAGAIN`: `RLIMIT_NPROC`, a cgroup's `pids.max`, no memory for its stack), and no
//! panic may cross into Python; so each caller of [`scoped`] has a way on without the thread (the work done on
//! the calling thread, or by the threads that did start).

use std::thread::{Builder, Scope, ScopedJoinHandle};

/// `f` on a thread of `scope`, or `None` (and `f` dropped unrun) where the system refuses the thread.
pub fn scoped<'scope, F, T>(scope: &'scope Scope<'scope, '_>, f: F) -> Option<ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    Builder::new().spawn_scoped(scope, f).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_the_system_refuses_is_none_not_a_panic() {
        // A stack no system maps: the same refusal as RLIMIT_NPROC's, from the same call.
        std::thread::scope(|s| {
            let refused = std::thread::Builder::new().stack_size(usize::MAX >> 2).spawn_scoped(s, || 1);
            assert!(refused.is_err());
            assert_eq!(super::scoped(s, || 2).map(|h| h.join().ok()), Some(Some(2)));
        });
    }
}
