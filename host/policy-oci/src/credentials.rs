//! Registry credentials from a Docker config: the `.dockerconfigjson` of a
//! `kubernetes.io/dockerconfigjson` Secret, or a `config.json` file for the CLI.
//!
//! Entries are keyed by registry as `docker login` writes them (`HOST[:PORT]`, sometimes with a
//! scheme and a path); lookups compare `HOST[:PORT]` only. An entry gives a user name and a
//! password, either as `auth` (base64 of `user:password`) or as the two fields. Pure: the
//! caller reads the Secret or the file.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::Deserialize;

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Basic {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Basic {
    /// The user only: a password has no business in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Basic({:?}, ***)", self.username)
    }
}

/// Credentials by registry (`HOST[:PORT]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    by_registry: BTreeMap<String, Basic>,
}

/// Why a Docker config was not read, naming where it came from and the entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    #[error("{source_name}: not a Docker config (JSON with \"auths\"): {message}")]
    Json {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: auths entry {registry:?}: {problem}")]
    Entry {
        source_name: String,
        registry: String,
        problem: String,
    },
}

impl Credentials {
    /// No credentials: anonymous access.
    pub fn none() -> Credentials {
        Credentials::default()
    }

    /// Reads a Docker config; `source_name` (a file, `Secret ns/name`) is repeated in errors.
    pub fn from_docker_config(
        source_name: &str,
        json: &[u8],
    ) -> Result<Credentials, CredentialsError> {
        #[derive(Deserialize)]
        struct Config {
            #[serde(default)]
            auths: BTreeMap<String, Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            #[serde(default)]
            auth: Option<String>,
            #[serde(default)]
            username: Option<String>,
            #[serde(default)]
            password: Option<String>,
        }
        let config: Config = serde_json::from_slice(json).map_err(|e| CredentialsError::Json {
            source_name: source_name.to_owned(),
            message: e.to_string(),
        })?;
        let mut by_registry = BTreeMap::new();
        for (key, entry) in config.auths {
            let problem = |problem: &str| CredentialsError::Entry {
                source_name: source_name.to_owned(),
                registry: tfjob_policy_logic::text::prefix(&key, 120).to_owned(),
                problem: problem.to_owned(),
            };
            let basic = match (entry.auth, entry.username, entry.password) {
                (Some(auth), _, _) if !auth.is_empty() => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|_| problem("auth is not base64"))?;
                    let text = String::from_utf8(decoded)
                        .map_err(|_| problem("auth is not UTF-8 user:password"))?;
                    let (user, password) = text
                        .split_once(':')
                        .ok_or_else(|| problem("auth is not user:password"))?;
                    Basic {
                        username: user.to_owned(),
                        password: password.to_owned(),
                    }
                }
                (_, Some(username), Some(password)) => Basic { username, password },
                _ => continue,
            };
            by_registry.insert(registry_of(&key).to_owned(), basic);
        }
        Ok(Credentials { by_registry })
    }

    /// The credentials for `registry` (`HOST[:PORT]`).
    pub fn get(&self, registry: &str) -> Option<&Basic> {
        self.by_registry.get(registry)
    }

    pub fn is_empty(&self) -> bool {
        self.by_registry.is_empty()
    }
}

/// `HOST[:PORT]` of a Docker config key: `https://host:5000/v1/` gives `host:5000`.
fn registry_of(key: &str) -> &str {
    let rest = key.split_once("://").map_or(key, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_auth_and_user_password_entries_by_host_and_port() {
        let json = br#"{"auths": {
            "https://registry.example.com:5000/v1/": {"auth": "YWxpY2U6czNjcjN0Og=="},
            "localhost:5000": {"username": "bob", "password": "pw"},
            "empty.example.com": {}
        }}"#;
        let c = Credentials::from_docker_config("config.json", json).unwrap();
        let alice = c.get("registry.example.com:5000").unwrap();
        assert_eq!(
            (alice.username.as_str(), alice.password.as_str()),
            ("alice", "s3cr3t:")
        );
        assert_eq!(c.get("localhost:5000").unwrap().username, "bob");
        assert!(c.get("empty.example.com").is_none());
        assert!(c.get("localhost").is_none());
        assert!(!format!("{alice:?}").contains("s3cr3t"));
    }

    #[test]
    fn malformed_configs_name_the_source_and_the_entry() {
        let e = Credentials::from_docker_config("Secret team/pull", b"[1,2]").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("Secret team/pull: not a Docker config"),
            "{e}"
        );
        let e = Credentials::from_docker_config(
            "Secret team/pull",
            br#"{"auths": {"r.example.com": {"auth": "%%%"}}}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("auths entry \"r.example.com\": auth is not base64"),
            "{e}"
        );
        let e = Credentials::from_docker_config(
            "f",
            br#"{"auths": {"r.example.com": {"auth": "bm9jb2xvbg=="}}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("not user:password"), "{e}");
    }
}
