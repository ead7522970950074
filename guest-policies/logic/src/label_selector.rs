//! Kubernetes label selectors in their text form (`app=tf,tier in (ps,worker),!legacy`), parsed
//! as strictly as the API server parses them and matched in memory.
//!
//! Policies that list cluster objects pass one to the operator, and the embedded API server
//! answers `?labelSelector=` with it: both get the same grammar and the same refusals. Keys and values follow the
//! label syntax (a key is an optional DNS-subdomain prefix and a name of at most 63 characters;
//! a value at most 63 characters of `[A-Za-z0-9-_.]`, starting and ending alphanumeric), so a
//! selector that could never match a valid label is an error naming the requirement, not a
//! silent empty answer. The whole text is bounded by [`MAX_SELECTOR_BYTES`].

use std::fmt;

/// The longest selector text accepted. Kubernetes sets no limit of its own; label keys and
/// values are short, so a longer selector is a mistake or an attack on the matcher.
pub const MAX_SELECTOR_BYTES: usize = 4096;

/// A selector the grammar refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError(String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid label selector: {}", self.0)
    }
}

impl std::error::Error for SelectorError {}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses `text`; every requirement's key and values must be valid label syntax.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        if text.len() > MAX_SELECTOR_BYTES {
            return Err(SelectorError(format!(
                "{} bytes; at most {MAX_SELECTOR_BYTES} are accepted",
                text.len()
            )));
        }
        let requirements = split_outside_parentheses(text)
            .into_iter()
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(requirement)
            .collect::<Result<_, _>>()?;
        Ok(LabelSelector { requirements })
    }

    /// Whether labels, looked up by key, satisfy every requirement.
    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
            Requirement::GreaterThan(k, n) => number(label(k)).is_some_and(|x| x > *n),
            Requirement::LessThan(k, n) => number(label(k)).is_some_and(|x| x < *n),
        })
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// An object's labels (`metadata.labels`; values that are not strings left out).
pub fn labels(object: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// A label value read as the integer `>`/`<` compare with; other values never match them.
fn number(value: Option<&str>) -> Option<i64> {
    value?.parse().ok()
}

/// Splits on commas outside parentheses, so `k in (a,b),x=y` has two parts.
fn split_outside_parentheses(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn requirement(part: &str) -> Result<Requirement, SelectorError> {
    let refuse = |why: &str| SelectorError(format!("{part:?}: {why}"));
    let set = |rest: &str| -> Result<Vec<String>, SelectorError> {
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|t| t.strip_suffix(')'))
            .ok_or_else(|| refuse("a set is written in parentheses, e.g. (a,b)"))?;
        let values = inner
            .split(',')
            .map(|v| value(v.trim()).map_err(|why| refuse(&why)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(values)
    };
    let key = |k: &str| label_key(k.trim()).map_err(|why| refuse(&why));
    let val = |v: &str| value(v.trim()).map_err(|why| refuse(&why));
    let int = |v: &str| {
        v.trim()
            .parse::<i64>()
            .map_err(|_| refuse("`>` and `<` compare with an integer"))
    };
    if let Some(k) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(key(k)?));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(key(k)?, val(v)?));
    }
    if let Some((k, v)) = part.split_once("==") {
        return Ok(Requirement::Equals(key(k)?, val(v)?));
    }
    if let Some((k, v)) = part.split_once('=') {
        return Ok(Requirement::Equals(key(k)?, val(v)?));
    }
    if let Some((k, v)) = part.split_once('>') {
        return Ok(Requirement::GreaterThan(key(k)?, int(v)?));
    }
    if let Some((k, v)) = part.split_once('<') {
        return Ok(Requirement::LessThan(key(k)?, int(v)?));
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    match words.as_slice() {
        [k] => Ok(Requirement::Exists(key(k)?)),
        [k, rest] => {
            let rest = rest.trim_start();
            if let Some(values) = rest.strip_prefix("notin") {
                Ok(Requirement::NotIn(key(k)?, set(values)?))
            } else if let Some(values) = rest.strip_prefix("in") {
                Ok(Requirement::In(key(k)?, set(values)?))
            } else {
                Err(refuse(
                    "expected an operator: =, ==, !=, in, notin, >, < or none (exists)",
                ))
            }
        }
        _ => Err(refuse("empty requirement")),
    }
}

/// Checks a label key: `[prefix/]name`, the prefix a DNS subdomain of at most 253 characters,
/// the name at most 63 characters of `[A-Za-z0-9-_.]` starting and ending alphanumeric.
fn label_key(key: &str) -> Result<String, String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let ok = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(format!(
                "key prefix {prefix:?} is not a DNS subdomain (lower-case alphanumerics, '-' and \
                 '.', at most 253 characters)"
            ));
        }
    }
    if name.is_empty() {
        return Err("a key's name part may not be empty".into());
    }
    if !is_label_value(name) {
        return Err(format!(
            "key name {name:?} must be at most 63 characters of [A-Za-z0-9-_.], starting and \
             ending with an alphanumeric character"
        ));
    }
    Ok(key.to_owned())
}

fn value(v: &str) -> Result<String, String> {
    if v.is_empty() || is_label_value(v) {
        Ok(v.to_owned())
    } else {
        Err(format!(
            "value {v:?} must be at most 63 characters of [A-Za-z0-9-_.], starting and ending \
             with an alphanumeric character"
        ))
    }
}

fn is_label_value(v: &str) -> bool {
    let bytes = v.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::NotExists(k) => format!("!{k}"),
                Requirement::GreaterThan(k, n) => format!("{k}>{n}"),
                Requirement::LessThan(k, n) => format!("{k}<{n}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn matches(selector: &str, labels: &[(&str, &str)]) -> bool {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        LabelSelector::parse(selector)
            .unwrap()
            .matches(|k| labels.get(k).copied())
    }

    #[test]
    fn every_operator_matches_as_the_api_server_does() {
        let labels = [("app", "tf"), ("tier", "worker"), ("gpus", "8")];
        for (selector, expected) in [
            ("", true),
            ("app=tf", true),
            ("app==tf,tier=worker", true),
            ("app!=tf", false),
            ("missing!=x", true),
            ("tier in (ps, worker)", true),
            ("tier notin (ps,worker)", false),
            ("missing notin (ps)", true),
            ("app", true),
            ("!app", false),
            ("!missing,app=tf", true),
            ("missing", false),
            ("tier in (ps)", false),
            ("gpus>4", true),
            ("gpus<4", false),
            ("app>1", false),
            ("example.com/team", false),
            ("a=", false),
        ] {
            assert_eq!(matches(selector, &labels), expected, "{selector}");
        }
        assert!(matches("a=", &[("a", "")]), "an empty value is a value");
    }

    #[test]
    fn malformed_selectors_are_refused_naming_the_requirement() {
        for (selector, names) in [
            ("a b=c", "\"a b=c\""),
            ("app=t f", "\"app=t f\""),
            ("tier in ps", "parentheses"),
            ("tier in (p s)", "\"p s\""),
            ("Example.com/app=x", "prefix"),
            ("/app=x", "prefix"),
            ("example.com/=x", "name part"),
            ("app=-x", "\"-x\""),
            ("gpus>four", "integer"),
            ("tier within (a)", "expected an operator"),
            ("équipe=vision", "équipe"),
            ("team=visión", "visión"),
        ] {
            let err = LabelSelector::parse(selector).unwrap_err().to_string();
            assert!(err.contains(names), "{selector}: {err}");
        }
        let long = format!("app={}", "a".repeat(64));
        assert!(
            LabelSelector::parse(&long).is_err(),
            "values are 63 at most"
        );
    }

    #[test]
    fn a_huge_selector_is_refused_before_it_is_parsed() {
        let huge = "a=b,".repeat(MAX_SELECTOR_BYTES);
        let err = LabelSelector::parse(&huge).unwrap_err().to_string();
        assert!(err.contains("at most 4096"), "{err}");
        let nested = "(".repeat(MAX_SELECTOR_BYTES);
        assert!(LabelSelector::parse(&nested).is_err());
    }

    #[test]
    fn it_prints_back_as_it_parses() {
        let text = "app=tf,tier in (ps,worker),!legacy,gpus>4,example.com/team";
        let parsed = LabelSelector::parse(text).unwrap();
        assert_eq!(parsed.to_string(), text);
        assert_eq!(LabelSelector::parse(&parsed.to_string()).unwrap(), parsed);
    }
}
