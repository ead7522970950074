//! How a client reaches the server: its URL, the CA it is trusted by, and the kubeconfig that
//! carries both with a user's bearer token. `up` writes this kubeconfig for its users, and the
//! tests hand the same one to kubectl, the Python client and kube-rs, so every client connects
//! as a user of `up` would, over HTTPS with the CA verified.
//!
//! A name or token is written plain when YAML reads it back as that same string
//! (`system:serviceaccount:ns:name`), and as a double-quoted scalar otherwise (a JSON string is
//! one), so no value a caller passes can change the document's shape or type.

use std::net::SocketAddr;

use base64::Engine as _;

use crate::http::tls::ServingCertificates;

/// The name of the cluster, context and (for the administrator) user in the kubeconfigs.
const CLUSTER_NAME: &str = "tfjob-embedded";

/// What a client needs to reach one running server.
#[derive(Clone, Debug)]
pub struct ClientAccess {
    url: String,
    ca_pem: Option<String>,
    admin_token: Option<String>,
}

impl ClientAccess {
    /// A server serving plain HTTP at `addr`: clients present no token, which the server takes
    /// as the administrator.
    pub fn plain(addr: SocketAddr) -> ClientAccess {
        ClientAccess {
            url: format!("http://{addr}"),
            ca_pem: None,
            admin_token: None,
        }
    }

    /// A server serving HTTPS at `addr` with `certificates`: clients trust its CA, and the
    /// administrator presents its token.
    pub fn https(addr: SocketAddr, certificates: &ServingCertificates) -> ClientAccess {
        ClientAccess {
            url: format!("https://{addr}"),
            ca_pem: Some(certificates.ca_pem().to_owned()),
            admin_token: Some(certificates.admin_token().to_owned()),
        }
    }

    /// `https://127.0.0.1:PORT`, or `http://` when the server serves plain HTTP.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA (PEM) clients trust the server by, when it serves HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The administrator's bearer token, when the server serves HTTPS.
    pub fn admin_token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }

    /// The administrator's kubeconfig, with `namespace` as its context's namespace.
    pub fn admin_kubeconfig(&self, namespace: &str) -> String {
        self.kubeconfig(crate::auth::tokens::ADMIN, self.admin_token(), namespace)
    }

    /// A kubeconfig whose user `user` presents `token` (none: no credentials), trusting the
    /// server's CA when it serves HTTPS, with `namespace` as its context's namespace.
    pub fn kubeconfig(&self, user: &str, token: Option<&str>, namespace: &str) -> String {
        let trust = match &self.ca_pem {
            Some(ca) => format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(ca)
            ),
            None => String::new(),
        };
        let credentials = match token {
            Some(token) => format!("\n    token: {}", scalar(token)),
            None => " {}".to_owned(),
        };
        let (server, user, namespace) = (scalar(&self.url), scalar(user), scalar(namespace));
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {CLUSTER_NAME}\n  cluster:\n    server: {server}{trust}\ncontexts:\n- name: {CLUSTER_NAME}\n  context:\n    cluster: {CLUSTER_NAME}\n    user: {user}\n    namespace: {namespace}\ncurrent-context: {CLUSTER_NAME}\nusers:\n- name: {user}\n  user:{credentials}\n",
        )
    }
}

/// `value` as a YAML scalar that reads back as the string `value`: plain when it starts with a
/// letter, holds only letters, digits and `._:/-`, and is none of the words YAML 1.1 (which
/// kubectl's parser follows) reads as a boolean or null; else double-quoted.
fn scalar(value: &str) -> String {
    const NOT_STRINGS: [&str; 10] = [
        "y", "n", "yes", "no", "true", "false", "on", "off", "null", "~",
    ];
    let plain = value.starts_with(|c: char| c.is_ascii_alphabetic())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/-".contains(&b))
        && !NOT_STRINGS.iter().any(|w| w.eq_ignore_ascii_case(value));
    if plain {
        value.to_owned()
    } else {
        serde_json::Value::from(value).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> serde_json::Value {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn https_kubeconfig_carries_the_ca_and_the_token() {
        let certificates = ServingCertificates::generate().unwrap();
        let access = ClientAccess::https("127.0.0.1:6443".parse().unwrap(), &certificates);
        let doc = parse(&access.admin_kubeconfig("default"));
        let cluster = &doc["clusters"][0]["cluster"];
        assert_eq!(cluster["server"], "https://127.0.0.1:6443");
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster["certificate-authority-data"].as_str().unwrap())
            .unwrap();
        assert_eq!(ca, certificates.ca_pem().as_bytes());
        assert_eq!(doc["users"][0]["user"]["token"], certificates.admin_token());
        assert_eq!(doc["contexts"][0]["context"]["namespace"], "default");
        assert_eq!(doc["current-context"], CLUSTER_NAME);
    }

    #[test]
    fn plain_kubeconfig_has_no_ca_and_no_credentials() {
        let access = ClientAccess::plain("127.0.0.1:8080".parse().unwrap());
        let doc = parse(&access.admin_kubeconfig("ml"));
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:8080"
        );
        assert!(doc["clusters"][0]["cluster"]["certificate-authority-data"].is_null());
        assert_eq!(doc["users"][0]["user"], serde_json::json!({}));
        assert_eq!(doc["contexts"][0]["context"]["namespace"], "ml");
    }

    #[test]
    fn scalars_are_plain_only_when_they_read_back_as_themselves() {
        for plain in [
            "admin",
            "system:serviceaccount:ml:op",
            "https://127.0.0.1:6443",
            "a.b-c_d",
        ] {
            assert_eq!(scalar(plain), plain);
        }
        for value in [
            "", "yes", "No", "TRUE", "null", "~", "123", "1e3", "-a", "a b", "a#b", "é", "y",
        ] {
            let quoted = scalar(value);
            assert_eq!(quoted, serde_json::Value::from(value).to_string());
            let back: String = serde_yaml_ng::from_str(&format!("k: {quoted}"))
                .map(|m: std::collections::BTreeMap<String, String>| m["k"].clone())
                .unwrap();
            assert_eq!(back, value);
        }
    }

    #[test]
    fn hostile_names_stay_values() {
        let access = ClientAccess::plain("127.0.0.1:8080".parse().unwrap());
        let user = "system:serviceaccount:ns:a\n  token: stolen # ü\"";
        let token = "t: {x}\n- name: other";
        let doc = parse(&access.kubeconfig(user, Some(token), "ns: x"));
        assert_eq!(doc["users"].as_array().unwrap().len(), 1);
        assert_eq!(doc["users"][0]["name"], user);
        assert_eq!(doc["users"][0]["user"]["token"], token);
        assert_eq!(doc["contexts"][0]["context"]["user"], user);
        assert_eq!(doc["contexts"][0]["context"]["namespace"], "ns: x");
    }
}
