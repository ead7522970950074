//! Timers inside the sandbox end with the call's deadline.
//!
//! The epoch deadline interrupts Wasm code only: a guest blocked in a host call (WASI `poll` or
//! `pollable.block` on a timer, which is what `std::thread::sleep` compiles to) holds its thread
//! for as long as it asked. Everything else a policy can wait on in this sandbox is ready at once
//! (stdin is empty, stdout and stderr are in-memory pipes, sockets and files cannot be opened),
//! so timers are the only way to block, and this module bounds them where they are made: a timer
//! that would fire before the call's deadline works as WASI specifies; one that would fire later
//! stops the call at once as a timeout. A policy may still sleep briefly, and no policy can make
//! a call outlive its deadline by waiting.

use std::time::{Duration, Instant};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::clocks::WasiClocksView;
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host as MonotonicClock;

use crate::sandbox::Sandbox;

/// The interface whose timer constructors are replaced; the version is the one
/// `wasmtime_wasi::p2::add_to_linker_sync` defines (guests of any 0.2.x match it).
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// A guest asked for a timer past the end of its call.
#[derive(Debug, thiserror::Error)]
#[error(
    "the policy asked to wait {asked:?} with {left:?} left before its deadline; a policy may not block past its deadline"
)]
pub struct WaitPastDeadline {
    pub asked: Duration,
    pub left: Duration,
}

/// Replaces `subscribe-duration` and `subscribe-instant` of the WASI monotonic clock already in
/// `linker` with versions that refuse timers past the calling store's deadline.
pub(crate) fn bound_timers(linker: &mut Linker<Sandbox>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |mut store: StoreContextMut<'_, Sandbox>, (nanos,): (u64,)| {
            admit(store.data(), Duration::from_nanos(nanos))?;
            let pollable = store.data_mut().clocks().subscribe_duration(nanos)?;
            Ok((pollable,))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store: StoreContextMut<'_, Sandbox>, (when,): (u64,)| {
            let now = store.data_mut().clocks().now()?;
            admit(store.data(), Duration::from_nanos(when.saturating_sub(now)))?;
            let pollable: Resource<DynPollable> =
                store.data_mut().clocks().subscribe_instant(when)?;
            Ok((pollable,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Whether a timer firing `wait` from now ends before the sandbox's deadline.
fn admit(sandbox: &Sandbox, wait: Duration) -> Result<(), WaitPastDeadline> {
    let left = sandbox.deadline().saturating_duration_since(Instant::now());
    if wait > left {
        return Err(WaitPastDeadline { asked: wait, left });
    }
    Ok(())
}
