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
    let builder = Builder::new();
    #[cfg(test)]
    let (builder, f) = budget::apply(builder, f);
    builder.spawn_scoped(scope, f).ok()
}

/// Tests only: how many threads a test, and the threads it starts, may start before the system refuses the rest,
/// so a refusal can be put at any point of a batch (the first thread, one in the middle of a pool's chain). The
/// refusal itself is the system's: a start past the budget asks for a stack no system maps, as
/// `tests/native/test_threads_refused.py` does for every thread of a process.
#[cfg(test)]
pub mod budget {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::thread::Builder;

    thread_local! {
        static LEFT: RefCell<Option<Arc<AtomicUsize>>> = const { RefCell::new(None) };
    }

    /// `f()` with `allowed` thread starts shared by this thread and every thread started from it.
    pub fn allowing<R>(allowed: usize, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<AtomicUsize>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let before = self.0.take();
                LEFT.with(|left| *left.borrow_mut() = before);
            }
        }
        let _restore = Restore(LEFT.with(|left| left.replace(Some(Arc::new(AtomicUsize::new(allowed))))));
        f()
    }

    /// The builder for one start (refused past the budget) and `f`, which gives the new thread the same budget.
    pub(super) fn apply<'a, T>(
        builder: Builder,
        f: impl FnOnce() -> T + Send + 'a,
    ) -> (Builder, impl FnOnce() -> T + Send + 'a) {
        let left = LEFT.with(|left| left.borrow().clone());
        let spent = left
            .as_ref()
            .is_some_and(|left| left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err());
        let builder = if spent { builder.stack_size(usize::MAX >> 2) } else { builder };
        (builder, move || {
            LEFT.with(|mine| *mine.borrow_mut() = left);
            f()
        })
    }
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

    #[test]
    fn a_budget_of_starts_is_shared_with_the_threads_started_and_then_refused() {
        let started = super::budget::allowing(2, || {
            std::thread::scope(|s| {
                let inner = super::scoped(s, || {
                    // The same budget here: one start left, then none.
                    std::thread::scope(|s| [super::scoped(s, || ()).is_some(), super::scoped(s, || ()).is_some()])
                });
                inner.and_then(|h| h.join().ok())
            })
        });
        assert_eq!(started, Some([true, false]));
        // Outside a budget nothing is refused.
        std::thread::scope(|s| assert!((0..4).all(|_| super::scoped(s, || ()).is_some())));
    }
}
