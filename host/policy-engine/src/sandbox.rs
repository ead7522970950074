//! The per-evaluation store data: a WASI context with no ambient authority, captured output,
//! the memory limiter and the host side of the `log` import.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::tfjob::policy::log::{Host as LogHost, Level};

/// Store data of one evaluation.
pub struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    policy: Arc<str>,
    log_budget: usize,
}

impl Sandbox {
    /// A sandbox for one call into `policy`: no preopened directories, no environment, no
    /// arguments, no sockets, stdin closed; stdout and stderr captured up to `max_log` bytes.
    pub fn new(policy: Arc<str>, memory: usize, max_log: usize) -> Sandbox {
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
            limiter: MemoryLimiter::new(memory),
            stdout,
            stderr,
            policy,
            log_budget: max_log,
        }
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
        let size = message.len() + fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if size > self.log_budget {
            if self.log_budget > 0 {
                tracing::warn!(policy = %self.policy, "policy log budget exhausted; dropping further records");
                self.log_budget = 0;
            }
            return;
        }
        self.log_budget -= size;
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

impl crate::bindings::tfjob::policy::types::Host for Sandbox {}

/// Caps the total linear memory of all memories of one evaluation and remembers whether the cap
/// was hit, so the resulting trap is reported as `memory`, not as a generic trap.
pub struct MemoryLimiter {
    cap: usize,
    granted: usize,
    hit: Arc<AtomicBool>,
}

impl MemoryLimiter {
    fn new(cap: usize) -> MemoryLimiter {
        MemoryLimiter {
            cap,
            granted: 0,
            hit: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether a growth was refused during this evaluation.
    pub fn was_hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
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
        if self.granted.saturating_add(extra) > self.cap {
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
