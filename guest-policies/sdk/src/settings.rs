//! Settings documents: decoding, defaults and validation, for `validate-settings` and the hooks.
//!
//! The operator validates a policy's settings once, through the `settings` export, before it
//! activates the policy, and then passes the same document to every hook call. A hook still
//! checks it and reports a bad document as `policy-error::invalid-settings`, but it need not
//! decode it again: [`validate`] and [`cached`] keep the last document they decoded, and
//! [`cached`] returns it while the text is the same. Every call runs in a fresh instance, so
//! the copy lasts one call, unless the operator pre-initialises the component: it then runs
//! `validate-settings` once per policy version and starts every later instance from a
//! snapshot of the memory after it, in which the decoded settings are already held.
//!
//! A settings type implements [`PolicySettings`]: serde decoding (use `deny_unknown_fields` so
//! misspelt keys are errors) plus `validate` for what serde cannot check. Empty text, `{}` and
//! `null` all mean the defaults.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;

pub use tfjob_policy_logic::settings::PolicySettings;

use crate::wit::PolicyError;

thread_local! {
    /// The last document decoded by [`validate`] or [`cached`]: its text and its value. One
    /// entry, since a component receives one settings document per policy version.
    static LAST: RefCell<Option<(String, Rc<dyn Any>)>> = const { RefCell::new(None) };
}

/// Implements `validate-settings`: `Ok` or the reason, naming the field. A valid document is
/// kept for [`cached`].
pub fn validate<T: PolicySettings + 'static>(json: &str) -> Result<(), String> {
    remember::<T>(json).map(|_| ())
}

/// Decodes and validates the settings a hook receives.
pub fn load<T: PolicySettings>(json: &str) -> Result<T, PolicyError> {
    tfjob_policy_logic::settings::settings_from_json(json).map_err(PolicyError::InvalidSettings)
}

/// [`load`], decoding only when `json` is not the text last decoded (by this function or
/// [`validate`]) into a `T`.
pub fn cached<T: PolicySettings + 'static>(json: &str) -> Result<Rc<T>, PolicyError> {
    remember::<T>(json).map_err(PolicyError::InvalidSettings)
}

fn remember<T: PolicySettings + 'static>(json: &str) -> Result<Rc<T>, String> {
    let hit = LAST.with_borrow(|last| {
        let (_, value) = last.as_ref().filter(|(text, _)| text == json)?;
        Rc::clone(value).downcast::<T>().ok()
    });
    if let Some(hit) = hit {
        return Ok(hit);
    }
    let value = Rc::new(tfjob_policy_logic::settings::settings_from_json::<T>(json)?);
    LAST.set(Some((json.to_owned(), Rc::clone(&value) as Rc<dyn Any>)));
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Default, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Limits {
        #[serde(default)]
        max: u32,
    }

    impl PolicySettings for Limits {
        fn validate(&self) -> Result<(), String> {
            if self.max > 10 {
                return Err("max: must be at most 10".into());
            }
            Ok(())
        }
    }

    #[derive(serde::Deserialize, Default, Debug)]
    struct Other {}

    impl PolicySettings for Other {
        fn validate(&self) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn the_same_text_is_decoded_once_and_other_text_again() {
        validate::<Limits>(r#"{"max": 3}"#).unwrap();
        let first = cached::<Limits>(r#"{"max": 3}"#).unwrap();
        let again = cached::<Limits>(r#"{"max": 3}"#).unwrap();
        assert!(Rc::ptr_eq(&first, &again), "kept from validate");
        assert_eq!(first.max, 3);

        let other = cached::<Limits>(r#"{"max": 4}"#).unwrap();
        assert_eq!(other.max, 4);
        // The same text read as another type is decoded as that type, not handed out as the
        // first one.
        cached::<Other>(r#"{"max": 4}"#).unwrap();
        assert_eq!(cached::<Limits>(r#"{"max": 4}"#).unwrap().max, 4);
    }

    #[test]
    fn a_bad_document_is_an_error_every_time_and_keeps_nothing() {
        let good = cached::<Limits>("{}").unwrap();
        for _ in 0..2 {
            assert_eq!(
                cached::<Limits>(r#"{"max": 11}"#).unwrap_err(),
                PolicyError::InvalidSettings("max: must be at most 10".into())
            );
        }
        assert!(validate::<Limits>(r#"{"mux": 1}"#).is_err());
        assert!(Rc::ptr_eq(&good, &cached::<Limits>("{}").unwrap()));
    }
}
