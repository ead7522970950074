//! Which policy call a planning thread is in, and since when.
//!
//! Policy calls are synchronous and run on a blocking thread, so the async side (a reconcile, a
//! policy load) cannot interrupt one; what it can do is stop waiting. The sandbox bounds every
//! call by its deadline, and this watch is the backstop behind it: the engine stamps the watch
//! attached to the current thread for the length of each call, and the waiting side gives up on
//! a call that has outlived a bound derived from the deadline instead of waiting for ever. The
//! thread itself is left to finish on its own; a bug that wedged it costs one thread, not the
//! operator.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Watches the policy calls made by the work it is attached to. Cheap to clone; clones watch
/// the same work.
#[derive(Clone, Debug)]
pub struct CallWatch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    origin: Instant,
    /// Nanoseconds from `origin` to the start of the call in progress, plus one; 0 when no call
    /// is in progress.
    since: AtomicU64,
}

thread_local! {
    static ATTACHED: RefCell<Option<CallWatch>> = const { RefCell::new(None) };
}

impl Default for CallWatch {
    fn default() -> Self {
        CallWatch::new()
    }
}

impl CallWatch {
    pub fn new() -> CallWatch {
        CallWatch {
            inner: Arc::new(Inner {
                origin: Instant::now(),
                since: AtomicU64::new(0),
            }),
        }
    }

    /// Runs `work` on this thread with the watch attached: policy calls `work` makes are
    /// stamped on it. The previous attachment (if any) is restored afterwards, even on panic.
    pub fn attach<R>(&self, work: impl FnOnce() -> R) -> R {
        struct Restore(Option<CallWatch>);
        impl Drop for Restore {
            fn drop(&mut self) {
                ATTACHED.with(|a| *a.borrow_mut() = self.0.take());
            }
        }
        let _restore = Restore(ATTACHED.with(|a| a.borrow_mut().replace(self.clone())));
        work()
    }

    /// How long the call in progress has been running; `None` between calls.
    pub fn current_call(&self) -> Option<Duration> {
        match self.inner.since.load(Ordering::Acquire) {
            0 => None,
            stamp => Some(
                self.inner
                    .origin
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(stamp - 1)),
            ),
        }
    }

    /// The call in progress's running time, if it is longer than `bound`.
    pub fn overdue(&self, bound: Duration) -> Option<Duration> {
        self.current_call().filter(|&running| running > bound)
    }
}

/// Marks a policy call on the watch attached to this thread (if any) until dropped. The engine
/// holds one for the length of every call into a guest.
#[must_use = "the call is marked only while the guard lives"]
pub struct InCall(Option<CallWatch>);

/// Starts marking a policy call; see [`InCall`].
pub fn enter_call() -> InCall {
    let watch = ATTACHED.with(|a| a.borrow().clone());
    if let Some(w) = &watch {
        let nanos = u64::try_from(w.inner.origin.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        w.inner.since.store(nanos + 1, Ordering::Release);
    }
    InCall(watch)
}

impl Drop for InCall {
    fn drop(&mut self) {
        if let Some(w) = &self.0 {
            w.inner.since.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_seen_only_while_it_runs_and_only_by_the_attached_watch() {
        let watch = CallWatch::new();
        let other = CallWatch::new();
        assert_eq!(watch.current_call(), None);
        watch.attach(|| {
            {
                let _call = enter_call();
                std::thread::sleep(Duration::from_millis(5));
                assert!(watch.current_call().unwrap() >= Duration::from_millis(5));
                assert!(watch.overdue(Duration::from_millis(1)).is_some());
                assert_eq!(watch.overdue(Duration::from_secs(3600)), None);
                assert_eq!(other.current_call(), None);
            }
            assert_eq!(watch.current_call(), None);
        });
        // Detached: calls made outside `attach` mark nothing.
        let _call = enter_call();
        assert_eq!(watch.current_call(), None);
    }

    #[test]
    fn attachments_nest_and_survive_a_panic() {
        let outer = CallWatch::new();
        let inner = CallWatch::new();
        outer.attach(|| {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                inner.attach(|| panic!("policy bug"))
            }));
            assert!(caught.is_err());
            let _call = enter_call();
            assert!(outer.current_call().is_some());
            assert_eq!(inner.current_call(), None);
        });
    }

    #[test]
    fn another_thread_sees_the_call() {
        let watch = CallWatch::new();
        let (started, wait) = std::sync::mpsc::channel();
        let (finish, done) = std::sync::mpsc::channel::<()>();
        let worker = {
            let watch = watch.clone();
            std::thread::spawn(move || {
                watch.attach(|| {
                    let _call = enter_call();
                    started.send(()).unwrap();
                    done.recv().unwrap();
                })
            })
        };
        wait.recv().unwrap();
        assert!(watch.current_call().is_some());
        finish.send(()).unwrap();
        worker.join().unwrap();
        assert_eq!(watch.current_call(), None);
    }
}
