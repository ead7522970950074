//! The wasmtime plumbing: one shared `Engine`, components compiled once per content digest
//! (in this process or in a child, see [`Compiler`], from the functions compiled before, see
//! `function_cache.rs`), mapped from the files of the compiled-code cache and kept as
//! `InstancePre` (with copies pre-initialised for a settings document, see `preinit.rs`, made
//! in the child too and filed in the cache), and a fresh `Store` per evaluation with
//! an epoch deadline and a memory cap. [`CompiledPolicy::parts_for`] says what a loaded policy
//! holds. Every failure becomes an [`EvalError`] with a category; nothing here panics on guest
//! behaviour or blocks past the deadline.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Instance, InstancePre, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
};

use tfjob_policy_logic::text;

use crate::bindings::{self, classify, decorate, resources, settings, v0_1, v0_2};
use crate::clock::WaitPastDeadline;
use crate::cluster_access::{CallReads, Reader};
use crate::compiled_cache::CompiledCache;
use crate::config::{CallLimits, EPOCH_TICK, SandboxLimits};
use crate::error::{Category, EngineSetupError, EvalError};
use crate::function_cache::{self, FunctionCache};
use crate::loaded_budget::Part;
use crate::preinit;
use crate::resident;
use crate::sandbox::{MemoryBudget, ReadPastDeadline, Sandbox};
use crate::settings_uses::{SettingsUse, SettingsUses};
use crate::tenants::{Share, Tenants};

pub use tfjob_planner::Hook;

/// A compiled, linked policy component.
pub struct CompiledPolicy {
    /// Lower-case hex sha256 of the module bytes.
    pub digest: String,
    pub size: usize,
    /// Component imports, e.g. `wasi:cli/environment@0.2.x`.
    pub imports: Vec<String>,
    /// Component exports, e.g. `tfjob:policy/decorate@0.3.0`.
    pub exports: Vec<String>,
    pre: InstancePre<Sandbox>,
    /// Where the compiled code lives: mapped from a cache file, or held in memory.
    code: CodeBacking,
    /// The module, read again to pre-initialise it: kept on disk beside the compiled code where
    /// it can be, so a loaded policy holds no copy of its bytes; none in a prepared copy, or
    /// when the compiled component cannot be read back (it was not instrumented).
    source: ModuleSource,
    /// Copies pre-initialised for a settings document (see [`LimitedEngine::prepare`]), at
    /// most [`MAX_PREPARED`]; read on every call, written once per policy version.
    prepared: ArcSwap<Vec<Prepared>>,
    /// Settings documents a background preparation was started for, whatever came of it: each
    /// is tried once, and at most [`MAX_PREPARED`] are.
    tried: Mutex<Vec<Box<str>>>,
    /// The settings documents active versions run with: copies for others are dropped.
    uses: Arc<SettingsUses>,
    decorate: Option<
        Export<decorate::GuestIndices, v0_2::decorate::GuestIndices, v0_1::decorate::GuestIndices>,
    >,
    resources: Option<
        Export<
            resources::GuestIndices,
            v0_2::resources::GuestIndices,
            v0_1::resources::GuestIndices,
        >,
    >,
    classify: Option<
        Export<classify::GuestIndices, v0_2::classify::GuestIndices, v0_1::classify::GuestIndices>,
    >,
    settings: Option<
        Export<settings::GuestIndices, v0_2::settings::GuestIndices, v0_1::settings::GuestIndices>,
    >,
}

/// The most pre-initialised copies one module keeps, one per settings document that active
/// versions run with (copies for documents no version runs any more are dropped): beyond it, a
/// version with yet other settings runs from the plain instance. Eight, for the CEL evaluator
/// that every team's CEL policy shares; what the copies hold is charged to the budget of loaded
/// policies all the same.
pub const MAX_PREPARED: usize = 8;

/// The most linear memory a validation may leave for a copy to be made of it: the snapshot
/// copies what the memories hold, and a component of more than the module limit is refused
/// anyway, so a validation that fills its memory cap costs a bounded copy, not 64 MiB.
pub const MAX_PREPARED_MEMORY: usize = 16 << 20;

/// How long reading a validated instance's state back may take. The reads run only the
/// accessors the instrumentation added (no guest code), over at most [`MAX_PREPARED_MEMORY`],
/// so they are bounded by the host's speed, not by the policy: on a loaded machine they outlast
/// the policy's own call deadline, and a read cut short would leave no copy at all.
const SNAPSHOT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Where a component's compiled code lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeBacking {
    /// Mapped from a file of the compiled-code cache: pages are read in when touched and the
    /// kernel may drop them again.
    Mapped { bytes: usize },
    /// Copied into the operator's memory (no cache file could be written).
    Held { bytes: usize },
}

impl CodeBacking {
    /// The size of the compiled image.
    pub fn bytes(&self) -> usize {
        match self {
            CodeBacking::Mapped { bytes } | CodeBacking::Held { bytes } => *bytes,
        }
    }
}

/// Where the module of a compiled policy can be read again.
enum ModuleSource {
    None,
    /// In the compiled-code cache; the file's sha256 is the module's digest.
    File(std::path::PathBuf),
    Held(Arc<[u8]>),
}

/// A copy of a component whose instances start where `validate-settings` of `settings` ended.
#[derive(Clone)]
struct Prepared {
    settings: Box<str>,
    policy: Arc<CompiledPolicy>,
}

/// A hook's export, found under the current contract, under 0.2.0 or under 0.1.0.
///
/// 0.2.0's bindings take and give 0.3.0's types (they differ only in the interfaces' names), so
/// a call is written once for both with [`call_export!`]; 0.1.0's is written apart.
enum Export<Current, V2, V1> {
    Current(Current),
    V0_2(V2),
    V0_1(V1),
}

/// Matches an [`Export`]: `$since_v0_2` (with `$i` bound) for the current contract and 0.2.0,
/// whose bindings differ in type but not in shape; `$v0_1` (with `$old` bound) for 0.1.0.
macro_rules! call_export {
    ($export:expr, |$i:ident| $since_v0_2:expr, |$old:ident| $v0_1:expr $(,)?) => {
        match $export {
            Export::Current($i) => $since_v0_2,
            Export::V0_2($i) => $since_v0_2,
            Export::V0_1($old) => $v0_1,
        }
    };
}

impl<C, V2, V1> Export<C, V2, V1> {
    /// The export under the current contract, else under 0.2.0, else under 0.1.0, else none.
    fn find(
        current: wasmtime::Result<C>,
        v0_2: impl FnOnce() -> wasmtime::Result<V2>,
        v0_1: impl FnOnce() -> wasmtime::Result<V1>,
    ) -> Option<Self> {
        if let Ok(c) = current {
            return Some(Export::Current(c));
        }
        if let Ok(c) = v0_2() {
            return Some(Export::V0_2(c));
        }
        v0_1().ok().map(Export::V0_1)
    }

    /// The contract version the export belongs to.
    fn version(&self) -> &'static str {
        match self {
            Export::Current(_) => "0.3.0",
            Export::V0_2(_) => "0.2.0",
            Export::V0_1(_) => "0.1.0",
        }
    }
}

impl CompiledPolicy {
    /// The contract version the component was built against: the oldest its hooks are
    /// exported at.
    pub fn contract(&self) -> &'static str {
        [
            self.decorate.as_ref().map(Export::version),
            self.resources.as_ref().map(Export::version),
            self.classify.as_ref().map(Export::version),
            self.settings.as_ref().map(Export::version),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or("0.3.0")
    }
}

impl CompiledPolicy {
    /// The first 12 hex digits of the digest, as recorded on pods.
    pub fn short_digest(&self) -> &str {
        &self.digest[..12]
    }

    /// The hooks the component exports.
    pub fn hooks(&self) -> Vec<Hook> {
        let mut hooks = Vec::new();
        if self.decorate.is_some() {
            hooks.push(Hook::Decorate);
        }
        if self.resources.is_some() {
            hooks.push(Hook::Resources);
        }
        if self.classify.is_some() {
            hooks.push(Hook::Classify);
        }
        hooks
    }

    /// Where its compiled code lives (the plain component's; a prepared copy has its own).
    pub fn code(&self) -> &CodeBacking {
        &self.code
    }

    /// What this module costs loaded for `settings`, measured now: its component (the resident
    /// pages of its compiled image where it is mapped, the whole image where it is held, and a
    /// module kept in memory) and the copy pre-initialised for `settings`, if there is one.
    pub fn parts_for(&self, settings: &str) -> Vec<Part> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok();
        let cost = |c: &CompiledPolicy| -> u64 {
            let image = c.pre.component().image_range();
            let range = image.start as usize..image.end as usize;
            let code = match (&c.code, &smaps) {
                (CodeBacking::Mapped { .. }, Some(smaps)) => resident::resident_in(smaps, range),
                (backing, _) => backing.bytes() as u64,
            };
            let module = match &c.source {
                ModuleSource::Held(bytes) => bytes.len() as u64,
                ModuleSource::None | ModuleSource::File(_) => 0,
            };
            code.saturating_add(module)
        };
        let mut parts = vec![Part {
            id: self.digest.clone(),
            bytes: cost(self),
        }];
        if let Some(copy) = self.prepared_for(settings) {
            parts.push(Part {
                id: prepared_key(&self.digest, settings),
                bytes: cost(&copy),
            });
        }
        parts
    }

    /// [`CompiledPolicy::parts_for`] with the copy for `settings` counted before it exists, at
    /// the size of the plain component's code (which the copy's is a copy of): what a version
    /// whose copy is made in the background holds once it is.
    pub fn parts_ahead_of_copy(&self, settings: &str) -> Vec<Part> {
        let mut parts = self.parts_for(settings);
        if parts.len() == 1 && self.validates_settings() {
            parts.push(Part {
                id: prepared_key(&self.digest, settings),
                bytes: self.code.bytes() as u64,
            });
        }
        parts
    }

    /// Whether it exports `validate-settings`.
    pub fn validates_settings(&self) -> bool {
        self.settings.is_some()
    }

    /// Whether a copy pre-initialised for `settings` is ready.
    pub fn is_prepared_for(&self, settings: &str) -> bool {
        self.prepared_for(settings).is_some()
    }

    /// Records that a background preparation for `settings` starts; false when there is
    /// nothing to prepare or it was tried already.
    fn claim_preparation(&self, settings: &str) -> bool {
        if self.settings.is_none() || matches!(self.source, ModuleSource::None) {
            return false;
        }
        let mut tried = self.tried.lock().expect("preparation lock");
        if tried.len() >= MAX_PREPARED || tried.iter().any(|t| &**t == settings) {
            return false;
        }
        tried.push(settings.into());
        true
    }

    /// The copy pre-initialised for `settings`, if there is one.
    fn prepared_for(&self, settings: &str) -> Option<Arc<CompiledPolicy>> {
        self.prepared
            .load()
            .iter()
            .find(|p| &*p.settings == settings)
            .map(|p| Arc::clone(&p.policy))
    }

    /// Counts a version running with `settings` until the returned use is dropped.
    pub fn use_settings(&self, settings: &str) -> SettingsUse {
        self.uses.hold(settings)
    }

    /// Drops the copies for settings no version runs with any more, and forgets that their
    /// preparation was tried; returns them.
    fn drop_unused_copies(&self) -> Vec<Prepared> {
        let in_use = |settings: &str| self.uses.in_use(settings);
        let previous = self.prepared.rcu(|list| {
            list.iter()
                .filter(|p| in_use(&p.settings))
                .cloned()
                .collect::<Vec<_>>()
        });
        self.tried
            .lock()
            .expect("preparation lock")
            .retain(|settings| in_use(settings));
        previous
            .iter()
            .filter(|p| !in_use(&p.settings))
            .cloned()
            .collect()
    }
}

impl fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledPolicy")
            .field("digest", &self.digest)
            .field("size", &self.size)
            .field("hooks", &self.hooks())
            .finish()
    }
}

type CompileSlot = Arc<Mutex<Option<Arc<CompiledPolicy>>>>;

/// The shared Wasm engine.
pub struct PolicyEngine {
    engine: Engine,
    /// The running engine's settings with on-demand allocation: each compilation gets an
    /// engine of its own from it (see [`precompile_apart`]).
    compile_config: Config,
    linker: Linker<Sandbox>,
    limits: SandboxLimits,
    /// The memory all evaluations hold together.
    budget: MemoryBudget,
    /// Each policy namespace's share of the concurrency and of `budget`.
    tenants: Tenants,
    /// Compiled components by digest; each slot is locked while its digest compiles.
    compiled: Mutex<HashMap<String, CompileSlot>>,
    /// Compiled code on disk, kept across restarts.
    disk: Option<CompiledCache>,
    /// Where compilations run.
    compiler: Compiler,
    /// What a compilation must agree on with this engine (see [`compile_standalone`]).
    compile_settings: CompileSettings,
    /// Held while a [`Compiler::Process`] child runs.
    compiling: Mutex<()>,
    /// Held by a background preparation while it runs: one at a time, so that many policies
    /// activated together cost one core and one snapshot's memory, not one per policy.
    preparing: Mutex<()>,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
}

impl PolicyEngine {
    /// Builds the engine: epoch interruption with a background ticker, the pooling allocator
    /// sized for `limits.concurrency` evaluations (falling back to on-demand allocation where
    /// the machine cannot reserve the pool), and a linker with WASI (no ambient authority) and
    /// the `log` import.
    pub fn new(limits: SandboxLimits) -> Result<PolicyEngine, EngineSetupError> {
        let (engine, pooling) = match Engine::new(&engine_config(&limits, true)) {
            Ok(e) => (e, true),
            Err(pooling) => {
                tracing::warn!(error = %pooling, "pooling allocator unavailable; using on-demand allocation");
                let engine = Engine::new(&engine_config(&limits, false))
                    .map_err(|e| EngineSetupError(e.to_string()))?;
                (engine, false)
            }
        };
        PolicyEngine::assemble(limits, engine, pooling)
    }

    /// The engine a compiler child pre-initialises a policy with ([`Compiler::Process`], see
    /// [`PolicyEngine::prepare_stored`]): the compilation settings of the operator's engine
    /// (`settings`), instances allocated on demand, a compiler in this process.
    pub fn for_compiler_child(
        limits: SandboxLimits,
        settings: CompileSettings,
    ) -> Result<PolicyEngine, EngineSetupError> {
        let limits = SandboxLimits {
            memory: settings.memory,
            ..limits
        };
        let mut config = engine_config(&limits, settings.pooling);
        config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
        let engine = Engine::new(&config).map_err(|e| EngineSetupError(e.to_string()))?;
        PolicyEngine::assemble(limits, engine, settings.pooling)
    }

    fn assemble(
        limits: SandboxLimits,
        engine: Engine,
        pooling: bool,
    ) -> Result<PolicyEngine, EngineSetupError> {
        let compile_settings = CompileSettings {
            memory: limits.memory,
            pooling,
        };
        let mut compile_config = engine_config(&limits, pooling);
        compile_config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| EngineSetupError(e.to_string()))?;
        crate::clock::bound_timers(&mut linker).map_err(|e| EngineSetupError(e.to_string()))?;
        bindings::tfjob::policy::log::add_to_linker::<Sandbox, HasSelf<Sandbox>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| EngineSetupError(e.to_string()))?;
        bindings::tfjob::policy::cluster::add_to_linker::<Sandbox, HasSelf<Sandbox>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| EngineSetupError(e.to_string()))?;
        v0_2::tfjob::policy::log::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |s| s)
            .map_err(|e| EngineSetupError(e.to_string()))?;
        v0_1::tfjob::policy::log::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |s| s)
            .map_err(|e| EngineSetupError(e.to_string()))?;

        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let engine = engine.clone();
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("wasm-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| EngineSetupError(format!("starting the epoch ticker: {e}")))?
        };
        let budget = MemoryBudget::new(limits.memory_budget);
        Ok(PolicyEngine {
            engine,
            compile_config,
            linker,
            tenants: Tenants::new(limits.tenant.clone(), &budget),
            budget,
            limits,
            compiled: Mutex::default(),
            // Compiled code is mapped from files even without a configured cache directory;
            // where no temporary directory can be made, it is held in memory.
            disk: CompiledCache::temporary()
                .inspect_err(|e| tracing::warn!(error = %e, "compiled policies are held in memory"))
                .ok(),
            compiler: Compiler::InProcess,
            compile_settings,
            compiling: Mutex::default(),
            preparing: Mutex::default(),
            stop,
            ticker: Some(ticker),
        })
    }

    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    /// This engine, keeping compiled code in `cache` and loading it from there.
    pub fn with_compiled_cache(mut self, cache: CompiledCache) -> PolicyEngine {
        self.disk = Some(cache);
        self
    }

    /// This engine, compiling with `compiler`.
    pub fn with_compiler(mut self, compiler: Compiler) -> PolicyEngine {
        self.compiler = compiler;
        self
    }

    /// The compiled-code cache, if the engine has one.
    pub fn compiled_cache(&self) -> Option<&CompiledCache> {
        self.disk.as_ref()
    }

    /// Compiles and links a component, once per content digest: concurrent calls with the same
    /// bytes wait for one compilation and share its result. Fails with category `link` when the
    /// bytes are not a component, are too large (but for the operator's built-in components),
    /// or import something the sandbox does not provide.
    pub fn compile(&self, wasm: &[u8]) -> Result<Arc<CompiledPolicy>, EvalError> {
        // Compared only past the bound, where a built-in component is the one exception.
        if wasm.len() > self.limits.max_module && !crate::builtin::is_builtin(wasm) {
            return Err(EvalError::new(
                Category::Link,
                format!(
                    "module is {} bytes; the limit is {}",
                    wasm.len(),
                    self.limits.max_module
                ),
            ));
        }
        let digest = hex::encode(Sha256::digest(wasm));
        // The map lock is held only to find the digest's slot; compiling (hundreds of
        // milliseconds) holds the slot's lock, so other digests compile in parallel.
        let slot = Arc::clone(
            self.compiled
                .lock()
                .expect("compile cache lock")
                .entry(digest.clone())
                .or_default(),
        );
        // A trace's span of an activation's compilation; a cached module is a hit, not compiled.
        let span = tracing::span!(
            target: tfjob_planner::SPAN_TARGET,
            tracing::Level::DEBUG,
            "policy compile",
            policy.digest = digest.as_str(),
            module.bytes = wasm.len(),
            cache_hit = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let _in_span = span.enter();
        let mut cached = slot.lock().expect("compile slot lock");
        if let Some(hit) = &*cached {
            span.record("cache_hit", true);
            return Ok(Arc::clone(hit));
        }
        span.record("cache_hit", false);
        match self.compile_uncached(wasm, digest.clone()) {
            Ok(compiled) => {
                *cached = Some(Arc::clone(&compiled));
                Ok(compiled)
            }
            Err(e) => {
                span.record("otel.status_code", "ERROR");
                // Bad bytes leave no slot behind, or every rejected upload would stay.
                drop(cached);
                self.compiled
                    .lock()
                    .expect("compile cache lock")
                    .remove(&digest);
                Err(e)
            }
        }
    }

    /// Forgets compiled policies that nothing else holds (no active policy uses them any more),
    /// so that replaced modules do not stay in memory for the life of the operator, and the
    /// pre-initialised copies of those still held for settings no version runs any more.
    /// Returns how many compiled policies were dropped.
    pub fn evict_unused(&self) -> usize {
        let mut dropped = Vec::new();
        let mut kept = Vec::new();
        {
            let mut map = self.compiled.lock().expect("compile cache lock");
            map.retain(|_, slot| match slot.try_lock() {
                // Held by a compilation in progress: keep it.
                Err(_) => true,
                Ok(cached) => match cached.as_ref() {
                    Some(compiled) if Arc::strong_count(compiled) > 1 => {
                        kept.push(Arc::clone(compiled));
                        true
                    }
                    Some(compiled) => {
                        dropped.push(Arc::clone(compiled));
                        false
                    }
                    None => false,
                },
            });
        }
        let copies: Vec<(String, Vec<Prepared>)> = kept
            .iter()
            .map(|c| (c.digest.clone(), c.drop_unused_copies()))
            .filter(|(_, copies)| !copies.is_empty())
            .collect();
        if !copies.is_empty() {
            tracing::debug!(
                copies = copies.iter().map(|(_, c)| c.len()).sum::<usize>(),
                "pre-initialised copies for settings no version runs were dropped"
            );
        }
        // Their files go too, so the cache directory holds what is loaded, not every version
        // ever seen (a mapped file stays readable until the last call using it ends).
        if let Some(cache) = &self.disk {
            for compiled in &dropped {
                cache.forget(&compiled.digest, &self.engine);
                for copy in compiled.prepared.load().iter() {
                    cache.forget(
                        &prepared_key(&compiled.digest, &copy.settings),
                        &self.engine,
                    );
                }
            }
            for (digest, gone) in &copies {
                for copy in gone {
                    cache.forget(&prepared_key(digest, &copy.settings), &self.engine);
                }
            }
        }
        dropped.len()
    }

    fn compile_uncached(
        &self,
        wasm: &[u8],
        digest: String,
    ) -> Result<Arc<CompiledPolicy>, EvalError> {
        // Text (WAT) is turned into binary first, so the shape check sees what gets compiled;
        // both run on a cache miss only.
        let binary = wat::parse_bytes(wasm)
            .map_err(|e| EvalError::new(Category::Link, format!("not a Wasm component: {e}")))?;
        crate::structure::check(&binary).map_err(|e| EvalError::new(Category::Link, e))?;
        // What is compiled is the component instrumented for pre-initialisation: the same code
        // with accessors of its memories and globals added as exports no hook reaches. Its
        // instances serve calls until a pre-initialised copy is ready and are what the copy is
        // snapshotted from, so one compilation serves both (a language runtime takes seconds).
        // A component wizer cannot instrument is compiled as it is, and never pre-initialised.
        // Instrumenting happens where compiling does (in the child, with a child compiler).
        let code = self.load_code(&digest, &binary, Instrument::Yes)?;
        let instrumented = preinit::is_instrumented(&code.0, &self.engine);
        let source = match (instrumented, &self.disk) {
            (false, _) => ModuleSource::None,
            (true, Some(cache)) => match cache.store_module(&digest, &binary) {
                Ok(path) => ModuleSource::File(path),
                Err(_) => ModuleSource::Held(binary.into_owned().into()),
            },
            (true, None) => ModuleSource::Held(binary.into_owned().into()),
        };
        self.link(code, digest, wasm.len(), source)
    }

    /// The compiled code of `binary`, filed in the cache under `key`: mapped from the cache's
    /// file when a sound one is there, else compiled (with an engine of its own, see
    /// [`precompile_apart`]), written and mapped; held in memory where no file can be written.
    fn load_code(
        &self,
        key: &str,
        binary: &[u8],
        instrument: Instrument,
    ) -> Result<(Component, CodeBacking), EvalError> {
        let Some(cache) = &self.disk else {
            let code = self.precompile(binary, instrument).map_err(link)?;
            let bytes = code.len();
            let component = deserialize_fresh(&self.engine, &code).map_err(link)?;
            return Ok((component, CodeBacking::Held { bytes }));
        };
        let path = cache.path(key, &self.engine);
        if cache.verify(&path) {
            match map_file(&self.engine, &path) {
                Ok(mapped) => return Ok(mapped),
                Err(e) => cache.reject(&path, &e.to_string()),
            }
        }
        let code = self.precompile(binary, instrument).map_err(link)?;
        if cache.store(&path, &code).is_ok() {
            match map_file(&self.engine, &path) {
                Ok(mapped) => return Ok(mapped),
                Err(e) => cache.reject(&path, &e.to_string()),
            }
        }
        let bytes = code.len();
        let component = deserialize_fresh(&self.engine, &code).map_err(link)?;
        Ok((component, CodeBacking::Held { bytes }))
    }

    /// Compiles `binary` into code for this engine, where the engine's [`Compiler`] says.
    fn precompile(&self, binary: &[u8], instrument: Instrument) -> wasmtime::Result<Vec<u8>> {
        let functions = self.disk.as_ref().map(CompiledCache::functions_path);
        match &self.compiler {
            Compiler::InProcess => precompile_apart(
                &self.compile_config,
                functions.as_deref(),
                &instrument.apply(binary),
            ),
            Compiler::Process {
                program,
                args,
                time_limit,
            } => {
                // One child at a time, on all cores but one: loads of many policies at once
                // (a team applying a batch) leave a core to the operator's reconciles.
                let _one = self
                    .compiling
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let child = ChildCompiler {
                    program,
                    args,
                    time_limit: *time_limit,
                    settings: &self.compile_settings,
                    functions: functions.as_deref(),
                };
                child.compile(binary, instrument)
            }
        }
    }

    /// Has a [`Compiler::Process`] child pre-initialise `policy` for `settings` within
    /// `limits` ([`PolicyEngine::prepare_stored`]) and maps the copy it filed in the cache.
    /// `None` when this engine compiles in process, or keeps the module nowhere a child can
    /// read it: the caller pre-initialises in this process.
    ///
    /// Running the validation, taking the snapshot and compiling the copy hold a Python
    /// policy's instance, its snapshot and the compiler's working memory at once (the operator
    /// peaked at 380-520 MiB loading Python policies in process); in the child, none of it is
    /// the operator's, and the operator's cores are free for its reconciles but for the child's.
    fn prepare_apart(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        settings: &str,
        limits: &CallLimits,
    ) -> Result<Option<(Component, CodeBacking)>, EvalError> {
        let (
            Compiler::Process {
                program,
                args,
                time_limit,
            },
            ModuleSource::File(_),
            Some(cache),
        ) = (&self.compiler, &policy.source, &self.disk)
        else {
            return Ok(None);
        };
        let functions = cache.functions_path();
        let child = ChildCompiler {
            program,
            args,
            time_limit: *time_limit,
            settings: &self.compile_settings,
            functions: Some(&functions),
        };
        let request = PrepareRequest {
            digest: &policy.digest,
            cache_dir: cache.dir(),
            name,
            limits,
            max_module: self.limits.max_module,
        };
        let reply = {
            let _one = self
                .compiling
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            child.run(&request.args(), settings.as_bytes())
        }
        .map_err(|e| {
            EvalError::new(
                Category::Link,
                format!("pre-initialising in the compiler process: {e:#}"),
            )
        })?;
        PrepareReply::parse(&reply)?;
        let key = prepared_key(&policy.digest, settings);
        self.cached_code(&key).map(Some).ok_or_else(|| {
            EvalError::new(
                Category::Link,
                "the compiler process reported a pre-initialised copy that is not in the cache",
            )
        })
    }

    /// Pre-initialises the module kept in this engine's cache under `digest` for `settings`,
    /// within `limits`, filing the copy in the cache: what a compiler child does for the
    /// operator (see [`PolicyEngine::prepare_apart`]). The module's plain code is mapped from
    /// the file the operator's compilation left. Returns whether a copy was made.
    pub fn prepare_stored(
        &self,
        digest: &str,
        name: &str,
        settings: &str,
        limits: CallLimits,
    ) -> Result<bool, EvalError> {
        let cache = self
            .disk
            .as_ref()
            .ok_or_else(|| EvalError::new(Category::Link, "no cache directory"))?;
        let path = cache.module_path(digest);
        let module = cache.read_module(&path).ok_or_else(|| {
            EvalError::new(
                Category::Link,
                format!("no sound module at {}", path.display()),
            )
        })?;
        let policy = self.compile(&module)?;
        if policy.digest != digest {
            return Err(EvalError::new(
                Category::Link,
                format!("the module at {} is not {digest}", path.display()),
            ));
        }
        self.limited(limits).prepare(&policy, name, settings)
    }

    /// The compiled code filed under `key`, mapped, when a sound file is there.
    fn cached_code(&self, key: &str) -> Option<(Component, CodeBacking)> {
        let cache = self.disk.as_ref()?;
        let path = cache.path(key, &self.engine);
        if !cache.verify(&path) {
            return None;
        }
        map_file(&self.engine, &path)
            .inspect_err(|e| cache.reject(&path, &e.to_string()))
            .ok()
    }

    /// Links a compiled component and finds its hooks.
    fn link(
        &self,
        (component, code): (Component, CodeBacking),
        digest: String,
        size: usize,
        source: ModuleSource,
    ) -> Result<Arc<CompiledPolicy>, EvalError> {
        let ty = component.component_type();
        let imports = ty
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let exports = ty
            .exports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let pre = self.linker.instantiate_pre(&component).map_err(link)?;
        Ok(Arc::new(CompiledPolicy {
            digest,
            size,
            imports,
            exports,
            code,
            source,
            prepared: ArcSwap::default(),
            tried: Mutex::default(),
            uses: Arc::default(),
            decorate: Export::find(
                decorate::GuestIndices::new(&pre),
                || v0_2::decorate::GuestIndices::new(&pre),
                || v0_1::decorate::GuestIndices::new(&pre),
            ),
            resources: Export::find(
                resources::GuestIndices::new(&pre),
                || v0_2::resources::GuestIndices::new(&pre),
                || v0_1::resources::GuestIndices::new(&pre),
            ),
            classify: Export::find(
                classify::GuestIndices::new(&pre),
                || v0_2::classify::GuestIndices::new(&pre),
                || v0_1::classify::GuestIndices::new(&pre),
            ),
            settings: Export::find(
                settings::GuestIndices::new(&pre),
                || v0_2::settings::GuestIndices::new(&pre),
                || v0_1::settings::GuestIndices::new(&pre),
            ),
            pre,
        }))
    }

    /// The engine bounded by `limits` for the calls made through it, e.g. a policy's own
    /// smaller deadline and memory cap. Limits above the engine's maximum are clamped to it:
    /// the maximum the operator was started with holds whatever a caller asks for.
    pub fn limited(&self, limits: CallLimits) -> LimitedEngine<'_> {
        LimitedEngine {
            engine: self,
            limits: CallLimits {
                deadline: limits.deadline.min(self.limits.deadline),
                memory: limits.memory.min(self.limits.memory),
                tenant: limits.tenant,
            },
            reader: None,
            pod: None,
        }
    }

    /// The engine bounded by the maximum it was started with, for calls of a policy that has
    /// no limits of its own (tests, benches, tools).
    pub fn at_maximum(&self) -> LimitedEngine<'_> {
        self.limited(self.limits.call_limits())
    }

    /// Calls `validate-settings` within the engine's limits. A component without it accepts
    /// only empty settings.
    pub fn validate_settings(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        settings: &str,
    ) -> Result<(), EvalError> {
        self.at_maximum().validate_settings(policy, name, settings)
    }

    /// Pre-initialises `policy` for `settings` within the engine's limits; see
    /// [`LimitedEngine::prepare`].
    pub fn prepare(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        settings: &str,
    ) -> Result<bool, EvalError> {
        self.at_maximum().prepare(policy, name, settings)
    }

    /// Starts [`LimitedEngine::prepare`] of `policy` for `settings`, within `limits`, on a
    /// thread of its own, and returns at once; the hooks run from the plain component until the
    /// copy is ready. Nothing starts when a copy is ready, or when this module was tried with
    /// these settings before (whatever came of it) or with [`MAX_PREPARED`] documents: a
    /// validation that fails once is not run again on every call.
    pub fn prepare_in_background(
        self: &Arc<Self>,
        policy: &Arc<CompiledPolicy>,
        name: &str,
        settings: &str,
        limits: CallLimits,
    ) {
        if policy.is_prepared_for(settings) || !policy.claim_preparation(settings) {
            return;
        }
        let engine = Arc::clone(self);
        let policy = Arc::clone(policy);
        let (owned_name, settings) = (name.to_owned(), settings.to_owned());
        let spawned = std::thread::Builder::new()
            .name("wasm-preinit".into())
            .spawn(move || {
                let name = owned_name;
                // A preparation that panicked leaves nothing behind that the next one reads.
                let _one = engine
                    .preparing
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let started = std::time::Instant::now();
                match engine.limited(limits).prepare(&policy, &name, &settings) {
                    Ok(_) => tracing::debug!(
                        policy = %name,
                        digest = policy.short_digest(),
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "pre-initialised for its settings"
                    ),
                    Err(error) => tracing::info!(
                        policy = %name,
                        digest = policy.short_digest(),
                        %error,
                        "not pre-initialised; its calls run from the plain component"
                    ),
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(policy = %name, %error, "cannot start pre-initialisation");
        }
    }

    /// Pre-initialises `policy` for `settings` now, on this thread, within `limits`, unless a
    /// copy is ready or was tried for these settings: what loading a version does, so that it
    /// serves, and is measured, as it will run. Returns whether a copy serves.
    pub fn prepare_now(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        settings: &str,
        limits: CallLimits,
    ) -> Result<bool, EvalError> {
        if policy.claim_preparation(settings) {
            // One at a time, as in the background: a batch of policies loading together costs
            // one snapshot's memory (over 100 MiB for a Python policy), not one per load.
            let _one = self
                .preparing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.limited(limits).prepare(policy, name, settings)?;
        }
        Ok(policy.is_prepared_for(settings))
    }

    /// Runs `call` against a fresh instance of `policy` in a fresh store bounded by `limits`:
    /// the store is dropped afterwards, so a trap never poisons a later evaluation. A guest that
    /// reports an error after the memory cap refused it memory gets category `memory`, as one
    /// that trapped does.
    fn evaluate<R>(
        &self,
        limits: &CallLimits,
        reads: CallReads,
        pre: &InstancePre<Sandbox>,
        name: &str,
        call: impl FnOnce(
            &mut Store<Sandbox>,
            &Instance,
        ) -> wasmtime::Result<Result<R, bindings::PolicyError>>,
    ) -> Result<R, EvalError> {
        // A namespace's policy waits for its own share before its call starts (and before the
        // call watch counts it as running: the wait is bounded by the namespace's own calls).
        let share = limits.tenant.as_ref().map(|t| self.tenants.share(t));
        let _slot = share.as_ref().map(|s| s.enter());
        let budget = share
            .as_ref()
            .map_or_else(|| self.budget.clone(), |s| s.memory.clone());
        let _in_call = tfjob_planner::call_watch::enter_call();
        let mut store = Store::new(
            &self.engine,
            Sandbox::new(
                Arc::from(name),
                limits.memory,
                budget,
                self.limits.max_log,
                limits.deadline,
                reads,
            ),
        );
        store.limiter(|s| &mut s.limiter);
        let ticks = limits.deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64 + 1;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        let result = pre
            .instantiate(&mut store)
            .and_then(|instance| call(&mut store, &instance));
        store.data().flush_output();
        let stopped_by_sandbox =
            store.data().limiter.was_hit() || matches!(&result, Err(e) if is_timeout(e));
        if let Some(failure) = store.data().reads().failure()
            && !stopped_by_sandbox
        {
            // Whatever the guest made of it, the call rests on a read that was not answered.
            return Err(EvalError::new(failure.category(), failure.to_string()));
        }
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(reported)) if store.data().limiter.was_hit() => Err(EvalError::new(
                Category::Memory,
                format!(
                    "{}: {}",
                    memory_exceeded(limits, share.as_deref()),
                    guest_error(reported).message
                ),
            )),
            Ok(Err(reported)) => Err(guest_error(reported)),
            Err(e) => Err(categorise(limits, share.as_deref(), &e, &store)),
        }
    }

    fn check_input(&self, what: &str, text: &str) -> Result<(), EvalError> {
        if text.len() > self.limits.max_input {
            return Err(EvalError::new(
                Category::Memory,
                format!(
                    "{what} is {} bytes; the input limit is {}",
                    text.len(),
                    self.limits.max_input
                ),
            ));
        }
        Ok(())
    }

    fn check_output(&self, what: &str, len: usize) -> Result<(), EvalError> {
        if len > self.limits.max_output {
            return Err(EvalError::new(
                Category::InvalidOutput,
                format!(
                    "{what} is {len} bytes; the output limit is {}",
                    self.limits.max_output
                ),
            ));
        }
        Ok(())
    }
}

/// The engine with the limits of one policy's calls; see [`PolicyEngine::limited`].
#[derive(Clone)]
pub struct LimitedEngine<'a> {
    engine: &'a PolicyEngine,
    limits: CallLimits,
    /// What the hooks called through it may read of the cluster (`validate-settings` reads
    /// nothing: a settings document is valid or not whatever the cluster holds).
    reader: Option<Reader>,
    /// The pod the calls are about, named in their trace spans.
    pod: Option<Box<str>>,
}

impl LimitedEngine<'_> {
    /// The same handle, its hook calls reading the cluster as `reader` allows.
    pub fn reading(mut self, reader: Reader) -> Self {
        self.reader = Some(reader);
        self
    }

    /// The same handle, its hook calls about the pod named `name` (for their trace spans).
    pub fn about_pod(mut self, name: Option<&str>) -> Self {
        self.pod = name.map(Box::from);
        self
    }

    /// The reads a hook call through this handle may make.
    fn reads(&self) -> CallReads {
        CallReads::new(self.reader.clone().unwrap_or_else(Reader::nothing))
    }

    /// The limits every call through this handle gets.
    pub fn limits(&self) -> CallLimits {
        self.limits.clone()
    }

    /// Calls `validate-settings`. A component without it accepts only empty settings.
    pub fn validate_settings(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        settings: &str,
    ) -> Result<(), EvalError> {
        self.engine.check_input("settings", settings)?;
        let Some(indices) = &policy.settings else {
            return if is_empty_settings(settings) {
                Ok(())
            } else {
                Err(EvalError::new(
                    Category::Settings,
                    "the policy takes no settings (it does not export validate-settings)",
                ))
            };
        };
        self.engine.evaluate(
            &self.limits,
            CallReads::new(Reader::nothing()),
            &policy.pre,
            name,
            |store, instance| call_validate_settings(indices, store, instance, settings),
        )
    }

    /// Pre-initialises `policy` for `settings` (see `preinit.rs`): runs
    /// `validate-settings` once, within these limits, in an instrumented copy of the component,
    /// and keeps a copy whose instances start from the memories and globals it left. Every later
    /// hook call with the same settings runs in a fresh instance of that copy.
    ///
    /// Returns whether a copy was made: none when there is one already, when the module exports
    /// no `validate-settings` or when it holds [`MAX_PREPARED`] copies. Fails, and every call
    /// keeps running from the plain component, when the settings are refused, the validation
    /// traps or passes the deadline or the memory cap, or the copy is larger than the module
    /// limit.
    pub fn prepare(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        settings: &str,
    ) -> Result<bool, EvalError> {
        self.engine.check_input("settings", settings)?;
        let full = || policy.prepared.load().len() >= MAX_PREPARED;
        if policy.settings.is_none()
            || matches!(policy.source, ModuleSource::None)
            || policy.is_prepared_for(settings)
            || full()
        {
            return Ok(false);
        }
        // A trace's span of an activation's pre-initialisation (validation and snapshot).
        let span = tracing::span!(
            target: tfjob_planner::SPAN_TARGET,
            tracing::Level::DEBUG,
            "policy preinit",
            policy = name,
            policy.digest = policy.digest.as_str(),
        );
        let _in_span = span.enter();
        let engine = self.engine;
        let key = prepared_key(&policy.digest, settings);
        // A copy made before, by this operator or before its restart, is mapped as it is.
        let code = match engine.cached_code(&key) {
            Some(code) => code,
            None => match engine.prepare_apart(policy, name, settings, &self.limits)? {
                Some(code) => code,
                None => {
                    let image = self.snapshot(policy, name, settings)?;
                    engine.load_code(&key, &image, Instrument::No)?
                }
            },
        };
        let copy = engine.link(code, policy.digest.clone(), policy.size, ModuleSource::None)?;
        let mut added = false;
        policy.prepared.rcu(|list| {
            added = !list.iter().any(|p| &*p.settings == settings) && list.len() < MAX_PREPARED;
            let mut list = Vec::clone(list);
            if added {
                list.push(Prepared {
                    settings: settings.into(),
                    policy: Arc::clone(&copy),
                });
            }
            list
        });
        Ok(added)
    }

    /// The component that starts where `validate-settings` of `settings` leaves an instance of
    /// `policy`: the module is read again and instrumented (which gives the same component the
    /// plain one was compiled from, and wizer's map of it), the validation runs in an instance
    /// of the plain component, and its memories and globals become the copy's data.
    fn snapshot(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        settings: &str,
    ) -> Result<Vec<u8>, EvalError> {
        let engine = self.engine;
        let binary = match &policy.source {
            ModuleSource::None => {
                return Err(EvalError::new(
                    Category::Link,
                    "no module to pre-initialise",
                ));
            }
            ModuleSource::Held(bytes) => Arc::clone(bytes),
            ModuleSource::File(path) => engine
                .disk
                .as_ref()
                .and_then(|cache| cache.read_module(path))
                .map(Arc::from)
                .ok_or_else(|| {
                    EvalError::new(
                        Category::Link,
                        format!("the module kept in {} is gone or damaged", path.display()),
                    )
                })?,
        };
        let instrumented = preinit::instrument(&binary).map_err(link)?;
        let indices = policy
            .settings
            .as_ref()
            .ok_or_else(|| EvalError::new(Category::Link, "the policy has no validate-settings"))?;
        let image = engine.evaluate(
            &self.limits,
            CallReads::new(Reader::nothing()),
            &policy.pre,
            name,
            |store, instance| {
                if let Err(refused) = call_validate_settings(indices, store, instance, settings)? {
                    return Ok(Err(refused));
                }
                let memory = store.data().limiter.granted();
                if memory > MAX_PREPARED_MEMORY {
                    return Ok(Ok(Err(memory)));
                }
                // The policy's own code is done: the reads get their own deadline.
                store.set_epoch_deadline(
                    SNAPSHOT_DEADLINE.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64,
                );
                preinit::snapshot(&instrumented, store, *instance).map(|image| Ok(Ok(image)))
            },
        )?;
        let image = image.map_err(|memory| {
            EvalError::new(
                Category::Memory,
                format!(
                    "the validation left {memory} bytes of memory; a copy is made of at most \
                     {MAX_PREPARED_MEMORY}"
                ),
            )
        })?;
        if image.len() > engine.limits.max_module {
            return Err(EvalError::new(
                Category::Memory,
                format!(
                    "the pre-initialised component is {} bytes; the module limit is {}",
                    image.len(),
                    engine.limits.max_module
                ),
            ));
        }
        // The copy's code is the checked module's, re-encoded; checked again all the same, as
        // everything that reaches the compiler is.
        crate::structure::check(&image).map_err(|e| EvalError::new(Category::Link, e))?;
        Ok(image)
    }

    /// Runs `call` with `hook`'s export (found by `export`) in a fresh instance of the copy of
    /// `policy` prepared for `settings`, or of `policy` itself when there is none.
    fn call_hook<Current, V2, V1, R>(
        &self,
        policy: &CompiledPolicy,
        settings: &str,
        name: &str,
        (hook, export): (
            Hook,
            impl Fn(&CompiledPolicy) -> &Option<Export<Current, V2, V1>>,
        ),
        call: impl FnOnce(
            &Export<Current, V2, V1>,
            &mut Store<Sandbox>,
            &Instance,
        ) -> wasmtime::Result<Result<R, bindings::PolicyError>>,
    ) -> Result<R, EvalError> {
        let prepared = policy.prepared_for(settings);
        // A trace's span of the call; the guest's log lines, logged inside it, are its events.
        let span = tracing::span!(
            target: tfjob_planner::SPAN_TARGET,
            tracing::Level::DEBUG,
            "policy call",
            policy = name,
            policy.digest = policy.digest.as_str(),
            hook = hook.as_str(),
            k8s.pod.name = self.pod.as_deref(),
            preinitialized = prepared.is_some(),
            outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let _in_span = span.enter();
        let policy = prepared.as_deref().unwrap_or(policy);
        let result = self::hook(export(policy), hook).and_then(|indices| {
            self.engine.evaluate(
                &self.limits,
                self.reads(),
                &policy.pre,
                name,
                |store, instance| call(indices, store, instance),
            )
        });
        match &result {
            Ok(_) => span.record("outcome", "ok"),
            Err(error) => span
                .record("outcome", tracing::field::display(error.category))
                .record("otel.status_code", "ERROR"),
        };
        result
    }

    /// Calls `decorate-pod`; returns the decorated pod's JSON.
    pub fn decorate(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        ctx: &bindings::JobContext,
        settings: &str,
        pod: &str,
    ) -> Result<String, EvalError> {
        self.engine.check_input("pod", pod)?;
        let out = self.call_hook(
            policy,
            settings,
            name,
            (Hook::Decorate, |p| &p.decorate),
            |indices, store, instance| {
                call_export!(
                    indices,
                    |i| i.load(&mut *store, instance)?.call_decorate_pod(
                        &mut *store,
                        ctx,
                        settings,
                        pod
                    ),
                    |i| Ok(i
                        .load(&mut *store, instance)?
                        .call_decorate_pod(&mut *store, &ctx.into(), settings, pod)?
                        .map_err(Into::into)),
                )
            },
        )?;
        self.engine.check_output("decorated pod", out.len())?;
        Ok(out)
    }

    /// Calls `override-resources`; returns the new requirements' JSON.
    pub fn override_resources(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        ctx: &bindings::JobContext,
        settings: &str,
        container: &str,
        requirements: &str,
    ) -> Result<String, EvalError> {
        self.engine.check_input("resources", requirements)?;
        let out = self.call_hook(
            policy,
            settings,
            name,
            (Hook::Resources, |p| &p.resources),
            |indices, store, instance| {
                call_export!(
                    indices,
                    |i| i.load(&mut *store, instance)?.call_override_resources(
                        &mut *store,
                        ctx,
                        settings,
                        container,
                        requirements,
                    ),
                    |i| Ok(i
                        .load(&mut *store, instance)?
                        .call_override_resources(
                            &mut *store,
                            &ctx.into(),
                            settings,
                            container,
                            requirements,
                        )?
                        .map_err(Into::into)),
                )
            },
        )?;
        self.engine.check_output("resources", out.len())?;
        Ok(out)
    }

    /// Calls `classify-pod`.
    pub fn classify(
        &self,
        policy: &CompiledPolicy,
        name: &str,
        ctx: &bindings::JobContext,
        settings: &str,
        pod: &str,
        now: &str,
    ) -> Result<bindings::Verdict, EvalError> {
        self.engine.check_input("pod", pod)?;
        let verdict = self.call_hook(
            policy,
            settings,
            name,
            (Hook::Classify, |p| &p.classify),
            |indices, store, instance| {
                call_export!(
                    indices,
                    |i| i.load(&mut *store, instance)?.call_classify_pod(
                        &mut *store,
                        ctx,
                        settings,
                        pod,
                        now
                    ),
                    |i| Ok(i
                        .load(&mut *store, instance)?
                        .call_classify_pod(&mut *store, &ctx.into(), settings, pod, now)?
                        .map(|v| v0_1::verdict_at(v, now))
                        .map_err(Into::into)),
                )
            },
        )?;
        let times = [&verdict.occurred_at, &verdict.recheck_at]
            .into_iter()
            .flatten()
            .map(String::len)
            .sum::<usize>();
        self.engine.check_output(
            "verdict",
            verdict.reason.len() + verdict.message.len() + times,
        )?;
        Ok(verdict)
    }
}

impl Drop for PolicyEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

/// Whether a trap is the deadline's: the epoch interrupt, or a timer or read past it.
fn is_timeout(error: &wasmtime::Error) -> bool {
    error.downcast_ref::<WaitPastDeadline>().is_some()
        || error.downcast_ref::<ReadPastDeadline>().is_some()
        || matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt))
}

/// Names what stopped a call that trapped: the memory cap, the deadline, or the guest itself.
fn categorise(
    limits: &CallLimits,
    share: Option<&Share>,
    error: &wasmtime::Error,
    store: &Store<Sandbox>,
) -> EvalError {
    if store.data().limiter.was_hit() {
        return EvalError::new(
            Category::Memory,
            format!("{}: {error:#}", memory_exceeded(limits, share)),
        );
    }
    if let Some(wait) = error.downcast_ref::<WaitPastDeadline>() {
        return EvalError::new(
            Category::Timeout,
            format!("deadline of {:?} exceeded: {wait}", limits.deadline),
        );
    }
    if let Some(read) = error.downcast_ref::<ReadPastDeadline>() {
        return EvalError::new(
            Category::Timeout,
            format!("deadline of {:?} exceeded: {read}", limits.deadline),
        );
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => EvalError::new(
            Category::Timeout,
            format!("deadline of {:?} exceeded", limits.deadline),
        ),
        _ => EvalError::new(
            Category::Trap,
            text::elided(&format!("{error:#}"), MAX_GUEST_TEXT),
        ),
    }
}

/// What a call that was refused memory ran into: its own cap, or its namespace's share.
fn memory_exceeded(limits: &CallLimits, share: Option<&Share>) -> String {
    match share {
        Some(share) => format!(
            "memory limit of {} bytes exceeded, or the {} bytes that the running calls of \
             namespace {}'s policies share",
            limits.memory,
            share.memory.total(),
            share.tenant
        ),
        None => format!("memory limit of {} bytes exceeded", limits.memory),
    }
}

/// Calls `validate-settings` in `instance`; a refusal is `invalid-settings`.
fn call_validate_settings(
    indices: &Export<
        settings::GuestIndices,
        v0_2::settings::GuestIndices,
        v0_1::settings::GuestIndices,
    >,
    store: &mut Store<Sandbox>,
    instance: &Instance,
    settings: &str,
) -> wasmtime::Result<Result<(), bindings::PolicyError>> {
    let verdict = call_export!(
        indices,
        |i| i
            .load(&mut *store, instance)?
            .call_validate_settings(&mut *store, settings)?,
        |i| i
            .load(&mut *store, instance)?
            .call_validate_settings(&mut *store, settings)?,
    );
    Ok(verdict.map_err(bindings::PolicyError::InvalidSettings))
}

fn link(e: wasmtime::Error) -> EvalError {
    EvalError::new(Category::Link, format!("{e:#}"))
}

fn hook<T>(indices: &Option<T>, hook: Hook) -> Result<&T, EvalError> {
    indices.as_ref().ok_or_else(|| {
        EvalError::new(
            Category::Link,
            format!(
                "the policy does not export {} (nor its 0.2.0 or 0.1.0 version)",
                hook.interface()
            ),
        )
    })
}

/// The longest error text kept from a guest; longer texts are cut at a character boundary.
pub const MAX_GUEST_TEXT: usize = 4096;

/// Errors a guest reports itself: bad settings are `settings`, anything else means the policy
/// produced no usable output. The guest's text is cut to [`MAX_GUEST_TEXT`].
pub fn guest_error(e: bindings::PolicyError) -> EvalError {
    let cut = |m: String| text::elided(&m, MAX_GUEST_TEXT);
    let e = match e {
        bindings::PolicyError::InvalidSettings(m) => bindings::PolicyError::InvalidSettings(cut(m)),
        bindings::PolicyError::InvalidInput(m) => bindings::PolicyError::InvalidInput(cut(m)),
        bindings::PolicyError::Failed(m) => bindings::PolicyError::Failed(cut(m)),
    };
    match e {
        bindings::PolicyError::InvalidSettings(m) => EvalError::new(Category::Settings, m),
        bindings::PolicyError::InvalidInput(m) => EvalError::new(
            Category::InvalidOutput,
            format!("policy rejected its input: {m}"),
        ),
        bindings::PolicyError::Failed(m) => {
            EvalError::new(Category::InvalidOutput, format!("policy failed: {m}"))
        }
    }
}

/// Compiles `binary` with an engine of its own, dropped when done, into code for the running
/// engine.
///
/// Cranelift keeps the context of each thread that compiled (its register allocator's arenas)
/// in the engine that compiled, for as long as that engine lives. Compiled by the running
/// engine, the three default policies left about 40 MiB of the operator's 170 MiB heap at
/// 1,000 jobs held by those contexts for good (heaptrack, see the README's scale section), and
/// every policy swapped in later could add more. A compile-only engine frees them with itself.
/// Its settings are the running engine's but for the allocation strategy, which does not enter
/// the code; loading the code checks that the two engines' compilation settings agree.
///
/// With `functions` (a [`FunctionCache`] database), functions compiled before, by any
/// compilation, are taken from it and the ones compiled now are added: the language runtime
/// inside every Python or JavaScript policy is compiled once. The store changes how code is
/// made, not what: the code is the same, and so is the engine's compatibility with it.
fn precompile_apart(
    config: &Config,
    functions: Option<&std::path::Path>,
    binary: &[u8],
) -> wasmtime::Result<Vec<u8>> {
    let store = functions.and_then(|path| {
        FunctionCache::open(path, function_cache::DEFAULT_MAX_BYTES)
            .inspect_err(
                |e| tracing::warn!(error = %e, "compiling without the compiled-function cache"),
            )
            .ok()
            .map(Arc::new)
    });
    let Some(store) = store else {
        return Engine::new(config)?.precompile_component(binary);
    };
    let mut config = config.clone();
    config.enable_incremental_compilation(store.clone())?;
    let code = Engine::new(&config)?.precompile_component(binary)?;
    match store.flush() {
        Ok(stats) => tracing::debug!(
            reused = stats.hits,
            compiled = stats.misses,
            damaged = stats.rejected,
            "compiled functions reused"
        ),
        Err(error) => tracing::warn!(%error, "the compiled-function cache was not updated"),
    }
    Ok(code)
}

/// Where compilations run.
#[derive(Clone, Debug, Default)]
pub enum Compiler {
    /// On the calling thread, with an engine of its own (tests and tools).
    #[default]
    InProcess,
    /// In a child process: `program` with `args`, then `--memory BYTES`, `--pooling` or
    /// `--on-demand` and, with a cache directory, `--functions PATH` (its [`FunctionCache`]), reading the component on standard input and writing the compiled code on
    /// standard output (see [`compile_standalone`]; the operator's binary does this as
    /// `compile-policy`).
    ///
    /// Compiling a language runtime takes Cranelift hundreds of MiB for a few seconds. In the
    /// operator's process, the allocator kept most of it after the compilation ended (measured:
    /// 300 MiB of anonymous memory after one Python policy, see `docs/performance.md`); in a
    /// child, all of it goes back when the child exits, and a module crafted to exhaust the
    /// compiler's memory takes the child down, not the operator. A child still compiling after
    /// `time_limit` is killed and the compilation fails: a module crafted to compile for ever
    /// holds the compiler (one child at a time) no longer than that.
    Process {
        program: std::path::PathBuf,
        args: Vec<std::ffi::OsString>,
        time_limit: std::time::Duration,
    },
}

/// The compilation settings a compiled component must share with the engine that runs it:
/// what [`Compiler::Process`] passes to the child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileSettings {
    /// The per-call memory cap, which sizes the reservation the code assumes.
    pub memory: usize,
    /// Whether the running engine uses the pooling allocator.
    pub pooling: bool,
}

/// What a compiler child is asked to pre-initialise: the arguments `compile-policy` takes
/// after the compilation settings (the settings document goes on its standard input).
struct PrepareRequest<'a> {
    digest: &'a str,
    cache_dir: &'a std::path::Path,
    name: &'a str,
    limits: &'a CallLimits,
    max_module: usize,
}

impl PrepareRequest<'_> {
    /// Each value joined to its flag with `=`, so that one starting with `-` (a policy may be
    /// named anything) is never read as a flag.
    fn args(&self) -> Vec<std::ffi::OsString> {
        let mut cache_dir = std::ffi::OsString::from("--cache-dir=");
        cache_dir.push(self.cache_dir);
        // The name is only for the child's log lines; a NUL cannot be an argument.
        let name = format!("--name={}", self.name.replace('\0', "\u{fffd}"));
        let mut args: Vec<std::ffi::OsString> = vec![
            format!("--prepare={}", self.digest).into(),
            cache_dir,
            name.into(),
        ];
        args.extend([
            format!("--call-memory={}", self.limits.memory).into(),
            format!("--deadline-ms={}", self.limits.deadline.as_millis() as u64).into(),
            format!("--max-module={}", self.max_module).into(),
        ]);
        args
    }
}

/// What a compiler child reports of a pre-initialisation: one JSON document on its standard
/// output, so that a refusal (settings, memory, time) reaches the operator with its category.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum PrepareReply {
    /// A copy is filed in the cache (or was there already).
    Prepared,
    /// None was made, and why.
    Failed { category: Category, message: String },
}

impl PrepareReply {
    /// The reply for what [`PolicyEngine::prepare_stored`] returned.
    pub fn of(result: &Result<bool, EvalError>) -> PrepareReply {
        match result {
            Ok(_) => PrepareReply::Prepared,
            Err(e) => PrepareReply::Failed {
                category: e.category,
                message: e.message.clone(),
            },
        }
    }

    fn parse(bytes: &[u8]) -> Result<(), EvalError> {
        let reply: PrepareReply = serde_json::from_slice(bytes).map_err(|e| {
            EvalError::new(
                Category::Link,
                format!("the compiler process answered with something else than its reply: {e}"),
            )
        })?;
        match reply {
            PrepareReply::Prepared => Ok(()),
            PrepareReply::Failed { category, message } => Err(EvalError::new(category, message)),
        }
    }
}

/// Whether a compilation first instruments the component for pre-initialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instrument {
    /// Instrument it, and compile it as it is where wizer cannot.
    Yes,
    No,
}

impl Instrument {
    /// What is compiled of `binary`.
    fn apply(self, binary: &[u8]) -> std::borrow::Cow<'_, [u8]> {
        match self {
            Instrument::Yes => match preinit::instrument(binary) {
                Ok(instrumented) => instrumented.binary.into(),
                Err(_) => binary.into(),
            },
            Instrument::No => binary.into(),
        }
    }
}

/// Compiles `binary` as an engine started with `settings` would: the child side of
/// [`Compiler::Process`]. The running engine refuses code compiled with other settings.
///
/// `functions` is the [`FunctionCache`] database to reuse compiled functions from, if any.
pub fn compile_standalone(
    settings: CompileSettings,
    functions: Option<&std::path::Path>,
    binary: &[u8],
    instrument: Instrument,
) -> wasmtime::Result<Vec<u8>> {
    let limits = SandboxLimits {
        memory: settings.memory,
        ..SandboxLimits::default()
    };
    let mut config = engine_config(&limits, settings.pooling);
    config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
    precompile_apart(&config, functions, &instrument.apply(binary))
}

/// The threads a compiling child may use: all cores but one, at least one.
fn compile_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
}

/// The most of a failed child's standard error kept in the error.
const MAX_CHILD_ERROR: usize = 4096;

/// One compilation in a [`Compiler::Process`] child.
struct ChildCompiler<'a> {
    program: &'a std::path::Path,
    args: &'a [std::ffi::OsString],
    time_limit: std::time::Duration,
    settings: &'a CompileSettings,
    functions: Option<&'a std::path::Path>,
}

impl ChildCompiler<'_> {
    /// Runs the child on `binary` and returns the compiled code it wrote.
    fn compile(&self, binary: &[u8], instrument: Instrument) -> wasmtime::Result<Vec<u8>> {
        match instrument {
            Instrument::Yes => self.run(&["--instrument".into()], binary),
            Instrument::No => self.run(&[], binary),
        }
    }

    /// Runs the child with `extra` arguments after the compilation settings, `input` on its
    /// standard input, and returns what it wrote on its standard output.
    fn run(&self, extra: &[std::ffi::OsString], input: &[u8]) -> wasmtime::Result<Vec<u8>> {
        use std::io::{Read as _, Write as _};
        use std::process::{Command, Stdio};
        let mut command = Command::new(self.program);
        command.args(self.args);
        if let Some(path) = self.functions {
            let mut arg = std::ffi::OsString::from("--functions=");
            arg.push(path);
            command.arg(arg);
        }
        let mut child = command
            .arg("--memory")
            .arg(self.settings.memory.to_string())
            .arg(if self.settings.pooling {
                "--pooling"
            } else {
                "--on-demand"
            })
            .args(extra)
            // Cranelift compiles functions in parallel on rayon's pool: all cores but one.
            .env("RAYON_NUM_THREADS", compile_threads().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                wasmtime::format_err!("starting the compiler {}: {e}", self.program.display())
            })?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let errors = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = (&mut stderr)
                .take(MAX_CHILD_ERROR as u64)
                .read_to_end(&mut text);
            // Whatever is past the cut is drained, so the child never blocks on a full pipe.
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
            String::from_utf8_lossy(&text).into_owned()
        });
        // The watchdog owns the child: killing it at the time limit ends the write and the
        // read below (a broken pipe, the end of the output) whatever the child was doing.
        let watchdog = watch_child(child, self.time_limit);
        // The child reads all of its input before it writes anything, so writing first and
        // reading after cannot block both sides.
        let written = stdin.write_all(input);
        drop(stdin);
        let mut code = Vec::new();
        let read = stdout.read_to_end(&mut code);
        let (status, stopped) = watchdog
            .join()
            .map_err(|_| wasmtime::format_err!("the compiler's watchdog panicked"))??;
        let errors = errors.join().unwrap_or_default();
        if stopped {
            return Err(wasmtime::format_err!(
                "the compiler process did not finish within {:?} and was stopped (a module \
                 that takes this long to compile is refused)",
                self.time_limit
            ));
        }
        if !status.success() {
            let why = match status.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed (out of memory?)".to_owned(),
            };
            return Err(wasmtime::format_err!(
                "the compiler process {why}: {}",
                text::elided(errors.trim(), MAX_CHILD_ERROR)
            ));
        }
        written.map_err(|e| wasmtime::format_err!("writing to the compiler process: {e}"))?;
        read.map_err(|e| wasmtime::format_err!("reading from the compiler process: {e}"))?;
        Ok(code)
    }
}

/// How often the watchdog looks at a compiling child.
const CHILD_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Waits for `child` on a thread of its own, killing it once `time_limit` has passed; yields
/// its exit status and whether it was killed for the time.
fn watch_child(
    mut child: std::process::Child,
    time_limit: std::time::Duration,
) -> JoinHandle<std::io::Result<(std::process::ExitStatus, bool)>> {
    let deadline = std::time::Instant::now() + time_limit;
    std::thread::spawn(move || {
        let mut stopped = false;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok((status, stopped));
            }
            if !stopped && std::time::Instant::now() >= deadline {
                child.kill()?;
                stopped = true;
            }
            std::thread::sleep(CHILD_POLL);
        }
    })
}

/// Maps the compiled code in the cache file at `path`.
fn map_file(engine: &Engine, path: &std::path::Path) -> wasmtime::Result<(Component, CodeBacking)> {
    let bytes = std::fs::metadata(path)?.len() as usize;
    #[allow(unsafe_code)]
    // SAFETY: the file is wasmtime's own output: this engine's settings wrote it into a
    // directory only the operator's user may write (`private_dir` checked owner and mode when
    // the cache was opened, or `tempfile` made it 0700), its SHA-256 was checked against the
    // checksum written after it just before this call, and files there are only ever replaced
    // by a rename, never changed in place, so the mapping cannot change under the engine.
    // wasmtime checks the code's version and settings in turn.
    let component = unsafe { Component::deserialize_file(engine, path)? };
    Ok((component, CodeBacking::Mapped { bytes }))
}

/// Loads code `precompile_component` has just returned.
fn deserialize_fresh(engine: &Engine, code: &[u8]) -> wasmtime::Result<Component> {
    #[allow(unsafe_code)]
    // SAFETY: `code` is what `precompile_component` returned a moment ago, from an engine with
    // the running engine's compilation settings, in this process or in a child running the
    // operator's own binary ([`Compiler::Process`]) over a pipe only the two share; these
    // bytes were never read back from anywhere else (a cache file is a copy), so they are the
    // trusted wasmtime output `Component::deserialize` requires.
    unsafe {
        Component::deserialize(engine, code)
    }
}

/// The cache key of the copy of module `digest` pre-initialised for `settings`.
fn prepared_key(digest: &str, settings: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"prepared\0");
    h.update(digest.as_bytes());
    h.update([0]);
    h.update(settings.as_bytes());
    format!("prepared-{}", hex::encode(h.finalize()))
}

/// `""`, `null` and `{}` all mean "no settings".
pub fn is_empty_settings(settings: &str) -> bool {
    let t = settings.trim();
    t.is_empty() || t == "null" || t == "{}"
}

fn engine_config(limits: &SandboxLimits, pooling: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.concurrency_support(false);
    config.memory_init_cow(true);
    if pooling {
        // The pool reserves its address space once, when the engine starts. A 4 GiB
        // reservation per memory with a guard region lets Cranelift drop the explicit bounds
        // check on every load and store (out-of-bounds accesses hit the guard pages and trap).
        // The cap is unchanged: the limiter and `max_memory_size` refuse growth past it. The
        // reservation is address space only (PROT_NONE, no RAM): 4 memories per evaluation,
        // about 16 GiB per concurrent evaluation, 258 GiB at the default concurrency of 16.
        config.memory_reservation((limits.memory as u64).max(1 << 32));
        config.memory_guard_size(32 << 20);
        let n = limits.concurrency.max(1);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(n)
            .total_core_instances(n * 16)
            .total_memories(n * 4)
            .total_tables(n * 16)
            .max_memories_per_component(4)
            .max_memory_size(limits.memory)
            // A released table is reset with memset instead of madvise, so the next
            // evaluation takes no page faults on it.
            .table_keep_resident(64 << 10)
            // A slot left warm keeps the pages a call touched of its module's memory image
            // mapped: a Python policy's image is 11 MiB, so 100 warm slots (the default) could
            // hold a gigabyte of images of policies called once. As many as can run at once
            // keeps the ones in use warm.
            .max_unused_warm_slots(n);
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            // Linux 6.7+: a released memory's dirty pages are found with PAGEMAP_SCAN and
            // restored to their initial contents in place, instead of being dropped with
            // madvise and faulted in again by the next evaluation. The next instance still
            // starts from the module's pristine memory image. (Without the scan, keeping
            // memory resident means resetting all of it, which is slower than madvise.)
            pool.pagemap_scan(Enabled::Yes)
                .linear_memory_keep_resident(1 << 20);
        }
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    } else {
        // On-demand allocation maps every evaluation's memories afresh, and is the fallback
        // where address space is scarce (`ulimit -v`): reserve no more than the cap.
        config.memory_reservation(limits.memory as u64);
        config.memory_guard_size(2 << 20);
    }
    config
}
