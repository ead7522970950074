//! The per-evaluation store data: a WASI context with no ambient authority, captured output,
//! the memory limiter, and the host side of the `log` and `cluster` imports.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::tfjob::policy::cluster::{
    Freshness, Got, Host as ClusterHost, Listed, ReadError,
};
use crate::bindings::tfjob::policy::log::{Host as LogHost, Level};
use crate::cluster_access::{CallReads, ReadFailure};
use crate::cluster_cache;

/// Store data of one evaluation.
pub struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    policy: Arc<str>,
    log: LogBudget,
    /// When the call must be over; timers past it are refused (see [`crate::clock`]).
    deadline: Instant,
    /// What the call may read of the cluster, and what it read.
    reads: CallReads,
}

impl Sandbox {
    /// A sandbox for one call into `policy` that must end within `deadline` from now: no
    /// preopened directories, no environment, no arguments, no sockets, stdin empty; stdout and
    /// stderr captured up to `max_log` bytes each.
    pub fn new(
        policy: Arc<str>,
        memory: usize,
        budget: MemoryBudget,
        max_log: usize,
        deadline: Duration,
        reads: CallReads,
    ) -> Sandbox {
        let stdout = MemoryOutputPipe::new(max_log);
        let stderr = MemoryOutputPipe::new(max_log);
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Sandbox {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(memory, budget),
            stdout,
            stderr,
            policy,
            log: LogBudget::new(max_log),
            deadline: Instant::now() + deadline,
            reads,
        }
    }

    /// The call's cluster reads.
    pub fn reads(&self) -> &CallReads {
        &self.reads
    }

    /// The reads of a call, once the deadline is checked: a read past it ends the call.
    fn reading(&mut self) -> wasmtime::Result<&mut CallReads> {
        if Instant::now() >= self.deadline {
            return Err(wasmtime::Error::new(ReadPastDeadline));
        }
        Ok(&mut self.reads)
    }

    /// When the call must be over.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Forwards what the guest printed to the operator's log.
    pub fn flush_output(&self) {
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = pipe.contents();
            if !bytes.is_empty() {
                tracing::info!(policy = %self.policy, stream, output = %String::from_utf8_lossy(&bytes), "policy output");
            }
        }
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl LogHost for Sandbox {
    fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        if !self.log.admit(&message, &fields) {
            if self.log.first_refusal() {
                tracing::warn!(policy = %self.policy, "policy log budget exhausted; dropping further records");
            }
            return;
        }
        let fields = fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let policy = &*self.policy;
        match level {
            Level::Trace => tracing::trace!(policy, fields, "{message}"),
            Level::Debug => tracing::debug!(policy, fields, "{message}"),
            Level::Info => tracing::info!(policy, fields, "{message}"),
            Level::Warn => tracing::warn!(policy, fields, "{message}"),
            Level::Error => tracing::error!(policy, fields, "{message}"),
        }
    }
}

/// A read was asked for after the call's deadline.
#[derive(Debug, thiserror::Error)]
#[error("the policy read the cluster past its deadline")]
pub struct ReadPastDeadline;

impl From<ReadFailure> for ReadError {
    fn from(f: ReadFailure) -> ReadError {
        match f {
            ReadFailure::Denied(m) => ReadError::Denied(m),
            ReadFailure::Unavailable(m) => ReadError::Unavailable(m),
            ReadFailure::TooManyReads(m) => ReadError::TooManyReads(m),
            ReadFailure::TooLarge(m) => ReadError::TooLarge(m),
            ReadFailure::Invalid(m) => ReadError::Invalid(m),
        }
    }
}

fn freshness(f: cluster_cache::Freshness) -> Freshness {
    Freshness {
        synced: f.synced,
        resource_version: f.resource_version,
    }
}

impl ClusterHost for Sandbox {
    fn get(
        &mut self,
        resource: String,
        namespace: String,
        name: String,
    ) -> wasmtime::Result<Result<Got, ReadError>> {
        Ok(self
            .reading()?
            .get(&resource, &namespace, &name)
            .map(|(object, f)| Got {
                object: object.map(|o| o.to_string()),
                freshness: freshness(f),
            })
            .map_err(Into::into))
    }

    fn list(
        &mut self,
        resource: String,
        namespace: String,
        label_selector: String,
        limit: u32,
    ) -> wasmtime::Result<Result<Listed, ReadError>> {
        Ok(self
            .reading()?
            .list(&resource, &namespace, &label_selector, limit)
            .map(|(items, more, f)| Listed {
                items: items.iter().map(|o| o.to_string()).collect(),
                more,
                freshness: freshness(f),
            })
            .map_err(Into::into))
    }
}

/// Components built against contract 0.2.0 import `log@0.2.0`: the same records, the same
/// budget.
impl crate::bindings::v0_2::tfjob::policy::log::Host for Sandbox {
    fn log(
        &mut self,
        level: crate::bindings::v0_2::tfjob::policy::log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) {
        LogHost::log(self, level.into(), message, fields);
    }
}

/// Components built against contract 0.1.0 import `log@0.1.0`: the same records, the same
/// budget.
impl crate::bindings::v0_1::tfjob::policy::log::Host for Sandbox {
    fn log(
        &mut self,
        level: crate::bindings::v0_1::tfjob::policy::log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) {
        LogHost::log(self, level.into(), message, fields);
    }
}

/// What a record costs beyond its text: a record of empty strings still costs the host a
/// formatting pass and a log line, so count and size are bounded together.
const RECORD_COST: usize = 64;
/// What each field costs beyond its key and value.
const FIELD_COST: usize = 16;
/// Records one call may log, however small.
pub const MAX_LOG_RECORDS: usize = 64;

/// The log budget of one call: bytes (text plus a fixed cost per record and per field) and a
/// number of records. Once a record is refused, later ones are too, so what the operator's log
/// shows of a call is always a prefix of what the policy logged.
#[derive(Debug)]
pub(crate) struct LogBudget {
    bytes: usize,
    records: usize,
    refused: usize,
}

impl LogBudget {
    pub(crate) fn new(bytes: usize) -> LogBudget {
        LogBudget {
            bytes,
            records: MAX_LOG_RECORDS,
            refused: 0,
        }
    }

    /// Whether a record fits; if it does, its cost is taken from the budget.
    pub(crate) fn admit(&mut self, message: &str, fields: &[(String, String)]) -> bool {
        let cost = fields
            .iter()
            .fold(RECORD_COST.saturating_add(message.len()), |sum, (k, v)| {
                sum.saturating_add(FIELD_COST + k.len() + v.len())
            });
        if self.refused > 0 || self.records == 0 || cost > self.bytes {
            self.refused += 1;
            return false;
        }
        self.records -= 1;
        self.bytes -= cost;
        true
    }

    /// Whether the last refusal was the first, so exhaustion is reported once per call.
    fn first_refusal(&self) -> bool {
        self.refused == 1
    }
}

impl crate::bindings::tfjob::policy::types::Host for Sandbox {}

/// The linear memory evaluations running at once may hold together. Each evaluation also has
/// its own cap; the engine's budget keeps the sum inside the operator's memory limit whatever
/// the number of concurrent calls. Budgets nest: a policy namespace's share is taken from the
/// budget of all namespaced policies, which is taken from the engine's, so memory is granted
/// only when every level has it.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    total: usize,
    used: Arc<AtomicUsize>,
    /// The budget this one is a share of.
    parent: Option<Arc<MemoryBudget>>,
}

impl MemoryBudget {
    pub fn new(total: usize) -> MemoryBudget {
        MemoryBudget {
            total,
            used: Arc::default(),
            parent: None,
        }
    }

    /// A share of at most `total` bytes of this budget.
    pub fn share(&self, total: usize) -> MemoryBudget {
        MemoryBudget {
            total: total.min(self.total),
            used: Arc::default(),
            parent: Some(Arc::new(self.clone())),
        }
    }

    /// Bytes held by evaluations now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Bytes this budget may hold.
    pub fn total(&self) -> usize {
        self.total
    }

    fn try_take(&self, bytes: usize) -> bool {
        let taken = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= self.total)
            })
            .is_ok();
        if !taken {
            return false;
        }
        match &self.parent {
            Some(parent) if !parent.try_take(bytes) => {
                self.used.fetch_sub(bytes, Ordering::AcqRel);
                false
            }
            _ => true,
        }
    }

    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(parent) = &self.parent {
            parent.give_back(bytes);
        }
    }
}

/// Caps the total linear memory of all memories of one evaluation, takes it from the shared
/// [`MemoryBudget`] (and gives it back when the evaluation's store is dropped), and remembers
/// whether a cap was hit, so the resulting trap is reported as `memory`, not as a generic trap.
pub struct MemoryLimiter {
    cap: usize,
    granted: usize,
    budget: MemoryBudget,
    hit: Arc<AtomicBool>,
}

impl MemoryLimiter {
    fn new(cap: usize, budget: MemoryBudget) -> MemoryLimiter {
        MemoryLimiter {
            cap,
            granted: 0,
            budget,
            hit: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether a growth was refused during this evaluation.
    pub fn was_hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
    }

    /// The linear memory the evaluation's memories hold, in bytes.
    pub fn granted(&self) -> usize {
        self.granted
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        self.budget.give_back(self.granted);
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let extra = desired.saturating_sub(current);
        if self.granted.saturating_add(extra) > self.cap || !self.budget.try_take(extra) {
            self.hit.store(true, Ordering::Relaxed);
            return Ok(false);
        }
        self.granted += extra;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a generous fixed cap keeps a guest from using them
        // to sidestep the memory cap.
        Ok(desired <= 100_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_fields(n: usize) -> Vec<(String, String)> {
        vec![(String::new(), String::new()); n]
    }

    #[test]
    fn empty_records_and_fields_cost_budget() {
        let mut budget = LogBudget::new(16 << 10);
        // 16 KiB of budget holds few records of 1,000 empty fields, though their text is empty.
        let admitted = (0..100)
            .take_while(|_| budget.admit("", &empty_fields(1000)))
            .count();
        assert_eq!(admitted, (16 << 10) / (RECORD_COST + 1000 * FIELD_COST));
        assert!(budget.first_refusal());
        assert!(!budget.admit("", &[]), "refused once, refused for good");
        assert!(!budget.first_refusal());
    }

    #[test]
    fn the_number_of_records_is_capped() {
        let mut budget = LogBudget::new(usize::MAX);
        let admitted = (0..1000).take_while(|_| budget.admit("", &[])).count();
        assert_eq!(admitted, MAX_LOG_RECORDS);
    }

    #[test]
    fn the_budget_is_shared_and_given_back() {
        let budget = MemoryBudget::new(100);
        let mut a = MemoryLimiter::new(80, budget.clone());
        let mut b = MemoryLimiter::new(80, budget.clone());
        assert!(a.memory_growing(0, 60, None).unwrap());
        // Within b's own cap, but the budget has only 40 left.
        assert!(!b.memory_growing(0, 50, None).unwrap());
        assert!(b.was_hit());
        assert!(b.memory_growing(0, 40, None).unwrap());
        assert_eq!(budget.used(), 100);
        drop(a);
        assert_eq!(budget.used(), 40);
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_share_holds_its_owner_to_it_and_leaves_the_rest_to_others() {
        let engine = MemoryBudget::new(100);
        let namespaced = engine.share(75);
        let (team_a, team_b) = (namespaced.share(40), namespaced.share(40));
        let mut greedy = MemoryLimiter::new(1000, team_a.clone());
        assert!(
            !greedy.memory_growing(0, 41, None).unwrap(),
            "past its share"
        );
        assert!(greedy.memory_growing(0, 40, None).unwrap());
        let mut second = MemoryLimiter::new(1000, team_a.clone());
        assert!(
            !second.memory_growing(0, 1, None).unwrap(),
            "the share is in use"
        );
        assert!(second.was_hit());
        // Another team still has its own share, then the namespaced budget runs out.
        let mut other = MemoryLimiter::new(1000, team_b.clone());
        assert!(
            !other.memory_growing(0, 36, None).unwrap(),
            "75 for all namespaces"
        );
        assert!(other.memory_growing(0, 35, None).unwrap());
        assert_eq!(
            (team_b.used(), namespaced.used(), engine.used()),
            (35, 75, 75)
        );
        // The cluster-wide policies' reserve is theirs alone.
        let mut cluster = MemoryLimiter::new(1000, engine.clone());
        assert!(cluster.memory_growing(0, 25, None).unwrap());
        assert!(!cluster.memory_growing(25, 26, None).unwrap());
        drop((greedy, second, other));
        assert_eq!(
            (team_a.used(), namespaced.used(), engine.used()),
            (0, 0, 25)
        );
        drop(cluster);
        assert_eq!(engine.used(), 0);
    }

    #[test]
    fn huge_lengths_do_not_overflow() {
        let mut budget = LogBudget::new(usize::MAX - 1);
        let fields = vec![("k".repeat(10), "v".repeat(10)); 4];
        assert!(budget.admit(&"m".repeat(100), &fields));
        assert_eq!(budget.records, MAX_LOG_RECORDS - 1);
    }
}
