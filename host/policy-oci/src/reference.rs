//! References to policy modules in a registry: `[oci://]HOST[:PORT]/REPO[:TAG][@sha256:HEX]`.
//!
//! The grammar is the distribution reference's, made stricter where a default would surprise:
//! the registry host must be written out (no implicit Docker Hub: a policy runs in every pod's
//! admission path, and where it comes from must be readable in the ConfigMap), and a tag or a
//! digest must be named (no implicit `latest`). Parsing is pure; errors name the part that is
//! wrong and quote the input cut to a readable length.

use std::fmt;

/// The scheme prefix of a module reference in a ConfigMap.
pub const SCHEME: &str = "oci://";
/// Longest reference accepted, in bytes: the distribution spec caps a repository name at 255
/// characters and a tag at 128; a digest adds 71.
pub const MAX_REFERENCE_BYTES: usize = 512;

/// A module reference, as parsed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModuleRef {
    /// `HOST[:PORT]` as written.
    pub registry: String,
    /// The repository path, e.g. `team/policies/decorate`.
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:` and 64 lowercase hex digits.
    pub digest: Option<String>,
}

/// Why a reference does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("module reference {quoted}: {problem}")]
pub struct ReferenceError {
    quoted: String,
    problem: String,
}

impl ReferenceError {
    fn new(text: &str, problem: impl Into<String>) -> ReferenceError {
        ReferenceError {
            quoted: format!("{:?}", tfjob_policy_logic::text::prefix(text, 120)),
            problem: problem.into(),
        }
    }
}

impl ModuleRef {
    /// Parses `text`, with or without the `oci://` prefix.
    pub fn parse(text: &str) -> Result<ModuleRef, ReferenceError> {
        let err = |problem: &str| ReferenceError::new(text, problem);
        if text.len() > MAX_REFERENCE_BYTES {
            return Err(err(&format!("longer than {MAX_REFERENCE_BYTES} bytes")));
        }
        let rest = text.strip_prefix(SCHEME).unwrap_or(text);
        if rest.contains("://") {
            return Err(err("only the oci:// scheme is supported"));
        }
        let (rest, digest) = match rest.split_once('@') {
            Some((name, digest)) => {
                check_digest(digest).map_err(|p| err(&p))?;
                (name, Some(digest.to_owned()))
            }
            None => (rest, None),
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(err(
                "name the registry: HOST[:PORT]/REPOSITORY:TAG (no registry is assumed)",
            ));
        };
        check_registry(registry).map_err(|p| err(&p))?;
        // A tag follows the last colon of the path (a registry port is before the first slash).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) => {
                check_tag(tag).map_err(|p| err(&p))?;
                (repo, Some(tag.to_owned()))
            }
            None => (path, None),
        };
        check_repository(repository).map_err(|p| err(&p))?;
        if tag.is_none() && digest.is_none() {
            return Err(err(
                "name a tag (:TAG) or a digest (@sha256:...); no tag is assumed",
            ));
        }
        Ok(ModuleRef {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// The registry's host name without the port, as `--policy-registry-insecure` names it.
    pub fn host(&self) -> &str {
        host_of(&self.registry)
    }

    /// What to ask the registry for: the digest when pinned, else the tag.
    pub fn reference(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .expect("parse requires a tag or a digest")
    }

    /// The same repository at `digest`, without a tag.
    pub fn at_digest(&self, digest: &str) -> ModuleRef {
        ModuleRef {
            digest: Some(digest.to_owned()),
            tag: None,
            ..self.clone()
        }
    }

    /// The same repository under `tag`.
    pub fn with_tag(&self, tag: &str) -> ModuleRef {
        ModuleRef {
            tag: Some(tag.to_owned()),
            digest: None,
            ..self.clone()
        }
    }

    /// `HOST[:PORT]/REPO`, the docker reference a signature names.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

impl fmt::Display for ModuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// `HOST` of `HOST[:PORT]`, brackets of an IPv6 literal kept.
pub fn host_of(registry: &str) -> &str {
    if registry.starts_with('[') {
        return registry.find(']').map_or(registry, |end| &registry[..=end]);
    }
    registry.split(':').next().unwrap_or(registry)
}

/// `sha256:` and 64 lowercase hex digits; the only algorithm a pinned reference may use.
pub fn check_digest(digest: &str) -> Result<(), String> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return Err("the digest must be sha256:<64 hex digits>".into());
    };
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err("the digest must be sha256: and 64 lowercase hex digits".into());
    }
    Ok(())
}

fn check_registry(registry: &str) -> Result<(), String> {
    let host = host_of(registry);
    let port = &registry[host.len()..];
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        !host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    };
    if !host_ok {
        return Err(format!(
            "registry host {host:?} is not a host name or address"
        ));
    }
    // Without a dot, a port or `localhost`, the first part is a repository path, as Docker
    // reads it: refuse rather than guess a registry.
    if !host.contains('.') && !host.starts_with('[') && port.is_empty() && host != "localhost" {
        return Err(format!(
            "{host:?} is not a registry host (write HOST.DOMAIN, HOST:PORT or localhost); no \
             registry is assumed"
        ));
    }
    if !port.is_empty() {
        let digits = port.strip_prefix(':').unwrap_or("");
        if digits.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("registry port {digits:?} is not a port number"));
        }
    }
    Ok(())
}

/// Path components as the distribution spec's grammar: lowercase alphanumerics separated by
/// `.`, `_`, `__` or runs of `-`.
fn check_repository(repository: &str) -> Result<(), String> {
    if repository.is_empty() {
        return Err("the repository is empty".into());
    }
    if repository.len() > 255 {
        return Err("the repository is longer than 255 characters".into());
    }
    for component in repository.split('/') {
        let ok = !component.is_empty()
            && component
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
            && component.as_bytes()[0].is_ascii_alphanumeric()
            && component.as_bytes()[component.len() - 1].is_ascii_alphanumeric()
            && !component.contains("..")
            && !component.contains("___")
            && !component.contains("._")
            && !component.contains("_.")
            && !component.contains(".-")
            && !component.contains("-.");
        if !ok {
            return Err(format!(
                "repository component {component:?} must be lowercase letters and digits, \
                 separated by '.', '_', '__' or '-'"
            ));
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && (tag.as_bytes()[0].is_ascii_alphanumeric() || tag.as_bytes()[0] == b'_')
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag {:?} must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' \
             or '-'",
            tfjob_policy_logic::text::prefix(tag, 40)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_tags_digests_ports_and_the_scheme() {
        let r = ModuleRef::parse("oci://localhost:5000/team/decorate:v1").unwrap();
        assert_eq!(r.registry, "localhost:5000");
        assert_eq!(r.host(), "localhost");
        assert_eq!(r.repository, "team/decorate");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.reference(), "v1");
        let pinned = ModuleRef::parse(&format!("registry.example.com/p:v1@{DIGEST}")).unwrap();
        assert_eq!(pinned.reference(), DIGEST);
        assert_eq!(
            pinned.to_string(),
            format!("registry.example.com/p:v1@{DIGEST}")
        );
        let v6 = ModuleRef::parse(&format!("[::1]:5000/p@{DIGEST}")).unwrap();
        assert_eq!(v6.host(), "[::1]");
        assert_eq!(
            r.at_digest(DIGEST).to_string(),
            format!("localhost:5000/team/decorate@{DIGEST}")
        );
    }

    #[test]
    fn refuses_what_would_need_a_guess_or_is_malformed() {
        let cases = [
            ("decorate:v1", "no registry is assumed"),
            ("team/decorate:v1", "not a registry host"),
            ("localhost:5000/decorate", "no tag is assumed"),
            ("localhost:5000/Decorate:v1", "lowercase"),
            ("localhost:5000/a//b:v1", "component \"\""),
            ("localhost:99999/a:v1", "port"),
            ("localhost:5000/a:-v1", "tag"),
            ("localhost:5000/a@sha256:abc", "64"),
            ("localhost:5000/a@md5:abc", "sha256"),
            ("https://localhost:5000/a:v1", "only the oci:// scheme"),
            ("localhost:5000/décor:v1", "lowercase"),
            ("bad_host.com/a:v1", "not a host name"),
        ];
        for (text, expected) in cases {
            let e = ModuleRef::parse(text).unwrap_err().to_string();
            assert!(e.contains(expected), "{text}: {e}");
        }
    }

    #[test]
    fn huge_and_multibyte_input_is_refused_with_a_short_quote() {
        let huge = format!("localhost:5000/{}:v1", "a".repeat(100_000));
        let e = ModuleRef::parse(&huge).unwrap_err().to_string();
        assert!(e.contains("longer than 512 bytes"), "{e}");
        assert!(e.len() < 300, "{}", e.len());
        let tag = format!("localhost:5000/a:{}", "é".repeat(100));
        let e = ModuleRef::parse(&tag).unwrap_err().to_string();
        assert!(e.contains("tag"), "{e}");
    }
}
