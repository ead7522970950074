//! Assembling the operator's policies from its flags: the embedded defaults (with
//! `--policy-config` overrides), plus `--policy-dir` policies, in one registry snapshot, and
//! the circuit breakers every policy call goes through (`--policy-breaker-*`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use clap::Args;
use tfjob_planner::PodPolicies;
use tfjob_planner::native::NativePolicies;
use tfjob_policy_engine::breaker::{self, BreakerConfig, Breakers};
use tfjob_policy_engine::capabilities::{self, Capabilities};
use tfjob_policy_engine::cluster_reads::ReadCeiling;
use tfjob_policy_engine::compiled_cache::CompiledCache;
use tfjob_policy_engine::config::{TenantLimits, default_ceiling};
use tfjob_policy_engine::engine::Compiler;
use tfjob_policy_engine::loaded_budget::{LoadedBudget, LoadedLimits};
use tfjob_policy_engine::local::{PolicyConfig, load_policy_config, load_policy_dir};
use tfjob_policy_engine::signature::TrustedKeys;
use tfjob_policy_engine::{
    ActivePolicy, PolicyEngine, PolicySet, Registry, SandboxLimits, WasmPolicies, defaults,
};

/// Flags that choose the policies.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyArgs {
    /// Directory of `NAME.wasm` policies, each with a manifest `NAME.yaml`.
    #[arg(long, value_name = "DIR")]
    pub policy_dir: Option<PathBuf>,
    /// YAML file overriding the default policies' settings, failure policy or order.
    #[arg(long, value_name = "FILE")]
    pub policy_config: Option<PathBuf>,
    #[command(flatten)]
    pub ceiling: CeilingArgs,
    #[command(flatten)]
    pub breakers: BreakerArgs,
    /// Directory kept across restarts for policy modules pulled from registries and for
    /// compiled policies, so a restart loads them without the registry or the compiler. It
    /// must be the operator's own (created 0700; refused if others can write it).
    #[arg(long, value_name = "DIR")]
    pub policy_cache_dir: Option<PathBuf>,
    /// Largest policy module accepted, in MiB, from a registry or a ConfigMap (a ConfigMap
    /// holds at most 1 MiB anyway) [default: 64].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub policy_max_module_mib: Option<u64>,
    #[command(flatten)]
    pub loaded: LoadedMemoryArgs,
}

/// What loaded ConfigMap policies may hold (see `tfjob_policy_engine::loaded_budget`).
#[derive(Debug, Clone, Default, Args)]
pub struct LoadedMemoryArgs {
    /// Memory (MiB) all loaded policy ConfigMaps may hold together: compiled code as far as it
    /// is resident, pre-initialised copies, modules kept in memory. A version that would pass
    /// it is `Rejected` naming it; the serving version stays [default: 160, for the 512 MiB
    /// limit of deploy/].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub policy_loaded_memory_mib: Option<u64>,
    /// The most the loaded policies of one policy namespace may hold (MiB) [default: 64].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub policy_loaded_memory_per_namespace_mib: Option<u64>,
    /// Memory (MiB) for loaded policies that only cluster-wide policies may use [default: 48].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    pub policy_loaded_memory_cluster_reserve_mib: Option<u64>,
}

impl LoadedMemoryArgs {
    /// The limits these flags set; one that cannot hold with the others is an error naming it.
    pub fn limits(&self) -> anyhow::Result<LoadedLimits> {
        let defaults = LoadedLimits::default();
        let total = self
            .policy_loaded_memory_mib
            .map_or(defaults.total, |m| m << 20);
        let reserve = self
            .policy_loaded_memory_cluster_reserve_mib
            .map_or(defaults.cluster_reserve, |m| m << 20);
        let per_namespace = self
            .policy_loaded_memory_per_namespace_mib
            .map_or(defaults.per_namespace, |m| m << 20);
        if reserve >= total {
            return Err(anyhow!(
                "--policy-loaded-memory-cluster-reserve-mib: {} MiB leaves nothing of the {} MiB \
                 of --policy-loaded-memory-mib to namespaced policies",
                reserve >> 20,
                total >> 20
            ));
        }
        if per_namespace > total - reserve {
            return Err(anyhow!(
                "--policy-loaded-memory-per-namespace-mib: {} MiB is more than the {} MiB left to \
                 namespaced policies (--policy-loaded-memory-mib less \
                 --policy-loaded-memory-cluster-reserve-mib)",
                per_namespace >> 20,
                (total - reserve) >> 20
            ));
        }
        Ok(LoadedLimits {
            total,
            per_namespace,
            cluster_reserve: reserve,
        })
    }
}

/// The default of `--policy-max-module-mib`: well above a Python policy (about 18 MB).
pub const DEFAULT_MAX_MODULE_MIB: u64 = 64;

/// The limits the operator runs policies with by default, for the tools that run a policy as
/// the operator would (`policy test`, `--suite`, `inspect`, `pack`, `diff`).
pub fn operator_limits() -> SandboxLimits {
    SandboxLimits {
        max_module: (DEFAULT_MAX_MODULE_MIB << 20) as usize,
        ..SandboxLimits::default()
    }
}

/// The default of `--policy-breaker-open-seconds` (`u32`: the flags live in every subcommand's
/// arguments, which clap keeps by value).
const DEFAULT_OPEN_SECONDS: u32 = 10;

/// When a policy that keeps failing stops being called (see `tfjob_policy_engine::breaker`).
#[derive(Debug, Clone, Args)]
pub struct BreakerArgs {
    /// Consecutive failures of one kind (timeout, trap, memory, invalid output) after which a
    /// policy is no longer called for a while and its failure policy applies as if it had
    /// failed; 0 always calls.
    #[arg(long = "policy-breaker-failures", value_name = "N", default_value_t = breaker::DEFAULT_THRESHOLD)]
    pub failures: u32,
    /// How long a tripped policy is not called before one trial call goes through; each
    /// failed trial doubles it, up to 5 minutes.
    #[arg(long = "policy-breaker-open-seconds", value_name = "SECONDS", default_value_t = DEFAULT_OPEN_SECONDS, value_parser = clap::value_parser!(u32).range(1..))]
    pub open_seconds: u32,
}

impl Default for BreakerArgs {
    fn default() -> Self {
        BreakerArgs {
            failures: breaker::DEFAULT_THRESHOLD,
            open_seconds: DEFAULT_OPEN_SECONDS,
        }
    }
}

impl BreakerArgs {
    /// The breakers' settings from `--policy-breaker-failures` and
    /// `--policy-breaker-open-seconds`.
    pub fn config(&self) -> BreakerConfig {
        BreakerConfig {
            threshold: self.failures,
            first_open: std::time::Duration::from_secs(u64::from(self.open_seconds)),
            ..BreakerConfig::default()
        }
    }
}

/// The most any policy may be granted (see `tfjob_policy_engine::capabilities`).
#[derive(Debug, Clone, Args)]
pub struct CeilingArgs {
    /// A capability policies may be granted when their manifest declares it (repeatable):
    /// secrets, service-account-tokens, external-volumes [default: none].
    #[arg(long = "policy-allow", value_name = "CAPABILITY", value_parser = capabilities::NAMES)]
    pub policy_allow: Vec<String>,
    /// A host path prefix under which policies may mount host directories read-only when their
    /// manifest declares it (repeatable), besides /home/kubernetes/bin/nvidia (the NVIDIA
    /// driver directory the default decoration mounts).
    #[arg(long = "policy-allow-host-path", value_name = "PREFIX")]
    pub policy_allow_host_paths: Vec<String>,
    /// A resource cluster-wide policies may read when their manifest declares it
    /// (repeatable; `none` for nothing): namespaces, nodes, priorityclasses, resourcequotas,
    /// limitranges, configmaps, localqueues, clusterqueues, resourceflavors, tfjobs.
    #[arg(
        long = "policy-allow-read",
        value_name = "RESOURCE",
        default_values_t = ["namespaces".to_owned(), "nodes".to_owned()]
    )]
    pub policy_allow_read: Vec<String>,
    /// A resource policies confined to a team's namespace may read, within that namespace,
    /// when their manifest declares it (repeatable) [default: none].
    #[arg(long = "policy-allow-read-in-namespaces", value_name = "RESOURCE")]
    pub policy_allow_read_in_namespaces: Vec<String>,
    /// Objects the cache of one read resource holds at most; past it the cache drops them and
    /// policies' reads of that resource answer `unavailable`.
    #[arg(
        long = "policy-read-cache-objects",
        value_name = "N",
        default_value_t = tfjob_policy_engine::cluster_cache::DEFAULT_OBJECT_CAP as u32,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub policy_read_cache_objects: u32,
}

impl Default for CeilingArgs {
    /// What the flags' defaults give.
    fn default() -> CeilingArgs {
        CeilingArgs {
            policy_allow: Vec::new(),
            policy_allow_host_paths: Vec::new(),
            policy_allow_read: vec!["namespaces".to_owned(), "nodes".to_owned()],
            policy_allow_read_in_namespaces: Vec::new(),
            policy_read_cache_objects: tfjob_policy_engine::cluster_cache::DEFAULT_OBJECT_CAP
                as u32,
        }
    }
}

impl CeilingArgs {
    /// The ceiling from `--policy-allow` and `--policy-allow-host-path`.
    pub fn ceiling(&self) -> anyhow::Result<Capabilities> {
        // Added to the default, which the built-in decoration needs to mount the driver.
        let mut ceiling = default_ceiling();
        ceiling
            .host_paths
            .extend(self.policy_allow_host_paths.iter().cloned());
        for name in &self.policy_allow {
            ceiling
                .allow(name)
                .map_err(|e| anyhow!("--policy-allow: {e}"))?;
        }
        ceiling
            .validate()
            .map_err(|(_, e)| anyhow!("--policy-allow-host-path: {e}"))?;
        Ok(ceiling)
    }

    /// The read ceiling from `--policy-allow-read` and `--policy-allow-read-in-namespaces`.
    pub fn reads(&self) -> anyhow::Result<ReadCeiling> {
        ReadCeiling::from_names(
            &self.policy_allow_read,
            &self.policy_allow_read_in_namespaces,
        )
        .map_err(|e| anyhow!(e))
    }
}

/// Where ConfigMap policies come from.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicySourceArgs {
    /// Namespace whose ConfigMaps labelled `policy.tfjob.dev/policy=true` are policies;
    /// repeatable [default: the operator's namespace ($POD_NAMESPACE), else tfjob-system].
    #[arg(long = "policy-namespace", value_name = "NS")]
    pub policy_namespaces: Vec<String>,
    /// Take no policies from ConfigMaps.
    #[arg(long, conflicts_with = "policy_namespaces")]
    pub no_configmap_policies: bool,
    /// Compile the CEL evaluator when the first CEL policy loads, not in the background at
    /// start (which lets the first CEL ConfigMap serve in seconds, for about 10 s of one
    /// core's time at start).
    #[arg(long)]
    pub no_cel_warmup: bool,
    /// A policy namespace whose ConfigMaps may select jobs in every namespace and replace the
    /// built-in policies (repeatable); the operator's own namespace always may. Policies from
    /// the other policy namespaces apply to jobs of their own namespace only.
    #[arg(long = "policy-cluster-namespace", value_name = "NS")]
    pub cluster_namespaces: Vec<String>,
    /// Policy ConfigMaps loaded per policy namespace at most; the newest beyond it are
    /// `Rejected` with the reason.
    #[arg(long = "policy-max-per-namespace", value_name = "N", default_value_t = tfjob_policy_sync::watch::MAX_PER_NAMESPACE)]
    pub max_per_namespace: usize,
    /// Public key (PEM, ECDSA P-256 or Ed25519) to verify policy modules with; repeatable.
    /// With any, a policy ConfigMap loads only if its `policy.wasm.sig` verifies against one.
    #[arg(
        long = "policy-trusted-key",
        value_name = "FILE",
        conflicts_with = "no_configmap_policies"
    )]
    pub policy_trusted_keys: Vec<PathBuf>,
    /// Calls of one policy namespace's policies running at once; more wait for the namespace's
    /// own calls to end (cluster-wide policies are not held to it) [default: half the cores,
    /// at least 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub policy_namespace_concurrency: Option<u32>,
    /// Linear memory (MiB) the running calls of one policy namespace's policies may hold
    /// together [default: 64, one call's cap].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..))]
    pub policy_namespace_memory_mib: Option<u64>,
    /// A registry (HOST, or HOST:PORT) that policy modules are pulled from over plain HTTP
    /// instead of HTTPS, e.g. a local one; repeatable.
    #[arg(long = "policy-registry-insecure", value_name = "HOST")]
    pub registry_insecure: Vec<String>,
    /// How often a module referenced by tag is looked up again; a moved tag swaps the policy
    /// to the digest it names now.
    #[arg(long = "policy-registry-refresh", value_name = "DURATION", default_value = "1m", value_parser = tfjob_policy_logic::duration::parse_go)]
    pub registry_refresh: std::time::Duration,
    /// Linear memory (MiB) of the policies' budget that only cluster-wide policies may use, so
    /// namespaced policies never leave the policies every job runs without memory [default:
    /// 64, a quarter of the budget].
    #[arg(long, value_name = "MIB")]
    pub policy_cluster_reserve_mib: Option<u64>,
}

impl PolicySourceArgs {
    /// The share of the policy engine each policy namespace gets, within `budget` (the bytes
    /// all policy calls may hold together); a value that does not fit is an error naming its
    /// flag.
    pub fn tenant_limits(&self, budget: usize) -> anyhow::Result<TenantLimits> {
        let mib = |flag: &str, value: u64| {
            usize::try_from(value)
                .ok()
                .and_then(|v| v.checked_mul(1 << 20))
                .filter(|&bytes| bytes <= budget)
                .ok_or_else(|| {
                    anyhow!(
                        "--{flag}: {value} MiB is more than the {} MiB all policy calls may hold",
                        budget >> 20
                    )
                })
        };
        let defaults = TenantLimits::default();
        let reserve_mib = self
            .policy_cluster_reserve_mib
            .unwrap_or(defaults.cluster_reserve as u64 >> 20);
        let memory_mib = self
            .policy_namespace_memory_mib
            .unwrap_or(defaults.memory as u64 >> 20);
        let cluster_reserve = mib("policy-cluster-reserve-mib", reserve_mib)?;
        let memory = mib("policy-namespace-memory-mib", memory_mib)?;
        if memory > budget - cluster_reserve {
            return Err(anyhow!(
                "--policy-namespace-memory-mib: {memory_mib} MiB is more than the {} MiB left to \
                 namespaced policies beside the {reserve_mib} MiB reserved for cluster-wide ones \
                 (--policy-cluster-reserve-mib)",
                (budget - cluster_reserve) >> 20,
            ));
        }
        Ok(TenantLimits {
            concurrency: self
                .policy_namespace_concurrency
                .unwrap_or(defaults.concurrency),
            memory,
            cluster_reserve,
        })
    }

    /// The policy namespaces to watch (empty when ConfigMap policies are off).
    pub fn namespaces(&self) -> Vec<String> {
        if self.no_configmap_policies {
            Vec::new()
        } else if self.policy_namespaces.is_empty() {
            vec![default_policy_namespace()]
        } else {
            self.policy_namespaces.clone()
        }
    }

    /// The policy namespaces marked cluster-wide (the operator's own is added when the
    /// operator starts).
    pub fn cluster_namespaces(&self) -> std::collections::BTreeSet<String> {
        self.cluster_namespaces.iter().cloned().collect()
    }

    /// The registry client and pulled-module cache of `policies`' engine.
    pub fn registry(&self, policies: &Policies) -> anyhow::Result<PolicyRegistry> {
        PolicyRegistry::new(
            policies,
            self.registry_insecure.iter().cloned(),
            self.registry_refresh,
        )
    }

    /// Reads the `--policy-trusted-key` files; an unreadable or unsupported key is an error
    /// naming its file, so the operator does not start trusting fewer keys than it was given.
    pub fn trusted_keys(&self) -> anyhow::Result<TrustedKeys> {
        read_trusted_keys("--policy-trusted-key", &self.policy_trusted_keys)
    }
}

/// Reads the public keys (PEM) in `paths`; an unreadable or unsupported one is an error naming
/// `flag` and its file.
pub fn read_trusted_keys(flag: &str, paths: &[std::path::PathBuf]) -> anyhow::Result<TrustedKeys> {
    let mut keys = TrustedKeys::none();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{flag}: reading {}", path.display()))?;
        keys.add_pem(&path.display().to_string(), &text)
            .map_err(|e| anyhow!("{flag} {e}"))?;
    }
    Ok(keys)
}

/// Reads the private key (PEM) at `path`; errors name `flag` and the file.
pub fn read_signing_key(
    flag: &str,
    path: &std::path::Path,
) -> anyhow::Result<tfjob_policy_engine::signature::SigningKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{flag}: reading {}", path.display()))?;
    tfjob_policy_engine::signature::SigningKey::from_pem(&path.display().to_string(), &text)
        .map_err(|e| anyhow!("{flag} {e}"))
}

/// The engine and the registry behind the operator's policies.
pub struct Policies {
    pub engine: Arc<PolicyEngine>,
    pub registry: Arc<Registry>,
    /// The built-in policies (defaults with `--policy-config`, plus `--policy-dir`), which
    /// ConfigMap policies of the same name replace while they serve.
    pub builtin: Vec<Arc<ActivePolicy>>,
    /// When a policy that keeps failing stops being called.
    pub breakers: BreakerConfig,
    /// `--policy-cache-dir`: compiled code is kept there (through the engine) and pulled
    /// modules too (through [`PolicyRegistry`]).
    pub cache_dir: Option<PathBuf>,
    /// What loaded ConfigMap policies may hold (`--policy-loaded-memory-*`).
    pub loaded_budget: Arc<LoadedBudget>,
    /// Objects one resource's read cache holds at most (`--policy-read-cache-objects`).
    pub read_cache_objects: usize,
}

impl Policies {
    /// Loads the defaults and the configured policies. Any failure is reported with the file
    /// and field; nothing is half-loaded.
    pub fn load(args: &PolicyArgs, limits: SandboxLimits) -> anyhow::Result<Policies> {
        Policies::load_compiling(args, limits, Compiler::InProcess)
    }

    /// [`Policies::load`], compiling where `compiler` says: the operator's binary compiles in a
    /// child of its own (`compile-policy`), so the compiler's memory never stays with it.
    pub fn load_compiling(
        args: &PolicyArgs,
        limits: SandboxLimits,
        compiler: Compiler,
    ) -> anyhow::Result<Policies> {
        let limits = SandboxLimits {
            ceiling: args.ceiling.ceiling()?,
            reads: args.ceiling.reads()?,
            max_module: (args.policy_max_module_mib.unwrap_or(DEFAULT_MAX_MODULE_MIB) << 20)
                as usize,
            ..limits
        };
        let loaded_budget = LoadedBudget::new(args.loaded.limits()?);
        let mut engine = PolicyEngine::new(limits)?.with_compiler(compiler);
        if let Some(dir) = &args.policy_cache_dir {
            engine = engine.with_compiled_cache(CompiledCache::open(dir)?);
        }
        let engine = Arc::new(engine);
        let config = match &args.policy_config {
            Some(path) => load_policy_config(path)?,
            None => PolicyConfig::default(),
        };
        let mut active = defaults::load_defaults(&engine, &config).with_context(|| match &args
            .policy_config
        {
            Some(p) => format!("loading the default policies with {}", p.display()),
            None => "loading the default policies".to_owned(),
        })?;
        if let Some(dir) = &args.policy_dir {
            active.extend(load_policy_dir(&engine, dir)?);
        }
        let set = PolicySet::new(active);
        let builtin = set.all().to_vec();
        let registry = Arc::new(Registry::new(set));
        Ok(Policies {
            engine,
            registry,
            builtin,
            breakers: args.breakers.config(),
            cache_dir: args.policy_cache_dir.clone(),
            loaded_budget,
            read_cache_objects: args.ceiling.policy_read_cache_objects as usize,
        })
    }

    /// The child process the operator's binary compiles policies in: itself, as `compile-policy`,
    /// stopped when it runs past the time a whole policy load may take.
    pub fn compiler_child() -> anyhow::Result<Compiler> {
        let program = std::env::current_exe().context("finding the operator's own binary")?;
        Ok(Compiler::Process {
            program,
            args: vec!["compile-policy".into()],
            time_limit: tfjob_policy_sync::watch::LOAD_BOUND,
        })
    }

    /// The planner's seam over these policies.
    pub fn seam(&self) -> Arc<dyn PodPolicies> {
        Arc::new(
            WasmPolicies::new(Arc::clone(&self.engine), Arc::clone(&self.registry))
                .with_breakers(Breakers::new(self.breakers)),
        )
    }
}

/// Where policy modules named by reference come from: the registry client (bounded to the
/// engine's module limit) and the pulled-module cache in `--policy-cache-dir`.
#[derive(Clone)]
pub struct PolicyRegistry {
    pub client: Arc<tfjob_policy_oci::RegistryClient>,
    pub cache: Option<tfjob_policy_oci::ArtifactCache>,
    /// How often a tag is resolved again.
    pub refresh: std::time::Duration,
}

impl PolicyRegistry {
    pub fn new(
        policies: &Policies,
        insecure: impl IntoIterator<Item = String>,
        refresh: std::time::Duration,
    ) -> anyhow::Result<PolicyRegistry> {
        let limits = tfjob_policy_oci::Limits {
            max_module_bytes: policies.engine.limits().max_module as u64,
            ..tfjob_policy_oci::Limits::default()
        };
        let cache = match &policies.cache_dir {
            Some(dir) => Some(tfjob_policy_oci::ArtifactCache::open(dir)?),
            None => None,
        };
        Ok(PolicyRegistry {
            client: Arc::new(tfjob_policy_oci::RegistryClient::new(limits, insecure)?),
            cache,
            refresh,
        })
    }
}

impl std::fmt::Debug for PolicyRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyRegistry")
            .field("cache", &self.cache)
            .field("refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

/// The seam without any policy: pods as built, native classification.
pub fn no_policies() -> Arc<dyn PodPolicies> {
    Arc::new(NativePolicies::default())
}

/// The policy namespace when none is given: the operator's own (`POD_NAMESPACE`, set by the
/// deployment), else `tfjob-system`.
pub fn default_policy_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "tfjob-system".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: usize = 256 << 20;

    #[test]
    fn the_ceiling_by_default_is_what_the_flags_default_to() {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            ceiling: CeilingArgs,
        }
        let parsed = <Flags as clap::Parser>::parse_from(["tfjob-operator"]).ceiling;
        assert_eq!(
            format!("{parsed:?}"),
            format!("{:?}", CeilingArgs::default())
        );
    }

    #[test]
    fn namespace_shares_default_to_one_calls_cap_and_a_quarter_reserved() {
        let limits = PolicySourceArgs::default().tenant_limits(BUDGET).unwrap();
        assert_eq!(limits, TenantLimits::default());
        assert_eq!(
            (limits.memory, limits.cluster_reserve),
            (64 << 20, 64 << 20)
        );
        let args = PolicySourceArgs {
            policy_namespace_concurrency: Some(3),
            policy_namespace_memory_mib: Some(32),
            policy_cluster_reserve_mib: Some(128),
            ..PolicySourceArgs::default()
        };
        let limits = args.tenant_limits(BUDGET).unwrap();
        assert_eq!(
            (limits.concurrency, limits.memory, limits.cluster_reserve),
            (3, 32 << 20, 128 << 20)
        );
    }

    #[test]
    fn shares_that_do_not_fit_the_budget_name_their_flag() {
        for (memory, reserve, flag) in [
            (Some(300), None, "--policy-namespace-memory-mib: 300 MiB"),
            (None, Some(u64::MAX), "--policy-cluster-reserve-mib"),
            (Some(200), Some(100), "156 MiB left to namespaced policies"),
        ] {
            let args = PolicySourceArgs {
                policy_namespace_memory_mib: memory,
                policy_cluster_reserve_mib: reserve,
                ..PolicySourceArgs::default()
            };
            let err = args.tenant_limits(BUDGET).unwrap_err().to_string();
            assert!(err.contains(flag), "{err}");
        }
    }
}
