//! Whether reconciles make progress, for `/healthz`.
//!
//! A reconcile that never ends (a wedged API call, a policy thread the backstop could not
//! reach) does not crash the operator: it sits there looking healthy while its jobs stand still.
//! Every reconcile registers here while it runs; `/healthz` fails once one has run longer than
//! the stall bound, so Kubernetes restarts the operator instead of leaving it wedged.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Reconciles in flight, by start time.
#[derive(Debug, Default)]
pub struct Progress {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    running: BTreeMap<u64, Instant>,
}

/// A reconcile in flight; it leaves the register when dropped (also when its future is dropped).
#[must_use = "the reconcile counts as running only while this lives"]
pub struct Running {
    progress: Arc<Progress>,
    id: u64,
}

impl Progress {
    /// Registers a reconcile starting at `now`.
    pub fn begin(self: &Arc<Self>, now: Instant) -> Running {
        let mut state = self.state.lock().expect("progress lock");
        let id = state.next;
        state.next += 1;
        state.running.insert(id, now);
        Running {
            progress: Arc::clone(self),
            id,
        }
    }

    /// How long the oldest reconcile in flight has run, if longer than `bound` at `now`.
    pub fn stalled(&self, now: Instant, bound: Duration) -> Option<Duration> {
        let state = self.state.lock().expect("progress lock");
        state
            .running
            .values()
            .map(|&started| now.saturating_duration_since(started))
            .max()
            .filter(|&running| running > bound)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut state) = self.progress.state.lock() {
            state.running.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reconcile_running_past_the_bound_is_a_stall() {
        let progress = Arc::new(Progress::default());
        let t0 = Instant::now();
        let bound = Duration::from_secs(60);
        assert_eq!(
            progress.stalled(t0 + bound * 10, bound),
            None,
            "idle is healthy"
        );
        let old = progress.begin(t0);
        let recent = progress.begin(t0 + Duration::from_secs(50));
        assert_eq!(progress.stalled(t0 + Duration::from_secs(59), bound), None);
        assert_eq!(
            progress.stalled(t0 + Duration::from_secs(61), bound),
            Some(Duration::from_secs(61))
        );
        drop(old);
        assert_eq!(progress.stalled(t0 + Duration::from_secs(61), bound), None);
        assert_eq!(
            progress.stalled(t0 + Duration::from_secs(111), bound),
            Some(Duration::from_secs(61))
        );
        drop(recent);
        assert_eq!(progress.stalled(t0 + bound * 10, bound), None);
    }
}
