//! Kubeconfig files for the control plane's users: the server, the CA file, and one client
//! certificate or a bearer token.

use std::path::Path;

use crate::pki::ClientCert;

/// A kubeconfig for `user` reaching `server` with `cert`, trusting `ca`.
pub fn render(server: &str, ca: &Path, user: &str, cert: &ClientCert) -> String {
    // JSON is YAML, and serde_json quotes every path whatever it holds.
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "control-plane", "cluster": {
            "server": server,
            "certificate-authority": ca,
        }}],
        "users": [{"name": user, "user": {
            "client-certificate": cert.cert,
            "client-key": cert.key,
        }}],
        "contexts": [{"name": user, "context": {"cluster": "control-plane", "user": user}}],
        "current-context": user,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// A kubeconfig for `user` reaching `server` with bearer `token`, trusting `ca`, in `namespace`
/// by default.
pub fn render_token(server: &str, ca: &Path, user: &str, token: &str, namespace: &str) -> String {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "control-plane", "cluster": {
            "server": server,
            "certificate-authority": ca,
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {
            "cluster": "control-plane", "user": user, "namespace": namespace,
        }}],
        "current-context": user,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_quotes_and_spaces_stay_whole() {
        let cert = ClientCert {
            cert: "/tmp/a \"b\"/admin.crt".into(),
            key: "/tmp/a: b/admin.key".into(),
        };
        let text = render(
            "https://127.0.0.1:6443",
            Path::new("/ca.crt"),
            "admin",
            &cert,
        );
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            doc["users"][0]["user"]["client-certificate"],
            "/tmp/a \"b\"/admin.crt"
        );
        assert_eq!(doc["users"][0]["user"]["client-key"], "/tmp/a: b/admin.key");
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:6443"
        );
        assert_eq!(doc["current-context"], "admin");
    }
}
