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
//! A policy whose settings are cheaper to apply in another form (quantities parsed, patterns
//! compiled) decodes them once into that form with [`validate_as`] and [`cached_as`]: the
//! converted value is what is kept.
//!
//! A settings type implements [`PolicySettings`]: serde decoding (use `deny_unknown_fields` so
//! misspelt keys are errors) plus `validate` for what serde cannot check. Empty text, `{}` and
//! `null` all mean the defaults.

use std::any::Any;
use std::cell::RefCell;
use std::fmt::Display;
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
    validate_as::<T, T>(json)
}

/// [`validate`] for a policy that applies its settings as an `R`: the document is decoded as a
/// `T`, converted, and the `R` is kept for [`cached_as`]. A failed conversion is the reason.
pub fn validate_as<T, R>(json: &str) -> Result<(), String>
where
    T: PolicySettings,
    R: TryFrom<T> + 'static,
    R::Error: Display,
{
    remember::<T, R>(json).map(|_| ())
}

/// Decodes and validates the settings a hook receives.
pub fn load<T: PolicySettings>(json: &str) -> Result<T, PolicyError> {
    tfjob_policy_logic::settings::settings_from_json(json).map_err(PolicyError::InvalidSettings)
}

/// [`load`], decoding only when `json` is not the text last decoded (by this function or
/// [`validate`]) into a `T`.
pub fn cached<T: PolicySettings + 'static>(json: &str) -> Result<Rc<T>, PolicyError> {
    cached_as::<T, T>(json)
}

/// [`cached`] for settings applied as an `R` (see [`validate_as`]).
pub fn cached_as<T, R>(json: &str) -> Result<Rc<R>, PolicyError>
where
    T: PolicySettings,
    R: TryFrom<T> + 'static,
    R::Error: Display,
{
    remember::<T, R>(json).map_err(PolicyError::InvalidSettings)
}

fn remember<T, R>(json: &str) -> Result<Rc<R>, String>
where
    T: PolicySettings,
    R: TryFrom<T> + 'static,
    R::Error: Display,
{
    let hit = LAST.with_borrow(|last| {
        let (_, value) = last.as_ref().filter(|(text, _)| text == json)?;
        Rc::clone(value).downcast::<R>().ok()
    });
    if let Some(hit) = hit {
        return Ok(hit);
    }
    let decoded = tfjob_policy_logic::settings::settings_from_json::<T>(json)?;
    let value = Rc::new(R::try_from(decoded).map_err(|e| e.to_string())?);
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

    /// `Limits` applied as a ready-made list of allowed values.
    #[derive(Debug)]
    struct Allowed(Vec<u32>);

    impl TryFrom<Limits> for Allowed {
        type Error = String;

        fn try_from(limits: Limits) -> Result<Allowed, String> {
            if limits.max == 0 {
                return Err("max: must not be 0".into());
            }
            Ok(Allowed((0..=limits.max).collect()))
        }
    }

    #[test]
    fn a_converted_document_is_kept_in_its_converted_form() {
        validate_as::<Limits, Allowed>(r#"{"max": 2}"#).unwrap();
        let first = cached_as::<Limits, Allowed>(r#"{"max": 2}"#).unwrap();
        assert_eq!(first.0, [0, 1, 2]);
        assert!(Rc::ptr_eq(
            &first,
            &cached_as::<Limits, Allowed>(r#"{"max": 2}"#).unwrap()
        ));
        // The same text as the unconverted type is decoded as that type.
        assert_eq!(cached::<Limits>(r#"{"max": 2}"#).unwrap().max, 2);
        // Decoding and validation come first, then the conversion; either refusal is the reason.
        assert_eq!(
            validate_as::<Limits, Allowed>(r#"{"max": 11}"#).unwrap_err(),
            "max: must be at most 10"
        );
        assert_eq!(
            cached_as::<Limits, Allowed>(r#"{"max": 0}"#).unwrap_err(),
            PolicyError::InvalidSettings("max: must not be 0".into())
        );
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
