//! `tfjob-operator policy list`: the policy ConfigMaps of a cluster, with the status the
//! operator gave them (state, digest, the memory the serving version holds, breaker, error), as a
//! table.

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use tfjob_policy_engine::PolicyManifest;
use tfjob_policy_engine::capabilities::Capabilities;
use tfjob_policy_engine::configmap::{self, PolicyStatus};

use crate::shared::ClusterScope;

#[derive(Debug, Args)]
#[command(mut_arg("namespace", |a| a
    .required(false)
    .default_value("tfjob-system")
    .help("Namespace of the policy ConfigMaps")))]
#[command(mut_arg("all_namespaces", |a| a.help("List policy ConfigMaps of every namespace")))]
pub struct ListArgs {
    #[command(flatten)]
    pub scope: ClusterScope,
}

/// Prints the table of the policy ConfigMaps.
pub fn main(args: &ListArgs) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let configmaps = runtime.block_on(fetch_policy_configmaps(args))?;
    if configmaps.is_empty() {
        let scope = if args.scope.all_namespaces {
            "any namespace".to_owned()
        } else {
            format!("namespace {}", args.scope.namespace)
        };
        eprintln!(
            "No policy ConfigMaps (label {}) found in {scope}.",
            configmap::POLICY_SELECTOR
        );
        return Ok(String::new());
    }
    let mut rows = vec![
        [
            "NAMESPACE",
            "NAME",
            "CONFIGMAP",
            "HOOKS",
            "MODE",
            "SCOPE",
            "GRANTED",
            "READS",
            "STATE",
            "DIGEST",
            "MEMORY",
            "LOADED-AT",
            "ERROR",
        ]
        .map(str::to_owned),
    ];
    rows.extend(configmaps.iter().map(row));
    Ok(table(&rows))
}

async fn fetch_policy_configmaps(args: &ListArgs) -> anyhow::Result<Vec<ConfigMap>> {
    let client = crate::shared::client(args.scope.kubeconfig.as_deref()).await?;
    let api: Api<ConfigMap> = if args.scope.all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, &args.scope.namespace)
    };
    let mut items = api
        .list(&ListParams::default().labels(configmap::POLICY_SELECTOR))
        .await
        .context("listing policy ConfigMaps")?
        .items;
    items.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    Ok(items)
}

/// One line of `policy list`. The manifest gives name, hooks and mode (`-` where it does not
/// parse); the status annotation gives the rest, `Unknown` when the operator has not written
/// one yet.
fn row(cm: &ConfigMap) -> [String; 13] {
    let dash = || "-".to_owned();
    let cm_name = cm.metadata.name.clone().unwrap_or_default();
    let manifest = cm
        .data
        .as_ref()
        .and_then(|d| d.get(configmap::MANIFEST_KEY))
        .and_then(|text| {
            let default_name = cm_name
                .strip_prefix(configmap::NAME_PREFIX)
                .unwrap_or(&cm_name);
            PolicyManifest::from_yaml(text, default_name).ok()
        });
    let (name, hooks, mode, reads) = match &manifest {
        Some(m) => {
            let names: Vec<&str> = m.hooks.iter().map(|h| h.as_str()).collect();
            (
                m.name.clone(),
                format!("{} ({})", names.len(), names.join(",")),
                format!("{:?}", m.mode),
                declared_reads(m),
            )
        }
        None => (dash(), dash(), dash(), dash()),
    };
    let (scope, granted, state, digest, memory, loaded_at, error) = match PolicyStatus::of(cm) {
        None => (
            dash(),
            dash(),
            "Unknown".to_owned(),
            dash(),
            dash(),
            dash(),
            dash(),
        ),
        Some(Err(e)) => (
            dash(),
            dash(),
            "Unknown".to_owned(),
            dash(),
            dash(),
            dash(),
            format!(
                "unreadable {} annotation: {e}",
                configmap::STATUS_ANNOTATION
            ),
        ),
        Some(Ok(status)) => (
            status.scope.clone().unwrap_or_else(dash),
            status
                .granted
                .as_ref()
                .map_or_else(dash, Capabilities::summary),
            // A tripped breaker is said beside the state: the version serves, but is not
            // called until a trial call succeeds.
            match &status.breaker {
                Some(_) => format!("{} (tripped)", status.state.as_str()),
                None => status.state.as_str().to_owned(),
            },
            status
                .digest
                .map(|d| d.chars().take(12).collect())
                .unwrap_or_else(dash),
            status.memory_bytes.map_or_else(dash, mebibytes),
            status.loaded_at.unwrap_or_else(dash),
            match (status.error, status.breaker) {
                (Some(e), _) => e.split_whitespace().collect::<Vec<_>>().join(" "),
                (None, Some(b)) => format!(
                    "tripped after {} consecutive {} failures; a trial call from {}",
                    b.failures, b.category, b.retry_at
                ),
                (None, None) => dash(),
            },
        ),
    };
    [
        cm.metadata.namespace.clone().unwrap_or_default(),
        name,
        cm_name,
        hooks,
        mode,
        scope,
        granted,
        reads,
        state,
        digest,
        memory,
        loaded_at,
        error,
    ]
}

/// What the manifest declares it reads, as `namespaces,configmaps(job-namespace)`; `-` for
/// nothing.
fn declared_reads(manifest: &PolicyManifest) -> String {
    if manifest.reads.is_empty() {
        return "-".to_owned();
    }
    manifest
        .reads
        .iter()
        .map(|r| match r.scope {
            Some(scope) => format!("{}({scope})", r.resource),
            None => r.resource.clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Bytes in MiB with one decimal, as `12.3Mi`.
fn mebibytes(bytes: u64) -> String {
    format!("{:.1}Mi", bytes as f64 / f64::from(1 << 20))
}

/// Left-aligned columns three spaces apart, as kubectl prints them; the last column unpadded.
fn table(rows: &[[String; 13]]) -> String {
    let mut widths = [0usize; 13];
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use tfjob_policy_engine::Hook;
    use tfjob_policy_engine::configmap::{BreakerStatus, PolicyState, STATUS_ANNOTATION};

    #[test]
    fn a_tripped_breaker_shows_in_the_list() {
        let manifest = PolicyManifest {
            name: "looper".into(),
            hooks: vec![Hook::Decorate],
            ..PolicyManifest::default()
        };
        let mut cm = configmap::pack(manifest, b"\0asm module", "tfjob-system", false).unwrap();
        let mut status = PolicyStatus::active("abc", jiff::Timestamp::UNIX_EPOCH);
        let annotate = |cm: &mut ConfigMap, status: &PolicyStatus| {
            cm.metadata.annotations = Some(BTreeMap::from([(
                STATUS_ANNOTATION.to_owned(),
                status.to_annotation(),
            )]));
        };
        annotate(&mut cm, &status);
        let closed = row(&cm);
        assert_eq!((closed[8].as_str(), closed[12].as_str()), ("Active", "-"));

        status.breaker = Some(BreakerStatus {
            state: "Tripped".into(),
            category: "timeout".into(),
            failures: 5,
            trips: 1,
            retry_at: "1970-01-01T00:00:10Z".into(),
        });
        annotate(&mut cm, &status);
        let tripped = row(&cm);
        assert_eq!(tripped[8], "Active (tripped)");
        assert_eq!(
            tripped[12],
            "tripped after 5 consecutive timeout failures; a trial call from \
             1970-01-01T00:00:10Z"
        );
        status.memory_bytes = Some(25 << 19);
        annotate(&mut cm, &status);
        assert_eq!(
            row(&cm)[10],
            "12.5Mi",
            "what the serving version was charged"
        );
        // An error (a rejected update) is still what the last column says.
        status.state = PolicyState::Rejected;
        status.error = Some("bad settings".into());
        annotate(&mut cm, &status);
        assert_eq!(row(&cm)[12], "bad settings");
    }

    #[test]
    fn what_a_policy_reads_shows_in_the_list() {
        use tfjob_policy_engine::cluster_reads::{ReadDeclaration, ReadScope};
        let mut manifest = PolicyManifest {
            name: "labels".into(),
            hooks: vec![Hook::Decorate],
            ..PolicyManifest::default()
        };
        let cm = configmap::pack(manifest.clone(), b"\0asm module", "tfjob-system", false).unwrap();
        assert_eq!(row(&cm)[7], "-");
        manifest.reads = vec![
            ReadDeclaration {
                resource: "namespaces".into(),
                scope: None,
            },
            ReadDeclaration {
                resource: "configmaps".into(),
                scope: Some(ReadScope::JobNamespace),
            },
        ];
        let cm = configmap::pack(manifest, b"\0asm module", "tfjob-system", false).unwrap();
        assert_eq!(row(&cm)[7], "namespaces,configmaps(job-namespace)");
    }
}
