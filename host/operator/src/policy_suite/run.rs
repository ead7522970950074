//! Running a suite's cases in the sandbox, as the operator runs each hook.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use tfjob_policy_engine::cluster_access::{ReadJournal, ReadRecord};
use tfjob_policy_engine::hook_call::{Caller, job_context};
use tfjob_policy_engine::{EvalError, Hook, PolicyEngine, SandboxLimits};

use crate::policy_hooks::{
    HookInput, PolicySource, cel_source, container, is_cel_file, policy_source, run_hook,
};

use super::{compare::*, load::*, model::*};

/// One case's run.
#[derive(Debug)]
pub struct CaseReport {
    pub name: String,
    pub hook: Hook,
    /// `name@short-digest` of the module that ran.
    pub policy: String,
    pub outcome: Outcome,
    pub mismatches: Vec<Mismatch>,
    pub elapsed: Duration,
    /// The cluster objects the case's call read, in order.
    pub reads: Vec<ReadRecord>,
}

impl CaseReport {
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// A suite's run.
#[derive(Debug)]
pub struct Report {
    pub suite: String,
    pub cases: Vec<CaseReport>,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.passed()).count()
    }

    pub fn passed(&self) -> usize {
        self.cases.len() - self.failed()
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.cases.iter().map(|c| c.elapsed).sum()
    }
}

/// A policy ready for a suite's cases of one hook.
pub(crate) struct UnderTest {
    source: PolicySource,
    label: String,
}

/// What `policy test` gives a suite besides its file: the policy and manifest that replace the
/// suite's own, the operator's ceiling to test under, and where compiled code is kept.
pub struct Overrides<'a> {
    pub policy: Option<&'a str>,
    pub manifest: Option<&'a Path>,
    pub ceiling: &'a tfjob_operator::policy_setup::CeilingArgs,
    /// Where compiled code is kept between runs (`--policy-cache-dir`).
    pub cache_dir: Option<&'a Path>,
}

/// Runs every case of `suite` in the sandbox with the operator's limits. Errors are what keeps
/// the suite from running at all (no policy, a module that does not compile).
pub fn run(suite: &Suite, args: &Overrides<'_>) -> anyhow::Result<Report> {
    let limits = SandboxLimits {
        ceiling: args.ceiling.ceiling()?,
        reads: args.ceiling.reads()?,
        ..tfjob_operator::policy_setup::operator_limits()
    };
    let engine = crate::policy_hooks::test_engine(limits, args.cache_dir)?;
    let manifest = match args.manifest {
        Some(path) => Some((
            std::fs::read_to_string(path)
                .with_context(|| format!("--manifest: reading {}", path.display()))?,
            format!("--manifest {}", path.display()),
        )),
        None => suite
            .manifest
            .clone()
            .map(|text| (text, format!("{}: manifest", suite.file.display()))),
    };
    let mut policies: HashMap<Hook, UnderTest> = HashMap::new();
    let mut cases = Vec::with_capacity(suite.cases.len());
    for case in &suite.cases {
        if let std::collections::hash_map::Entry::Vacant(e) = policies.entry(case.hook) {
            e.insert(under_test(
                &engine,
                suite,
                args,
                case.hook,
                manifest.as_ref(),
            )?);
        }
        let p = &policies[&case.hook];
        let started = Instant::now();
        let journal = ReadJournal::default();
        let outcome = run_case(&engine, &p.source, case, &journal);
        let elapsed = started.elapsed();
        let reads = std::mem::take(&mut *journal.lock().unwrap_or_else(|e| e.into_inner()));
        cases.push(CaseReport {
            name: case.name.clone(),
            hook: case.hook,
            policy: p.label.clone(),
            mismatches: check(&case.expect, &outcome),
            outcome,
            elapsed,
            reads,
        });
    }
    Ok(Report {
        suite: suite.file.display().to_string(),
        cases,
    })
}

pub(crate) fn under_test(
    engine: &PolicyEngine,
    suite: &Suite,
    args: &Overrides<'_>,
    hook: Hook,
    manifest: Option<&(String, String)>,
) -> anyhow::Result<UnderTest> {
    let mut source = match (args.policy, &suite.policy) {
        (Some(spec), _) => policy_source(spec, hook, "--policy")?,
        (None, Some(PolicyRef::Default(spec))) => {
            policy_source(spec, hook, &format!("{}: policy", suite.file.display()))?
        }
        (None, Some(PolicyRef::File(path))) if is_cel_file(path) => {
            cel_source(path, &format!("{}: policy", suite.file.display()))?
        }
        (None, Some(PolicyRef::File(path))) => {
            let bytes = read_capped(path, engine.limits().max_module as u64)
                .map_err(|e| anyhow!("{}: policy: {e}", suite.file.display()))?;
            PolicySource {
                bytes,
                name: path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("policy")
                    .to_owned(),
                manifest: None,
                default_manifest: false,
                cel_document: None,
            }
        }
        (None, None) => bail!(
            "{}: no policy to test: give --policy or a `policy` in the suite",
            suite.file.display()
        ),
    };
    if let Some((text, what)) = manifest {
        source = source.with_manifest(text, what)?;
    }
    let file = suite.file.display();
    if let Some(m) = &source.manifest
        && !m.hooks.contains(&hook)
    {
        let hooks: Vec<&str> = m.hooks.iter().map(|h| h.as_str()).collect();
        bail!(
            "{file}: the manifest of {} runs it for {} only; the suite has {hook} cases",
            source.name,
            hooks.join(", ")
        );
    }
    let compiled = engine.compile(&source.bytes).map_err(|e| {
        anyhow!(
            "{file}: policy {}: the module does not load: {e}",
            source.name
        )
    })?;
    let label = format!("{}@{}", source.name, compiled.short_digest());
    Ok(UnderTest { source, label })
}

/// Activates the policy with the case's settings and runs its hook on the case's input.
pub(crate) fn run_case(
    engine: &PolicyEngine,
    source: &PolicySource,
    case: &Case,
    journal: &ReadJournal,
) -> Outcome {
    let active = source
        .activate(engine, case.hook, case.settings.as_ref())
        .map_err(|e| Failure::from(EvalError::from(e)))?;
    let ctx = job_context(&case.context);
    let input = match case.hook {
        Hook::Decorate => HookInput::Decorate(&case.pod),
        Hook::Resources => HookInput::Resources(
            // Checked when the suite was loaded.
            container(&case.pod, case.container.as_deref()).map_err(|message| Failure {
                category: FailureCategory::InvalidOutput,
                message,
            })?,
        ),
        Hook::Classify => HookInput::Classify {
            pod: &case.pod,
            now: case.now.unwrap_or_else(jiff::Timestamp::now),
        },
    };
    let caller = Caller {
        engine,
        cluster: &case.cluster,
        journal: Some(journal),
    };
    run_hook(caller, &active, &ctx, input)
        .map(|out| out.into_json())
        .map_err(Failure::from)
}
