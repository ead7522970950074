//! Pre-initialisation: a component's memory after `validate-settings`, made into a component
//! whose instances start from it.
//!
//! Every evaluation runs in a fresh instance, so a policy decodes its settings document on every
//! call (about a sixth of a default decoration's call). Once per policy version, the engine runs
//! `validate-settings` with the version's settings in an instrumented copy of the component and
//! has `wasmtime-wizer` write the memories and globals it left as the data of a new component.
//! Instances of that component begin where the validation ended, with whatever the guest kept
//! (the SDK keeps the decoded settings), and are as fresh as before in every other way: a new
//! store, new WASI state, and nothing from any later call.
//!
//! This module holds only the plumbing between wizer and wasmtime; when and for which settings
//! the engine prepares is in [`crate::engine`].

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use wasmtime::Store;
use wasmtime::component::{Instance, Lift, WasmList};
use wasmtime_wizer::{ComponentContext, ComponentInstanceState, Wizer};

use crate::sandbox::Sandbox;

/// The instrumented component, and what wizer needs to read its state back afterwards.
pub(crate) struct Instrumented<'a> {
    pub context: ComponentContext<'a>,
    pub binary: Vec<u8>,
}

/// Instruments `binary` (a component) so that its internal memories and globals can be read.
pub(crate) fn instrument(binary: &[u8]) -> wasmtime::Result<Instrumented<'_>> {
    let (context, binary) = Wizer::new().instrument_component(binary)?;
    Ok(Instrumented { context, binary })
}

/// The export wizer's instrumentation adds: the accessors of the memories and globals.
const ACCESS_EXPORT: &str = "wasmtime:wizer/access";

/// Whether `component` was compiled from an instrumented component (it exports wizer's
/// accessors). A module that exports the name itself only costs a failed pre-initialisation.
pub(crate) fn is_instrumented(
    component: &wasmtime::component::Component,
    engine: &wasmtime::Engine,
) -> bool {
    component
        .component_type()
        .exports(engine)
        .any(|(name, _)| name == ACCESS_EXPORT)
}

/// The component that starts from `instance`'s state, an instance of `instrumented`.
pub(crate) fn snapshot(
    instrumented: &Instrumented<'_>,
    store: &mut Store<Sandbox>,
    instance: Instance,
) -> wasmtime::Result<Vec<u8>> {
    let mut access = Access {
        store,
        instance,
        failed: None,
    };
    // Wizer expects every read to succeed: when one fails (reported through `failed`), it
    // finds a memory it was not shown and asserts. That assertion is caught here and the read's
    // own error returned, so a failed read costs the copy, not the thread.
    let made = std::panic::catch_unwind(AssertUnwindSafe(|| {
        now(Wizer::new().snapshot_component(&instrumented.context, &mut access))
    }));
    match (access.failed, made) {
        (Some(e), _) => Err(e),
        (None, Ok(bytes)) => bytes,
        (None, Err(_)) => Err(wasmtime::format_err!(
            "the snapshot of the validated instance failed inside wasmtime-wizer"
        )),
    }
}

/// Runs a future that never waits: every call it makes into wasmtime here is synchronous.
fn now<T>(future: impl Future<Output = wasmtime::Result<T>>) -> wasmtime::Result<T> {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => Err(wasmtime::format_err!("pre-initialisation waited on I/O")),
    }
}

/// Reads an instrumented instance's state through the accessors wizer added.
///
/// Wizer's trait has no way to report an error, so the first failure is kept in `failed` (and
/// default values are returned from then on) and [`snapshot`] returns it instead of the
/// component.
struct Access<'a> {
    store: &'a mut Store<Sandbox>,
    instance: Instance,
    failed: Option<wasmtime::Error>,
}

impl Access<'_> {
    fn call<R: Lift + 'static, O: Default>(
        &mut self,
        interface: &str,
        func: &str,
        read: impl FnOnce(&Store<Sandbox>, R) -> O,
    ) -> O {
        if self.failed.is_some() {
            return O::default();
        }
        match self.try_call(interface, func) {
            Ok(value) => read(self.store, value),
            Err(e) => {
                self.failed = Some(e);
                O::default()
            }
        }
    }

    fn try_call<R: Lift + 'static>(&mut self, interface: &str, func: &str) -> wasmtime::Result<R> {
        let missing =
            || wasmtime::format_err!("the instrumented component lacks {interface}#{func}");
        let (_, parent) = self
            .instance
            .get_export(&mut *self.store, None, interface)
            .ok_or_else(missing)?;
        let (_, index) = self
            .instance
            .get_export(&mut *self.store, Some(&parent), func)
            .ok_or_else(missing)?;
        let typed = self
            .instance
            .get_typed_func::<(), (R,)>(&mut *self.store, index)?;
        Ok(typed.call(&mut *self.store, ())?.0)
    }
}

impl ComponentInstanceState for Access<'_> {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        self.call(instance, func, |store, list: WasmList<u8>| {
            contents(list.as_le_slice(store))
        });
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call(instance, func, |_, v: i32| v)
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call(instance, func, |_, v: i64| v)
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call(instance, func, |_, v: f32| v.to_bits())
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call(instance, func, |_, v: f64| v.to_bits())
    }
}
