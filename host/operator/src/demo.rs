//! `up --demo`: submits the example jobs from `deploy/examples/` to the embedded cluster and
//! shows their progress live (per job: replicas active/succeeded/failed, the latest condition,
//! why a pod is pending) until every job has finished, then a summary.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use tfjob_api::parse::parse_tfjob_documents;
use tfjob_api::{JobConditionType, TFJob};

/// Submits every TFJob found in the `.yaml` files of `dir`.
pub async fn submit_examples(client: &Client, dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut submitted = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for doc in parse_tfjob_documents(&text) {
            let mut job = doc.with_context(|| format!("{}", file.display()))?;
            let ns = job
                .metadata
                .namespace
                .get_or_insert_with(|| "default".into())
                .clone();
            let name = job.metadata.name.clone().unwrap_or_default();
            let api: Api<TFJob> = Api::namespaced(client.clone(), &ns);
            match api.create(&PostParams::default(), &job).await {
                Ok(_) => submitted.push((ns, name)),
                Err(kube::Error::Api(s)) if s.is_already_exists() => submitted.push((ns, name)),
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("submitting {} from {}", name, file.display()));
                }
            }
        }
    }
    Ok(submitted)
}

/// One line of the progress display.
fn job_line(job: &TFJob, pods: &[Pod]) -> String {
    let name = job.metadata.name.clone().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    let state = status
        .conditions
        .last()
        .map(|c| format!("{:?}", c.type_))
        .unwrap_or_else(|| "Submitted".into());
    let replicas: Vec<String> = status
        .replica_statuses
        .iter()
        .map(|(t, r)| format!("{t} {}/{}/{}", r.active, r.succeeded, r.failed))
        .collect();
    let pending: Vec<String> = pods
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(tfjob_api::labels::JOB_NAME))
                == Some(&name)
                && p.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or("Pending")
                    == "Pending"
        })
        .filter_map(|p| {
            pending_reason(p)
                .map(|r| format!("{}: {r}", p.metadata.name.clone().unwrap_or_default()))
        })
        .collect();
    let mut line = format!("  {name:<28} {state:<11} {}", replicas.join("  "));
    if let Some(restarts) = status.restart_count {
        line.push_str(&format!("  restarts {restarts}"));
    }
    if !pending.is_empty() {
        line.push_str(&format!("  pending: {}", pending.join("; ")));
    }
    line
}

/// Why a pending pod has not started, as a user would want to read it.
fn pending_reason(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        return Some(format!(
            "{} ({})",
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default()
        ));
    }
    status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|cs| cs.state.as_ref()?.waiting.as_ref()?.reason.clone())
}

fn finished(job: &TFJob) -> bool {
    job.status.as_ref().is_some_and(|s| s.is_finished())
}

/// Shows progress until every submitted job has finished (or `stop` resolves), then a summary.
pub async fn watch_progress(
    client: &Client,
    jobs: &[(String, String)],
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::pin!(stop);
    let pods: Api<Pod> = Api::all(client.clone());
    let all_jobs: Api<TFJob> = Api::all(client.clone());
    let mut last = String::new();
    loop {
        let listed = all_jobs.list(&ListParams::default()).await?;
        let pod_list = pods.list(&ListParams::default()).await?.items;
        let by_key: BTreeMap<(String, String), TFJob> = listed
            .items
            .into_iter()
            .map(|j| {
                (
                    (
                        j.metadata.namespace.clone().unwrap_or_default(),
                        j.metadata.name.clone().unwrap_or_default(),
                    ),
                    j,
                )
            })
            .collect();
        let ours: Vec<&TFJob> = jobs.iter().filter_map(|k| by_key.get(k)).collect();
        let frame = ours
            .iter()
            .map(|j| job_line(j, &pod_list))
            .collect::<Vec<_>>()
            .join("\n");
        if frame != last {
            println!("{}\n{frame}", jiff::Zoned::now().strftime("%H:%M:%S"));
            last = frame;
        }
        if !ours.is_empty() && ours.iter().all(|j| finished(j)) {
            summary(&ours);
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = &mut stop => return Ok(()),
        }
    }
}

fn summary(jobs: &[&TFJob]) {
    println!("\nSummary:");
    for job in jobs {
        let status = job.status.clone().unwrap_or_default();
        let outcome = if status.is_true(JobConditionType::Succeeded) {
            "Succeeded"
        } else {
            "Failed"
        };
        let took = match (&status.start_time, &status.completion_time) {
            (Some(s), Some(c)) => format!("{}s", c.0.duration_since(s.0).as_secs()),
            _ => "-".into(),
        };
        let why = status
            .conditions
            .last()
            .map(|c| c.message.clone())
            .unwrap_or_default();
        println!(
            "  {:<28} {outcome:<10} in {took:<5} restarts {}  {why}",
            job.metadata.name.clone().unwrap_or_default(),
            status.restart_count.unwrap_or(0)
        );
    }
}
