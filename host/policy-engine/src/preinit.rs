//! Pre-initialised instances: a policy's settings applied once per policy version, not on
//! every call.
//!
//! Every evaluation runs in a fresh instance, so a guest that decodes and checks its settings
//! document does it again on every call (about 14 µs of the default decoration's 115 µs), and
//! starts from a memory whose heap has still to be grown. The engine instead runs the guest's
//! `validate-settings` once, with the policy's settings, in an instance of the component
//! instrumented by Wizer (`wasmtime-wizer`: the same component, plus exports that read its
//! memories and globals). It snapshots that instance into a new component whose memory image is
//! the state `validate-settings` left, and every later call with the same settings starts a
//! fresh instance of *that* component. A fresh sandbox per call is kept: the snapshot is only
//! where each new instance starts.
//!
//! The guest SDK keeps the document `validate-settings` decoded, and a hook given the same text
//! uses it (`tfjob_policy_sdk::settings::load_shared`); any other guest simply starts from a
//! state its own `validate-settings` produced, which the contract allows.
//!
//! Everything here is guest code run in the same sandbox as a call: the policy's deadline and
//! memory cap, no ambient authority. A snapshot larger than the module size limit is refused.
//! Preparation failing is never an error of the policy: its calls then use plain instances.

use wasmtime::Store;
use wasmtime::component::{ComponentType, Instance, Lift, WasmList};
use wasmtime_wizer::{ComponentContext, ComponentInstanceState, Wizer};

use crate::sandbox::Sandbox;

/// The Wizer setup the engine uses: the component keeps no extra exports after rewriting.
pub(crate) fn wizer() -> Wizer {
    Wizer::new()
}

/// `binary` instrumented for a snapshot, or why it cannot be.
pub(crate) fn instrument(binary: &[u8]) -> wasmtime::Result<Vec<u8>> {
    unpanicked(|| wizer().instrument_component(binary).map(|(_, wasm)| wasm))
}

/// Wizer asserts what it does not support (some global types, say) instead of returning an
/// error; such a component is one that cannot be pre-initialised, never a reason to stop.
fn unpanicked<T>(f: impl FnOnce() -> wasmtime::Result<T>) -> wasmtime::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unsupported component".into());
        Err(wasmtime::format_err!("pre-initialisation gave up: {why}"))
    })
}

/// Whether an export name is one of the instrumentation's own, which the host alone calls.
pub(crate) fn is_instrumentation(export: &str) -> bool {
    export.starts_with("wasmtime:wizer/")
}

/// Rewrites `binary` (the component as uploaded) with the state of `instance`, an instance of
/// its instrumented form in which the guest has run its initialisation. The reads run in
/// `store`, under its memory cap, each within `deadline` epoch ticks: between two reads Wizer
/// scans what the first returned, which is no time of the guest's.
pub(crate) fn snapshot(
    binary: &[u8],
    store: &mut Store<Sandbox>,
    instance: Instance,
    deadline: u64,
) -> wasmtime::Result<Vec<u8>> {
    let mut state = State {
        store,
        instance,
        deadline,
        failure: None,
    };
    let rewritten = unpanicked(|| {
        let wizer = wizer();
        // The context describes `binary`; instrumenting is deterministic, so it matches the
        // instrumented component `instance` belongs to.
        let (cx, _) = wizer.instrument_component(binary)?;
        read(&wizer, &cx, &mut state)
    });
    // A failed read leaves Wizer with less state than it expects, which it may assert on:
    // the read's error is the one to report.
    match state.failure {
        Some(e) => Err(e.context("reading the instance's state")),
        None => rewritten,
    }
}

/// Wizer's snapshot is written as async code for runtimes that need it; here every read is a
/// synchronous call, so the future is ready the first time it is polled.
fn read(
    wizer: &Wizer,
    cx: &ComponentContext<'_>,
    state: &mut State<'_>,
) -> wasmtime::Result<Vec<u8>> {
    futures::executor::block_on(wizer.snapshot_component(cx, state))
}

/// The instrumented instance, read through its accessor exports. Wizer's interface cannot
/// report a failed read, so the first one is kept here and every later read returns nothing.
struct State<'a> {
    store: &'a mut Store<Sandbox>,
    instance: Instance,
    /// Epoch ticks each read may take.
    deadline: u64,
    failure: Option<wasmtime::Error>,
}

impl State<'_> {
    fn call<R, T>(
        &mut self,
        instance: &str,
        func: &str,
        use_result: impl FnOnce(&Store<Sandbox>, R) -> T,
    ) -> Option<T>
    where
        R: ComponentType + Lift + Send + Sync + 'static,
    {
        if self.failure.is_some() {
            return None;
        }
        self.store.set_epoch_deadline(self.deadline);
        let result = (|| {
            let (_, scope) = self
                .instance
                .get_export(&mut *self.store, None, instance)
                .ok_or_else(|| wasmtime::format_err!("no export {instance}"))?;
            let (_, index) = self
                .instance
                .get_export(&mut *self.store, Some(&scope), func)
                .ok_or_else(|| wasmtime::format_err!("no export {instance}#{func}"))?;
            let func = self
                .instance
                .get_typed_func::<(), (R,)>(&mut *self.store, index)?;
            let (value,) = func.call(&mut *self.store, ())?;
            Ok(use_result(self.store, value))
        })();
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                self.failure = Some(e);
                None
            }
        }
    }
}

impl ComponentInstanceState for State<'_> {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        let _ = self.call(instance, func, |store, list: WasmList<u8>| {
            contents(list.as_le_slice(store))
        });
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call(instance, func, |_, v: i32| v).unwrap_or_default()
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call(instance, func, |_, v: i64| v).unwrap_or_default()
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call(instance, func, |_, v: f32| v.to_bits())
            .unwrap_or_default()
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call(instance, func, |_, v: f64| v.to_bits())
            .unwrap_or_default()
    }
}
