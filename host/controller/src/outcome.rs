//! What a finished reconcile asks of the controller's queue, in a form the metrics can read.
//!
//! kube-runtime's `Action` keeps its requeue delay private, but the standard metrics need it:
//! controller-runtime's `result` label tells a plain success from a requeue, and the work queue
//! mirror ([`crate::workqueue`]) needs the time a requeue comes due. A reconcile therefore
//! decides an [`Outcome`] and hands kube-runtime the `Action` made from it.

use std::time::Duration;

use kube::runtime::controller::Action;

/// How a reconcile that did not fail ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the job is looked at again on its next change.
    Done,
    /// Done, and the job is looked at again after this long even without a change (an active
    /// deadline, a TTL after finishing, a batched status write).
    RecheckAfter(Duration),
    /// Not done, though nothing failed (the status write lost a conflict): try again soon.
    Retry(Duration),
}

impl Outcome {
    /// The requeue delay, if any.
    pub fn requeue(self) -> Option<Duration> {
        match self {
            Outcome::Done => None,
            Outcome::RecheckAfter(after) | Outcome::Retry(after) => Some(after),
        }
    }

    /// The `Action` kube-runtime acts on.
    pub fn into_action(self) -> Action {
        self.requeue()
            .map_or_else(Action::await_change, Action::requeue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_action_carries_the_outcomes_delay() {
        let second = Duration::from_secs(1);
        assert_eq!(Outcome::Done.into_action(), Action::await_change());
        assert_eq!(
            Outcome::RecheckAfter(second).into_action(),
            Action::requeue(second)
        );
        assert_eq!(
            Outcome::Retry(second).into_action(),
            Action::requeue(second)
        );
    }
}
