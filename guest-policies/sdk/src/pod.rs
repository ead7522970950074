//! Edits a decorator makes to the pod it returns, checked as the API server checks them, so a
//! key or value the server would refuse fails the policy call naming the label, instead of the
//! pod create failing later for every replica of the job.

use k8s_openapi::api::core::v1::Pod;
use tfjob_policy_logic::names::{check_label_value, check_qualified_name};

use crate::wit::PolicyError;

/// Puts label `key` = `value` on `pod`, replacing a value it had. A key that is not a qualified
/// name, or a value that is not a label value, is `failed`, naming the label.
pub fn set_label(pod: &mut Pod, key: &str, value: &str) -> Result<(), PolicyError> {
    check_qualified_name(key)
        .and_then(|()| check_label_value(value))
        .map_err(|e| PolicyError::Failed(format!("metadata.labels[{key:?}]: {e}")))?;
    pod.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.to_owned(), value.to_owned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_put_and_replaced() {
        let mut pod = Pod::default();
        set_label(&mut pod, "team", "ml").unwrap();
        set_label(&mut pod, "example.com/tier", "gold").unwrap();
        set_label(&mut pod, "team", "vision").unwrap();
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels["team"], "vision");
        assert_eq!(labels["example.com/tier"], "gold");
        assert_eq!(labels.len(), 2);
    }

    #[test]
    fn what_the_server_refuses_is_refused_naming_the_label() {
        let mut pod = Pod::default();
        for (key, value) in [
            ("team", "not a label"),
            ("team", &"x".repeat(64)),
            ("team", "ümlaut"),
            ("", "ml"),
            ("bad key", "ml"),
            ("-team", "ml"),
        ] {
            let Err(PolicyError::Failed(message)) = set_label(&mut pod, key, value) else {
                panic!("{key:?}={value:?} was accepted");
            };
            assert!(
                message.starts_with(&format!("metadata.labels[{key:?}]: ")),
                "{message}"
            );
        }
        assert!(pod.metadata.labels.is_none(), "nothing was put");
    }
}
