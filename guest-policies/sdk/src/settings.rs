//! Settings documents: decoding, defaults and validation, for `validate-settings` and the hooks.
//!
//! The operator validates a policy's settings once, through the `settings` export, before it
//! activates the policy, and then passes the same document to every hook call. Every call runs
//! in a fresh instance, so a hook cannot rely on anything an earlier call left behind; but the
//! operator may start hook calls from a *pre-initialised* instance: one whose memory is a
//! snapshot taken right after `validate-settings` accepted the same document (see the
//! contract's `settings` interface). [`validate`] therefore keeps the document it decoded, and
//! [`load_shared`] hands that decoded value to a hook whose document is the same text, so the
//! hook decodes nothing. In any other instance [`load_shared`] decodes the document as
//! [`load`] does, and reports a bad one as `policy-error::invalid-settings`.
//!
//! A settings type implements [`PolicySettings`]: serde decoding (use `deny_unknown_fields` so
//! misspelt keys are errors) plus `validate` for what serde cannot check. Empty text, `{}` and
//! `null` all mean the defaults.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;

pub use tfjob_policy_logic::settings::PolicySettings;

use crate::wit::PolicyError;

/// The document [`validate`] last accepted in this instance, and what it decoded to.
struct Kept {
    text: Box<str>,
    value: Rc<dyn Any>,
}

thread_local! {
    // A component instance is single-threaded: this is one slot of the instance's memory, and
    // a snapshot of the memory carries it.
    static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

/// Implements `validate-settings`: `Ok` or the reason, naming the field. A valid document is
/// kept, decoded, for [`load_shared`].
pub fn validate<T: PolicySettings + 'static>(json: &str) -> Result<(), String> {
    let value: T = tfjob_policy_logic::settings::settings_from_json(json)?;
    KEPT.with(|kept| {
        *kept.borrow_mut() = Some(Kept {
            text: json.into(),
            value: Rc::new(value),
        })
    });
    Ok(())
}

/// Decodes and validates the settings a hook receives.
pub fn load<T: PolicySettings>(json: &str) -> Result<T, PolicyError> {
    tfjob_policy_logic::settings::settings_from_json(json).map_err(PolicyError::InvalidSettings)
}

/// The settings a hook receives: what [`validate`] decoded in this instance when `json` is the
/// same text (a pre-initialised instance), else decoded now as by [`load`].
pub fn load_shared<T: PolicySettings + 'static>(json: &str) -> Result<Rc<T>, PolicyError> {
    let kept = KEPT.with(|kept| {
        kept.borrow()
            .as_ref()
            .filter(|k| *k.text == *json)
            .and_then(|k| Rc::clone(&k.value).downcast::<T>().ok())
    });
    match kept {
        Some(value) => Ok(value),
        None => load(json).map(Rc::new),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Team {
        #[serde(default)]
        team: String,
    }

    impl PolicySettings for Team {
        fn validate(&self) -> Result<(), String> {
            if self.team == "bad" {
                return Err("team: must not be bad".into());
            }
            Ok(())
        }
    }

    #[derive(Debug, Default, Deserialize)]
    struct Other {}

    impl PolicySettings for Other {
        fn validate(&self) -> Result<(), String> {
            Ok(())
        }
    }

    fn forget() {
        KEPT.with(|k| *k.borrow_mut() = None);
    }

    #[test]
    fn a_validated_document_is_reused_for_the_same_text_only() {
        forget();
        validate::<Team>(r#"{"team": "ml"}"#).unwrap();
        let first = load_shared::<Team>(r#"{"team": "ml"}"#).unwrap();
        let again = load_shared::<Team>(r#"{"team": "ml"}"#).unwrap();
        assert!(Rc::ptr_eq(&first, &again), "the kept value is shared");
        assert_eq!(first.team, "ml");
        // Another text, even one meaning the same, is decoded afresh.
        let other = load_shared::<Team>(r#"{"team":"ml"}"#).unwrap();
        assert!(!Rc::ptr_eq(&first, &other));
        assert_eq!(*other, *first);
        let changed = load_shared::<Team>(r#"{"team": "data"}"#).unwrap();
        assert_eq!(changed.team, "data");
    }

    #[test]
    fn nothing_kept_means_decoding_and_errors_as_load() {
        forget();
        assert_eq!(load_shared::<Team>("").unwrap().team, "");
        assert_eq!(
            load_shared::<Team>(r#"{"team": "bad"}"#).unwrap_err(),
            PolicyError::InvalidSettings("team: must not be bad".into())
        );
        // A rejected document replaces nothing.
        validate::<Team>(r#"{"team": "ml"}"#).unwrap();
        assert!(validate::<Team>(r#"{"team": "bad"}"#).is_err());
        assert_eq!(load_shared::<Team>(r#"{"team": "ml"}"#).unwrap().team, "ml");
        assert!(load_shared::<Team>(r#"{"team": "bad"}"#).is_err());
    }

    #[test]
    fn a_kept_value_of_another_type_is_not_used() {
        forget();
        validate::<Other>("{}").unwrap();
        // The same text, read as another type: decoded afresh, with that type's checks.
        assert_eq!(load_shared::<Team>("{}").unwrap().team, "");
    }
}
