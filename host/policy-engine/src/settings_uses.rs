//! Which settings documents the active versions of one compiled module run with, counted.
//!
//! A module keeps a pre-initialised copy per settings document it was activated with (one per
//! CEL document, for the evaluator every CEL policy shares). A copy is worth its memory only
//! while a version runs with that document: each [`crate::registry::ActivePolicy`] holds a
//! [`SettingsUse`] for as long as it lives, and copies for documents nothing uses any more are
//! dropped when unused modules are, so the bound on copies counts documents in use, not every
//! document a module was ever activated with.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};

/// The count of active versions per settings document (by digest) of one module.
#[derive(Debug, Default)]
pub(crate) struct SettingsUses(Mutex<HashMap<[u8; 32], usize>>);

impl SettingsUses {
    /// Counts one more version running with `settings` until the returned use is dropped.
    pub(crate) fn hold(self: &Arc<Self>, settings: &str) -> SettingsUse {
        let key = key(settings);
        *self.counts().entry(key).or_insert(0) += 1;
        SettingsUse {
            uses: Arc::clone(self),
            key,
        }
    }

    /// Whether any version runs with `settings`.
    pub(crate) fn in_use(&self, settings: &str) -> bool {
        self.counts().contains_key(&key(settings))
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], usize>> {
        // The map holds plain counts: a panic elsewhere leaves it consistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One active version's use of its settings document.
pub struct SettingsUse {
    uses: Arc<SettingsUses>,
    key: [u8; 32],
}

impl Drop for SettingsUse {
    fn drop(&mut self) {
        let mut counts = self.uses.counts();
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

impl fmt::Debug for SettingsUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettingsUse").finish_non_exhaustive()
    }
}

fn key(settings: &str) -> [u8; 32] {
    Sha256::digest(settings.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_in_use_while_any_version_holds_it() {
        let uses = Arc::new(SettingsUses::default());
        let first = uses.hold("{\"a\":1}");
        let second = uses.hold("{\"a\":1}");
        assert!(uses.in_use("{\"a\":1}") && !uses.in_use("{\"a\":2}"));
        drop(first);
        assert!(uses.in_use("{\"a\":1}"), "another version still runs it");
        drop(second);
        assert!(!uses.in_use("{\"a\":1}"));
    }
}
