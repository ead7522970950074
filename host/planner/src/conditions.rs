//! The TFJob condition algebra, as training-operator 1.9 applied it, plus the fix that a job is
//! never both Succeeded and Failed.
//!
//! - `Failed=True` is final: nothing changes afterwards.
//! - A condition with the same type, status and reason is left untouched.
//! - Same type and status with a new reason: the old entry is replaced (moved to the end) and
//!   keeps its `lastTransitionTime`.
//! - Otherwise the old entry of that type is removed and the new one appended.
//! - `Restarting` and `Running` exclude each other; `Succeeded` or `Failed` turn `Running` to
//!   `False`.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tfjob_api::{ConditionStatus, JobCondition, JobConditionType, TFJobStatus};

/// Applies one condition to `status` following the algebra above. Returns whether anything
/// changed.
pub fn set_condition(
    status: &mut TFJobStatus,
    type_: JobConditionType,
    value: ConditionStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    use JobConditionType::{Failed, Restarting, Running, Succeeded};
    if status.is_true(Failed) {
        return false;
    }
    // Deliberate fix: success is decided first and a succeeded job never also fails.
    if type_ == Failed && value == ConditionStatus::True && status.is_true(Succeeded) {
        return false;
    }
    let current = status.condition(type_).cloned();
    if let Some(c) = &current
        && c.status == value
        && c.reason == reason
    {
        return false;
    }
    let transition = match &current {
        Some(c) if c.status == value => c.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    let mut kept = Vec::with_capacity(status.conditions.len() + 1);
    for mut c in std::mem::take(&mut status.conditions) {
        let excluded = c.type_ == type_
            || (type_ == Restarting && c.type_ == Running)
            || (type_ == Running && c.type_ == Restarting);
        if excluded {
            continue;
        }
        if (type_ == Failed || type_ == Succeeded) && c.type_ == Running {
            c.status = ConditionStatus::False;
        }
        kept.push(c);
    }
    kept.push(JobCondition {
        type_,
        status: value,
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_update_time: Some(Time(now)),
        last_transition_time: transition,
    });
    status.conditions = kept;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::{False, True};
    use JobConditionType::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn shape(status: &TFJobStatus) -> Vec<(JobConditionType, ConditionStatus, &str)> {
        status
            .conditions
            .iter()
            .map(|c| (c.type_, c.status, c.reason.as_str()))
            .collect()
    }

    #[test]
    fn normal_sequence() {
        let mut s = TFJobStatus::default();
        set_condition(&mut s, Created, True, "TFJobCreated", "c", t(0));
        set_condition(&mut s, Running, True, "TFJobRunning", "r", t(1));
        set_condition(&mut s, Succeeded, True, "TFJobSucceeded", "s", t(2));
        assert_eq!(
            shape(&s),
            vec![
                (Created, True, "TFJobCreated"),
                (Running, False, "TFJobRunning"),
                (Succeeded, True, "TFJobSucceeded")
            ]
        );
    }

    #[test]
    fn identical_condition_is_not_touched() {
        let mut s = TFJobStatus::default();
        assert!(set_condition(
            &mut s,
            Running,
            True,
            "TFJobRunning",
            "r",
            t(1)
        ));
        assert!(!set_condition(
            &mut s,
            Running,
            True,
            "TFJobRunning",
            "other message",
            t(5)
        ));
        assert_eq!(s.conditions[0].last_update_time, Some(Time(t(1))));
        assert_eq!(s.conditions[0].message, "r");
    }

    #[test]
    fn new_reason_keeps_transition_time_and_moves_to_the_end() {
        let mut s = TFJobStatus::default();
        set_condition(&mut s, Running, True, "A", "a", t(1));
        set_condition(&mut s, Created, True, "TFJobCreated", "c", t(2));
        set_condition(&mut s, Running, True, "B", "b", t(3));
        assert_eq!(
            shape(&s),
            vec![(Created, True, "TFJobCreated"), (Running, True, "B")]
        );
        assert_eq!(s.conditions[1].last_transition_time, Some(Time(t(1))));
        assert_eq!(s.conditions[1].last_update_time, Some(Time(t(3))));
    }

    #[test]
    fn restarting_and_running_exclude_each_other() {
        let mut s = TFJobStatus::default();
        set_condition(&mut s, Created, True, "TFJobCreated", "c", t(0));
        set_condition(&mut s, Running, True, "TFJobRunning", "r", t(1));
        set_condition(&mut s, Restarting, True, "TFJobRestarting", "x", t(2));
        assert_eq!(
            shape(&s),
            vec![
                (Created, True, "TFJobCreated"),
                (Restarting, True, "TFJobRestarting")
            ]
        );
        set_condition(&mut s, Running, True, "TFJobRunning", "r", t(3));
        assert_eq!(
            shape(&s),
            vec![
                (Created, True, "TFJobCreated"),
                (Running, True, "TFJobRunning")
            ]
        );
    }

    #[test]
    fn failed_is_final_and_never_follows_success() {
        let mut s = TFJobStatus::default();
        set_condition(&mut s, Failed, True, "TFJobFailed", "f", t(0));
        assert!(!set_condition(
            &mut s,
            Running,
            True,
            "TFJobRunning",
            "r",
            t(1)
        ));
        assert!(!set_condition(
            &mut s,
            Succeeded,
            True,
            "TFJobSucceeded",
            "s",
            t(1)
        ));
        let mut s = TFJobStatus::default();
        set_condition(&mut s, Succeeded, True, "TFJobSucceeded", "s", t(0));
        assert!(!set_condition(
            &mut s,
            Failed,
            True,
            "TFJobFailed",
            "f",
            t(1)
        ));
        assert!(!s.is_true(Failed));
    }

    #[test]
    fn suspend_and_resume_sequences() {
        let mut s = TFJobStatus::default();
        set_condition(&mut s, Created, True, "TFJobCreated", "c", t(0));
        set_condition(&mut s, Running, True, "TFJobRunning", "r", t(1));
        set_condition(&mut s, Running, False, "TFJobSuspended", "s", t(2));
        set_condition(&mut s, Suspended, True, "TFJobSuspended", "s", t(2));
        assert_eq!(
            shape(&s),
            vec![
                (Created, True, "TFJobCreated"),
                (Running, False, "TFJobSuspended"),
                (Suspended, True, "TFJobSuspended")
            ]
        );
        set_condition(&mut s, Suspended, False, "TFJobResumed", "r", t(3));
        set_condition(&mut s, Running, True, "TFJobRunning", "r", t(4));
        assert_eq!(
            shape(&s),
            vec![
                (Created, True, "TFJobCreated"),
                (Suspended, False, "TFJobResumed"),
                (Running, True, "TFJobRunning")
            ]
        );
    }
}
