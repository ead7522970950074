//! A suite as loaded: its cases, their inputs and expectations, and what a call came to.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use tfjob_planner::PodContext;
use tfjob_policy_engine::{Category, EvalError, Hook};

use super::json_path::*;

/// A suite whose every field was checked and every file read.
#[derive(Debug)]
pub struct Suite {
    /// The suite file, as given.
    pub file: PathBuf,
    /// The policy to test, unless `--policy` names one.
    pub policy: Option<PolicyRef>,
    /// The manifest to run it with (YAML text), unless `--manifest` gives one.
    pub manifest: Option<String>,
    pub cases: Vec<Case>,
}

/// The suite's `policy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyRef {
    /// `default` or `default:<name>`.
    Default(String),
    /// A module next to the suite.
    File(PathBuf),
}

/// One case.
#[derive(Debug)]
pub struct Case {
    pub name: String,
    pub hook: Hook,
    /// `None`: the manifest's settings (a default's: the operator's).
    pub settings: Option<Value>,
    pub pod: Arc<Pod>,
    pub context: PodContext,
    /// When the classification is made; set for every `classify` case.
    pub now: Option<jiff::Timestamp>,
    /// The container of a `resources` case [default: the first].
    pub container: Option<String>,
    /// The cluster objects its reads are answered from (the suite's and its own `cluster`).
    pub cluster: Arc<tfjob_policy_engine::cluster_cache::ClusterCache>,
    pub expect: Expectation,
}

/// What a case expects. Either `failure`, or any of the others (all must hold).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expectation {
    /// The whole result.
    pub result: Option<Value>,
    /// A subset of the result: the fields given, recursively.
    pub fields: Option<Value>,
    /// Values at paths of the result.
    pub paths: Vec<(JsonPath, Value)>,
    /// A subset of the verdict (classify only), times normalised to UTC.
    pub verdict: Option<Value>,
    pub failure: Option<FailureExpectation>,
}

/// An expected failure: its category and, optionally, text its message contains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureExpectation {
    pub category: FailureCategory,
    pub message: Option<String>,
}

/// Why a call produced no result, in the operator's categories (those of
/// `tfjob_policy_errors_total` and of the events), settings named as the contract names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureCategory {
    /// `validate-settings` refused the settings, the manifest or its limits were refused, or
    /// the hook reported `invalid-settings` (the operator's category `settings`).
    InvalidSettings,
    GuardViolation,
    InvalidOutput,
    Timeout,
    Memory,
    Trap,
    Link,
    Unavailable,
    /// The operator's breaker refused the call; a suite calls the engine without breakers, so
    /// no case fails this way, but every category of the operator has its name here.
    Tripped,
    ReadDenied,
    ReadLimit,
    ReadInvalid,
}

impl FailureCategory {
    pub(crate) const ALL: [FailureCategory; 12] = [
        FailureCategory::InvalidSettings,
        FailureCategory::GuardViolation,
        FailureCategory::InvalidOutput,
        FailureCategory::Timeout,
        FailureCategory::Memory,
        FailureCategory::Trap,
        FailureCategory::Link,
        FailureCategory::Unavailable,
        FailureCategory::Tripped,
        FailureCategory::ReadDenied,
        FailureCategory::ReadLimit,
        FailureCategory::ReadInvalid,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureCategory::InvalidSettings => "invalid-settings",
            FailureCategory::GuardViolation => "guard-violation",
            FailureCategory::InvalidOutput => "invalid-output",
            FailureCategory::Timeout => "timeout",
            FailureCategory::Memory => "memory",
            FailureCategory::Trap => "trap",
            FailureCategory::Link => "link",
            FailureCategory::Unavailable => "unavailable",
            FailureCategory::Tripped => "tripped",
            FailureCategory::ReadDenied => "read-denied",
            FailureCategory::ReadLimit => "read-limit",
            FailureCategory::ReadInvalid => "read-invalid",
        }
    }

    /// Parses a category; `settings` (the operator's own name) means `invalid-settings`.
    pub fn parse(text: &str) -> Result<FailureCategory, String> {
        if text == "settings" {
            return Ok(FailureCategory::InvalidSettings);
        }
        FailureCategory::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = FailureCategory::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown failure category {text:?}: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl From<Category> for FailureCategory {
    fn from(c: Category) -> FailureCategory {
        match c {
            Category::Settings => FailureCategory::InvalidSettings,
            Category::GuardViolation => FailureCategory::GuardViolation,
            Category::InvalidOutput => FailureCategory::InvalidOutput,
            Category::Timeout => FailureCategory::Timeout,
            Category::Memory => FailureCategory::Memory,
            Category::Trap => FailureCategory::Trap,
            Category::Link => FailureCategory::Link,
            Category::Unavailable => FailureCategory::Unavailable,
            Category::Tripped => FailureCategory::Tripped,
            Category::ReadDenied => FailureCategory::ReadDenied,
            Category::ReadLimit => FailureCategory::ReadLimit,
            Category::ReadInvalid => FailureCategory::ReadInvalid,
        }
    }
}

impl fmt::Display for FailureCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call that produced no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub category: FailureCategory,
    pub message: String,
}

impl From<EvalError> for Failure {
    fn from(e: EvalError) -> Failure {
        Failure {
            category: e.category.into(),
            message: e.message,
        }
    }
}

/// What a case's call came to: the hook's result as JSON, or a failure.
pub type Outcome = Result<Value, Failure>;
