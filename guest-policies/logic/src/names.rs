//! Kubernetes name rules used when validating settings, and field-path formatting for errors.
//!
//! Settings are validated when a policy loads, so a typo in a label key or a volume name is
//! reported to the platform team at activation instead of as a pod the API server rejects later.
//! The rules are the API server's (`k8s.io/apimachinery/pkg/util/validation`), reimplemented
//! without regular expressions because this crate is compiled into Wasm guests, where every
//! dependency adds code.

/// Longest DNS-1123 label (volume names, label name parts).
const DNS1123_LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain (label and annotation key prefixes, scheduler names).
const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest name part of a qualified name and longest label value.
const QUALIFIED_NAME_PART_MAX: usize = 63;

/// Formats `prefix` followed by a map key, as `prefix.key` when the key is a plain word and as
/// `prefix["key"]` when it holds dots or slashes (`accelerators["nvidia.com/gpu"]`), so the
/// path stays unambiguous.
pub fn key_path(prefix: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match (prefix.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (true, false) => format!("[{key:?}]"),
        (false, true) => format!("{prefix}.{key}"),
        (false, false) => format!("{prefix}[{key:?}]"),
    }
}

/// A DNS-1123 label: lower-case alphanumerics and `-`, starting and ending alphanumeric, at
/// most 63 characters (volume names).
pub fn check_dns1123_label(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > DNS1123_LABEL_MAX {
        return Err(format!(
            "{value:?} is longer than {DNS1123_LABEL_MAX} characters"
        ));
    }
    if !is_dns1123_label_part(value) {
        return Err(format!(
            "{value:?} must consist of lower case alphanumeric characters or '-', and start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

/// A DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 characters.
pub fn check_dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        return Err(format!(
            "{value:?} is longer than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    if !value.split('.').all(is_dns1123_label_part) {
        return Err(format!(
            "{value:?} must consist of lower case alphanumeric characters, '-' or '.', and each dot-separated part must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

/// A qualified name (label and annotation keys, extended resource names): an optional
/// DNS-1123 subdomain prefix and `/`, then a name of at most 63 alphanumerics, `-`, `_` and
/// `.`, starting and ending alphanumeric.
pub fn check_qualified_name(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    let name = match value.split_once('/') {
        Some((prefix, name)) => {
            check_dns1123_subdomain(prefix).map_err(|e| format!("prefix of {value:?}: {e}"))?;
            name
        }
        None => value,
    };
    if name.is_empty() {
        return Err(format!("{value:?} has an empty name after the prefix"));
    }
    if name.len() > QUALIFIED_NAME_PART_MAX || !is_qualified_name_part(name) {
        return Err(format!(
            "{value:?} must be an optional DNS subdomain prefix and '/', then at most {QUALIFIED_NAME_PART_MAX} alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` and `.`, starting and ending
/// alphanumeric.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > QUALIFIED_NAME_PART_MAX || !is_qualified_name_part(value) {
        return Err(format!(
            "{value:?} must be at most {QUALIFIED_NAME_PART_MAX} alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

/// An environment variable name as Kubernetes 1.32+ accepts it (relaxed validation): printable
/// ASCII without `=`.
pub fn check_env_var_name(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if !value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'=')
    {
        return Err(format!(
            "{value:?} must consist of printable ASCII characters other than '='"
        ));
    }
    Ok(())
}

fn is_dns1123_label_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

fn is_qualified_name_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_quote_keys_with_separators() {
        assert_eq!(key_path("limits", "cpu"), "limits.cpu");
        assert_eq!(
            key_path("accelerators", "nvidia.com/gpu"),
            "accelerators[\"nvidia.com/gpu\"]"
        );
        assert_eq!(key_path("", "mode"), "mode");
        assert_eq!(key_path("", "a/b"), "[\"a/b\"]");
    }

    #[test]
    fn dns_labels_and_subdomains() {
        assert!(check_dns1123_label("nvidia-driver").is_ok());
        assert!(check_dns1123_label("").is_err());
        assert!(check_dns1123_label("Upper").is_err());
        assert!(check_dns1123_label("-dash").is_err());
        assert!(check_dns1123_label(&"a".repeat(64)).is_err());
        assert!(check_dns1123_subdomain("volcano.sh").is_ok());
        assert!(check_dns1123_subdomain("a..b").is_err());
    }

    #[test]
    fn qualified_names_and_label_values() {
        assert!(check_qualified_name("nvidia.com/gpu").is_ok());
        assert!(check_qualified_name("app.kubernetes.io/name").is_ok());
        assert!(check_qualified_name("cpu").is_ok());
        assert!(check_qualified_name("Team_Name").is_ok());
        assert!(check_qualified_name("nvidia.com/").is_err());
        assert!(check_qualified_name("Bad_Prefix/x").is_err());
        assert!(check_qualified_name("has space").is_err());
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("v1.2_3").is_ok());
        assert!(check_label_value("not ok").is_err());
    }

    #[test]
    fn env_var_names() {
        assert!(check_env_var_name("HTTP_PROXY").is_ok());
        assert!(check_env_var_name("my.var-1").is_ok());
        assert!(check_env_var_name("").is_err());
        assert!(check_env_var_name("A=B").is_err());
        assert!(check_env_var_name("tab\there").is_err());
    }
}
