//! Limits of the sandbox, with the defaults the operator runs with.

use std::time::Duration;

/// Per-evaluation limits and engine sizing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Wall-clock budget of one call into a guest.
    pub deadline: Duration,
    /// Linear memory a guest may hold in total, across its memories.
    pub memory: usize,
    /// Largest JSON input (pod, settings) handed to a guest.
    pub max_input: usize,
    /// Largest output (decorated pod, resources, verdict text) accepted from a guest.
    pub max_output: usize,
    /// Bytes of stdout/stderr/log output kept per evaluation.
    pub max_log: usize,
    /// Largest policy module accepted.
    pub max_module: usize,
    /// Evaluations that may run at once (sizes the pooling allocator).
    pub concurrency: u32,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            deadline: Duration::from_millis(50),
            memory: 64 << 20,
            max_input: 1 << 20,
            max_output: 1 << 20,
            max_log: 16 << 10,
            max_module: 4 << 20,
            concurrency: 16,
        }
    }
}

/// How often the epoch ticker advances; deadlines are rounded up to a multiple of it.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);
