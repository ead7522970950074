//! Engine errors: every failure of a policy is typed and carries a category.

pub use tfjob_planner::policy::PolicyErrorCategory as Category;

/// Why a policy evaluation or load failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{category}: {message}")]
pub struct EvalError {
    pub category: Category,
    pub message: String,
}

impl EvalError {
    pub fn new(category: Category, message: impl Into<String>) -> EvalError {
        EvalError {
            category,
            message: message.into(),
        }
    }

    /// Attributes the error to a policy, for the planner's seam.
    pub fn for_policy(self, policy: &str) -> tfjob_planner::PolicyError {
        tfjob_planner::PolicyError {
            policy: policy.to_owned(),
            category: self.category,
            message: self.message,
        }
    }
}

/// The engine itself could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up the Wasm engine: {0}")]
pub struct EngineSetupError(pub String);
