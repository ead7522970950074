//! Serves the embedded API server with the TFJob CRD installed and writes a kubeconfig for it,
//! so kubectl can be pointed at a bare server (no kubelet, no operator) to see exactly what it
//! sends: `cargo run -p tfjob-cluster --example serve -- [PORT]`, then
//! `KUBECONFIG=target/serve-kubeconfig kubectl apply -f deploy/examples/demo-retry.yaml -v=8`.
//! Faults are switched on and off while it runs with `kubectl replace --raw /debug/faults -f
//! faults.json` (or `curl -X PUT --data @faults.json`), and read back with
//! `kubectl get --raw /debug/faults` and `/debug/requests`.

use std::sync::Arc;

use tfjob_cluster::Store;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::args()
        .nth(1)
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(0);
    let store = Store::new();
    tfjob_cluster::storage::crd::install(
        &store,
        serde_json::to_value(tfjob_api::crd::tfjob_crd())?,
    )?;
    store.set_validator(
        "kubeflow.org",
        "tfjobs",
        Arc::new(tfjob_api::validation::admit),
    );
    let (addr, server) = tfjob_cluster::http::server::start(store, port).await?;
    let kubeconfig =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/serve-kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: embedded\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: embedded\n  context: {{cluster: embedded, user: embedded, namespace: default}}\ncurrent-context: embedded\nusers:\n- name: embedded\n  user: {{}}\n"
        ),
    )?;
    println!("serving on http://{addr}");
    println!("export KUBECONFIG={}", kubeconfig.display());
    server.await?;
    Ok(())
}
