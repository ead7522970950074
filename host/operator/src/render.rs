//! `tfjob-operator render`: what the first reconcile of a fresh job would create.
//!
//! Runs the real planner (defaults, validation, pod and service building, policies) on a job
//! read from a file, with no cluster and a fixed empty observed state.

use std::io::Read;
use std::process::ExitCode;

use k8s_openapi::api::core::v1::{Pod, Service};
use serde::Serialize;
use tfjob_api::TFJob;
use tfjob_api::parse::parse_tfjob_documents;
use tfjob_api::validation::validate;
use tfjob_planner::{PlanInput, PodPolicies, Settings, plan};
use tfjob_policy_engine::SandboxLimits;

use std::path::PathBuf;
use tfjob_operator::policy_setup::{Policies, no_policies};

use clap::{Args, ValueEnum};

/// Output formats of `render`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// TFJob manifest (YAML or JSON, several documents allowed); `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Cluster domain for TF_CONFIG host names [default: $CUSTOM_CLUSTER_DOMAIN].
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN", value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub output: OutputFormat,
    #[command(flatten)]
    pub policies: tfjob_operator::policy_setup::PolicyArgs,
    /// Print the pods as the operator builds them, before any policy.
    #[arg(long, conflicts_with_all = ["policy_dir", "policy_config"])]
    pub no_policies: bool,
}

/// Exit status for input that is not a valid TFJob.
const INVALID_INPUT: u8 = 2;

/// Runs the subcommand; problems go to stderr, objects to stdout.
pub fn main(args: &RenderArgs) -> ExitCode {
    let text = match read_input(args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            return ExitCode::from(INVALID_INPUT);
        }
    };
    let policies = if args.no_policies {
        no_policies()
    } else {
        match Policies::load(&args.policies, SandboxLimits::default()) {
            Ok(p) => p.seam(),
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::from(INVALID_INPUT);
            }
        }
    };
    match render(&text, args, policies.as_ref()) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for p in problems {
                eprintln!("error: {}: {p}", args.file.display());
            }
            ExitCode::from(INVALID_INPUT)
        }
    }
}

fn read_input(args: &RenderArgs) -> std::io::Result<String> {
    if args.file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(&args.file)
    }
}

/// One object of the output list.
#[derive(Serialize)]
#[serde(untagged)]
enum Object {
    Pod(Box<Pod>),
    Service(Box<Service>),
}

/// Renders every job of `text`; all problems of all documents, or the objects.
fn render(
    text: &str,
    args: &RenderArgs,
    policies: &dyn PodPolicies,
) -> Result<String, Vec<String>> {
    let mut problems = Vec::new();
    let mut objects = Vec::new();
    let documents = parse_tfjob_documents(text);
    if documents.is_empty() {
        return Err(vec!["no TFJob found in the input".into()]);
    }
    for (i, doc) in documents.into_iter().enumerate() {
        match doc {
            Err(e) => problems.push(e.to_string()),
            Ok(job) => match render_job(job, args, policies) {
                Ok(mut objs) => objects.append(&mut objs),
                Err(mut errs) => {
                    problems.extend(errs.drain(..).map(|e| format!("document {}: {e}", i + 1)))
                }
            },
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(match args.output {
        OutputFormat::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            let mut s = serde_json::to_string_pretty(&list).expect("objects serialise");
            s.push('\n');
            s
        }
        OutputFormat::Yaml => objects
            .iter()
            .map(|o| serde_yaml_ng::to_string(o).expect("objects serialise"))
            .collect::<Vec<_>>()
            .join("---\n"),
    })
}

fn render_job(
    mut job: TFJob,
    args: &RenderArgs,
    policies: &dyn PodPolicies,
) -> Result<Vec<Object>, Vec<String>> {
    if let Err(errors) = validate(&job) {
        return Err(errors.0.iter().map(ToString::to_string).collect());
    }
    job.metadata
        .namespace
        .get_or_insert_with(|| "default".into());
    job.status = None;
    let settings = Settings {
        cluster_domain: args.cluster_domain.clone(),
        ..Settings::default()
    };
    let input = PlanInput {
        job: &job,
        pods: &[],
        services: &[],
        now: jiff::Timestamp::now(),
        settings: &settings,
        policies,
        pod_group: None,
        priority_classes: &Default::default(),
        kueue: None,
    };
    let plan = plan(&input).map_err(|e| vec![e.to_string()])?;
    let mut objects = Vec::new();
    // A job read from a file has no uid, so the rendered objects carry no owner reference
    // (the controller adds it); everything else is what the first reconcile creates.
    for mut svc in plan.create_services {
        svc.metadata.owner_references = None;
        objects.push(Object::Service(Box::new(svc)));
    }
    for mut pod in plan.create_pods {
        pod.metadata.owner_references = None;
        objects.push(Object::Pod(Box::new(pod)));
    }
    Ok(objects)
}
