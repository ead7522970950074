//! The classification policy's settings document.
//!
//! [`crate::classify::ClassifySettings`] holds `std::time::Duration`s; a settings document
//! spells them the way Flyte's configuration (and every Go tool) does: `3m`, `90s`, `1h30m`,
//! `0s`, `1.5h`, `250ms`. [`ClassifySettingsDoc`] is that document; it converts into the typed
//! settings, naming the field of a bad duration.

use serde::{Deserialize, Serialize};

use crate::classify::ClassifySettings;
use crate::duration;
use crate::never_fits::{FailUnschedulable, NodePool};
use crate::settings::PolicySettings;

/// Settings of the classification policy, as written in JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClassifySettingsDoc {
    /// How long `ImagePullBackOff` may last before the pod fails (retryably). Default `3m`.
    pub image_pull_backoff_grace_period: String,
    /// How long `CreateContainerError` may last before the pod fails (permanently). Default `3m`.
    pub create_container_error_grace_period: String,
    /// How long `CreateContainerConfigError` may last before the pod fails (permanently).
    /// Default `0s`: at once, as upstream, since a missing ConfigMap or Secret rarely appears.
    pub create_container_config_error_grace_period: String,
    /// A pod still pending after this long fails retryably; `0s` (the default) turns the
    /// timeout off, as Flyte's `PodPendingTimeout`.
    pub pod_pending_timeout: String,
    /// Treat `OOMKilled` as a permanent failure instead of a retryable one. Default `false`.
    pub oom_killed_is_permanent: bool,
    /// Fail a pod that can never be scheduled (its requests exceed every node and every
    /// declared node pool); absent (the default): unschedulable pods wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_unschedulable: Option<FailUnschedulableDoc>,
}

/// `failUnschedulable`, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailUnschedulableDoc {
    /// How long a pod may be unschedulable before it is compared with the nodes. Default `1m`.
    #[serde(default = "one_minute")]
    pub grace_period: String,
    /// Node pools that count whether or not they have nodes now (autoscaled pools at zero).
    #[serde(default)]
    pub node_pools: Vec<NodePool>,
}

fn one_minute() -> String {
    "1m".into()
}

impl Default for ClassifySettingsDoc {
    fn default() -> Self {
        ClassifySettingsDoc {
            image_pull_backoff_grace_period: "3m".into(),
            create_container_error_grace_period: "3m".into(),
            create_container_config_error_grace_period: "0s".into(),
            pod_pending_timeout: "0s".into(),
            oom_killed_is_permanent: false,
            fail_unschedulable: None,
        }
    }
}

impl ClassifySettingsDoc {
    /// The typed settings; an unparsable duration is an error naming its field.
    pub fn to_settings(&self) -> Result<ClassifySettings, String> {
        let duration =
            |field: &str, text: &str| duration::parse_go(text).map_err(|e| format!("{field}: {e}"));
        let timeout = duration("podPendingTimeout", &self.pod_pending_timeout)?;
        Ok(ClassifySettings {
            image_pull_backoff_grace_period: duration(
                "imagePullBackoffGracePeriod",
                &self.image_pull_backoff_grace_period,
            )?,
            create_container_error_grace_period: duration(
                "createContainerErrorGracePeriod",
                &self.create_container_error_grace_period,
            )?,
            create_container_config_error_grace_period: duration(
                "createContainerConfigErrorGracePeriod",
                &self.create_container_config_error_grace_period,
            )?,
            pod_pending_timeout: (!timeout.is_zero()).then_some(timeout),
            oom_killed_is_permanent: self.oom_killed_is_permanent,
            fail_unschedulable: match &self.fail_unschedulable {
                None => None,
                Some(doc) => Some(FailUnschedulable {
                    grace_period: duration("failUnschedulable.gracePeriod", &doc.grace_period)?,
                    node_pools: doc
                        .node_pools
                        .iter()
                        .enumerate()
                        .map(|(i, pool)| {
                            if pool.name.is_empty() {
                                return Err(format!(
                                    "failUnschedulable.nodePools[{i}].name: must not be empty"
                                ));
                            }
                            pool.offer()
                                .map_err(|e| format!("failUnschedulable.nodePools[{i}].{e}"))
                        })
                        .collect::<Result<_, _>>()?,
                }),
            },
        })
    }
}

impl TryFrom<&ClassifySettingsDoc> for ClassifySettings {
    type Error = String;

    fn try_from(doc: &ClassifySettingsDoc) -> Result<Self, Self::Error> {
        doc.to_settings()
    }
}

impl PolicySettings for ClassifySettingsDoc {
    fn validate(&self) -> Result<(), String> {
        self.to_settings().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::settings_from_json;
    use std::time::Duration;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn defaults_match_the_typed_defaults() {
        let doc: ClassifySettingsDoc = settings_from_json("{}").unwrap();
        assert_eq!(doc.to_settings().unwrap(), ClassifySettings::default());
        let doc: ClassifySettingsDoc = settings_from_json("").unwrap();
        assert_eq!(
            ClassifySettings::try_from(&doc).unwrap(),
            ClassifySettings::default()
        );
    }

    #[test]
    fn documents_convert_and_errors_name_the_field() {
        let doc: ClassifySettingsDoc = settings_from_json(
            r#"{"imagePullBackoffGracePeriod": "90s", "createContainerErrorGracePeriod": "1h30m",
                "createContainerConfigErrorGracePeriod": "30s", "podPendingTimeout": "10m",
                "oomKilledIsPermanent": true}"#,
        )
        .unwrap();
        let s = doc.to_settings().unwrap();
        assert_eq!(s.image_pull_backoff_grace_period, secs(90));
        assert_eq!(s.create_container_error_grace_period, secs(5400));
        assert_eq!(s.create_container_config_error_grace_period, secs(30));
        assert_eq!(s.pod_pending_timeout, Some(secs(600)));
        assert!(s.oom_killed_is_permanent);

        let err =
            settings_from_json::<ClassifySettingsDoc>(r#"{"podPendingTimeout": "10 minutes"}"#)
                .unwrap_err();
        assert!(
            err.starts_with("podPendingTimeout: invalid duration \"10 minutes\""),
            "{err}"
        );
        let err =
            settings_from_json::<ClassifySettingsDoc>(r#"{"imagePullBackOffGracePeriod": "1m"}"#)
                .unwrap_err();
        assert!(
            err.starts_with(
                "imagePullBackOffGracePeriod: unknown field `imagePullBackOffGracePeriod`"
            ),
            "{err}"
        );
        let err = settings_from_json::<ClassifySettingsDoc>(r#"{"oomKilledIsPermanent": "yes"}"#)
            .unwrap_err();
        assert!(
            err.starts_with("oomKilledIsPermanent: invalid type"),
            "{err}"
        );
    }
}
