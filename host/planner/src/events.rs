//! The events a reconcile publishes on its TFJob: what the planner decides to say, before the
//! controller turns it into a Kubernetes event.

/// Event severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event on the TFJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    pub type_: EventType,
    pub reason: String,
    pub message: String,
    /// When set, the event is published once per key (pod incarnation and reason), not on every
    /// reconcile that sees the same situation.
    pub once_key: Option<String>,
    /// The object the event is about besides the job, as (kind, name): events of one reason
    /// about different pods stay separate instead of being merged into one series.
    pub related: Option<(String, String)>,
}

impl JobEvent {
    /// An event about the job alone.
    pub fn new(
        type_: EventType,
        reason: &str,
        message: String,
        once_key: Option<String>,
    ) -> JobEvent {
        JobEvent {
            type_,
            reason: reason.to_owned(),
            message,
            once_key,
            related: None,
        }
    }

    /// The same event, also about `kind` `name`.
    pub fn about(mut self, kind: &str, name: &str) -> JobEvent {
        self.related = Some((kind.to_owned(), name.to_owned()));
        self
    }
}
