//! The five TFJob replica types, their spellings and their fixed processing order.

use std::fmt;

/// A TFJob replica type. The derived order (Chief, Master, PS, Worker, Evaluator) is the order in
/// which the planner processes replica types, so every reconcile is deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReplicaType {
    Chief,
    Master,
    PS,
    Worker,
    Evaluator,
}

impl ReplicaType {
    /// Every replica type, in processing order.
    pub const ALL: [ReplicaType; 5] = [
        ReplicaType::Chief,
        ReplicaType::Master,
        ReplicaType::PS,
        ReplicaType::Worker,
        ReplicaType::Evaluator,
    ];

    /// The spelling used as a key of `spec.tfReplicaSpecs` and in condition messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaType::Chief => "Chief",
            ReplicaType::Master => "Master",
            ReplicaType::PS => "PS",
            ReplicaType::Worker => "Worker",
            ReplicaType::Evaluator => "Evaluator",
        }
    }

    /// The lower-case spelling used in object names, labels and `TF_CONFIG`.
    pub fn lower(self) -> &'static str {
        match self {
            ReplicaType::Chief => "chief",
            ReplicaType::Master => "master",
            ReplicaType::PS => "ps",
            ReplicaType::Worker => "worker",
            ReplicaType::Evaluator => "evaluator",
        }
    }

    /// Matches a `tfReplicaSpecs` key case-insensitively, as training-operator's defaulting did
    /// (`WORKER` and `worker` both mean `Worker`).
    pub fn parse_loose(key: &str) -> Option<ReplicaType> {
        ReplicaType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(key))
    }

    /// Parses the lower-case label value.
    pub fn from_label(value: &str) -> Option<ReplicaType> {
        ReplicaType::ALL.into_iter().find(|t| t.lower() == value)
    }

    /// Chief and Master are the "coordinator" types whose success decides the job's.
    pub fn is_chief_or_master(self) -> bool {
        matches!(self, ReplicaType::Chief | ReplicaType::Master)
    }
}

impl fmt::Display for ReplicaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_parsing_recases_keys() {
        assert_eq!(
            ReplicaType::parse_loose("WORKER"),
            Some(ReplicaType::Worker)
        );
        assert_eq!(ReplicaType::parse_loose("ps"), Some(ReplicaType::PS));
        assert_eq!(ReplicaType::parse_loose("cHiEf"), Some(ReplicaType::Chief));
        assert_eq!(ReplicaType::parse_loose("Launcher"), None);
    }

    #[test]
    fn label_values_are_lower_case() {
        for t in ReplicaType::ALL {
            assert_eq!(ReplicaType::from_label(t.lower()), Some(t));
            assert_eq!(t.lower(), t.as_str().to_ascii_lowercase());
        }
    }
}
