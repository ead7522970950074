//! Limits of the sandbox, with the defaults the operator runs with.

use std::sync::Arc;
use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::cluster_reads::ReadCeiling;

/// Per-evaluation limits and engine sizing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Wall-clock budget of one call into a guest.
    pub deadline: Duration,
    /// Linear memory a guest may hold in total, across its memories.
    pub memory: usize,
    /// Linear memory all evaluations running at once may hold together.
    pub memory_budget: usize,
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
    /// What the policies of one policy namespace (a tenant) may hold at once; cluster-wide
    /// policies are held to the engine's limits alone.
    pub tenant: TenantLimits,
    /// The most any policy may be granted (see [`crate::capabilities`]).
    pub ceiling: Capabilities,
    /// The most any policy may read of the cluster (see [`crate::cluster_reads`]).
    pub reads: ReadCeiling,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            deadline: Duration::from_millis(50),
            memory: 64 << 20,
            // With the 512 MiB limit of deploy/operator: 256 MiB for guests, the rest for the
            // operator's caches and copies of inputs and outputs.
            memory_budget: 256 << 20,
            max_input: 1 << 20,
            max_output: 1 << 20,
            max_log: 16 << 10,
            max_module: 4 << 20,
            concurrency: 16,
            tenant: TenantLimits::default(),
            ceiling: default_ceiling(),
            reads: ReadCeiling::default(),
        }
    }
}

/// The share of the engine one policy namespace's policies get, so that a team whose policies
/// loop, or fill their memory, slows its own jobs and not the others'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantLimits {
    /// Calls of one namespace's policies running at once; more wait for one of them to end.
    pub concurrency: u32,
    /// Linear memory one namespace's calls running at once may hold together.
    pub memory: usize,
    /// Linear memory of the engine's budget that namespaced policies together may never take:
    /// the cluster-wide policies' reserve, which every namespace's jobs run.
    pub cluster_reserve: usize,
}

impl Default for TenantLimits {
    /// Half the machine's cores (at least one) and one call's memory cap per namespace, and a
    /// quarter of the memory budget kept for cluster-wide policies.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        TenantLimits {
            concurrency: u32::try_from(cores / 2).unwrap_or(u32::MAX).max(1),
            memory: 64 << 20,
            cluster_reserve: 64 << 20,
        }
    }
}

/// The ceiling when the operator configures none: host paths under the NVIDIA driver
/// directory the default decoration mounts, nothing else.
pub fn default_ceiling() -> Capabilities {
    Capabilities {
        host_paths: vec![NVIDIA_DRIVER_HOST_PATH.to_owned()],
        ..Capabilities::default()
    }
}

/// The host directory with the NVIDIA driver on GPU nodes (GKE's layout): the one host path
/// policies may mount by default, since the default decoration mounts it into GPU containers.
pub const NVIDIA_DRIVER_HOST_PATH: &str = "/home/kubernetes/bin/nvidia";

/// How often the epoch ticker advances; deadlines are rounded up to a multiple of it.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

/// The limits of one call into a guest: the engine's maximum, or a policy's own smaller ones
/// (`deadlineMs`, `memoryMib` in its manifest), and whose share of the engine it draws on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallLimits {
    /// Wall-clock budget of the call.
    pub deadline: Duration,
    /// Linear memory the guest may hold in total, across its memories.
    pub memory: usize,
    /// The policy namespace whose share ([`TenantLimits`]) the call counts against; `None`
    /// for cluster-wide policies and the operator's own.
    pub tenant: Option<Arc<str>>,
}

/// A per-policy limit above what the operator allows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("manifest field {field}: {message}")]
pub struct LimitError {
    /// The manifest field: `deadlineMs` or `memoryMib`.
    pub field: &'static str,
    pub message: String,
}

impl SandboxLimits {
    /// How long a caller waits on one policy call before giving up on it: twice the deadline
    /// (instantiation and copying the input and output are outside the guest's clock) plus a
    /// second for a loaded machine's scheduling. The sandbox ends every call within its
    /// deadline; this bound is the backstop if it ever did not.
    pub fn call_bound(&self) -> Duration {
        self.deadline * 2 + Duration::from_secs(1)
    }

    /// The limits of a call of a policy that sets none of its own.
    pub fn call_limits(&self) -> CallLimits {
        CallLimits {
            deadline: self.deadline,
            memory: self.memory,
            tenant: None,
        }
    }

    /// The limits of a policy that asks for `deadline_ms` and `memory_mib` (each defaulting to
    /// the operator's maximum). A policy may only tighten them: asking for more than the
    /// maximum, or for nothing at all, is refused naming the field.
    pub fn narrow(
        &self,
        deadline_ms: Option<u64>,
        memory_mib: Option<u64>,
    ) -> Result<CallLimits, LimitError> {
        let mut limits = self.call_limits();
        if let Some(ms) = deadline_ms {
            let max = self.deadline.as_millis();
            if ms == 0 || u128::from(ms) > max {
                return Err(LimitError {
                    field: "deadlineMs",
                    message: format!("{ms} is outside 1..={max}, the operator's maximum"),
                });
            }
            limits.deadline = Duration::from_millis(ms);
        }
        if let Some(mib) = memory_mib {
            let max = self.memory >> 20;
            let bytes = usize::try_from(mib)
                .ok()
                .and_then(|m| m.checked_mul(1 << 20))
                .filter(|&b| mib > 0 && b <= self.memory);
            let Some(bytes) = bytes else {
                return Err(LimitError {
                    field: "memoryMib",
                    message: format!("{mib} is outside 1..={max}, the operator's maximum"),
                });
            };
            limits.memory = bytes;
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_may_tighten_the_limits_but_not_loosen_them() {
        let max = SandboxLimits::default();
        assert_eq!(max.narrow(None, None), Ok(max.call_limits()));
        assert_eq!(
            max.narrow(Some(10), Some(8)),
            Ok(CallLimits {
                deadline: Duration::from_millis(10),
                memory: 8 << 20,
                tenant: None,
            })
        );
        assert_eq!(max.narrow(Some(50), Some(64)), Ok(max.call_limits()));
        for (deadline, memory, field) in [
            (Some(51), None, "deadlineMs"),
            (Some(0), None, "deadlineMs"),
            (None, Some(65), "memoryMib"),
            (None, Some(0), "memoryMib"),
            (None, Some(u64::MAX), "memoryMib"),
        ] {
            let err = max.narrow(deadline, memory).unwrap_err();
            assert_eq!(err.field, field, "{err}");
            assert!(err.to_string().contains("operator's maximum"), "{err}");
        }
    }
}
