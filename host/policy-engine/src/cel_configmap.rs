//! Policies written in CEL and delivered as ConfigMaps: no module, a document.
//!
//! A policy ConfigMap may carry, under `data` key `policy.cel.yaml`, a CEL document in
//! `MutatingAdmissionPolicy`'s shape (see `guest-policies/cel/src/document.rs`) in place of a
//! module. The operator runs it with the CEL evaluator it ships
//! ([`crate::defaults::CEL_POLICY_WASM`]), the document being that component's settings, so a
//! CEL policy goes through the same sandbox, guard, breakers, shares and status as any other;
//! and since the evaluator's code is compiled once per operator, a new version of a document
//! compiles no Wasm.
//!
//! The manifest (`data` key `policy.yaml`) is optional here and says what it says for a module
//! (name, order, mode, selector, allowed paths, capabilities, reads, limits), but for what the
//! document decides: the hooks are those it has parts for (`mutations` → decorate,
//! `resourceMutations` → resources, `verdicts` → classify), its settings are the document, its
//! `failurePolicy` may be the document's (as upstream's spec has it), and a document that names
//! `namespaceObject` declares the read of namespaces. Setting `hooks`, `settings` or `sha256` in
//! the manifest is refused, naming the field, so no one wonders which of two places counts.
//!
//! A signature (`data` key `policy.cel.yaml.sig`, base64) covers the document's text exactly as
//! stored. Everything here is pure and synchronous; the document's expressions are compiled
//! in the sandbox, by the evaluator's `validate-settings`, never by the operator itself.

use serde_yaml_ng::{Mapping, Value};

use crate::cluster_reads::ReadDeclaration;
use crate::engine::Hook;
use crate::registry::{ManifestError, PolicyManifest};
use crate::signature::{SignatureError, Signed, TrustedKeys};

/// `data` key of a CEL document.
pub const CEL_KEY: &str = "policy.cel.yaml";
/// `data` key of the CEL document's signature: base64, over the document's text.
pub const CEL_SIGNATURE_KEY: &str = "policy.cel.yaml.sig";

/// The document's parts and the hooks they serve, in the contract's order.
const PARTS: [(&str, Hook); 3] = [
    ("mutations", Hook::Decorate),
    ("resourceMutations", Hook::Resources),
    ("verdicts", Hook::Classify),
];

/// Manifest fields the document decides.
const DECIDED_BY_THE_DOCUMENT: [(&str, &str); 3] = [
    (
        "hooks",
        "a CEL policy's hooks are the parts its document has (mutations, resourceMutations, verdicts)",
    ),
    ("settings", "a CEL policy's settings are its document"),
    (
        "sha256",
        "a CEL policy runs the operator's own evaluator; sign the document instead",
    ),
];

/// Why a CEL policy ConfigMap was not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CelSourceError {
    /// The document is not YAML, not a mapping, or has nothing to do.
    #[error("data key {CEL_KEY}: {0}")]
    Document(String),
    /// The manifest is not valid, or sets what the document decides.
    #[error("data key policy.yaml: {0}")]
    Manifest(ManifestError),
    #[error(
        "unsigned: {CEL_SIGNATURE_KEY} is missing; the operator loads only policies signed by \
         one of its trusted keys ({keys} configured){hint}"
    )]
    Unsigned { keys: usize, hint: &'static str },
    #[error("{CEL_SIGNATURE_KEY}: {0}")]
    Signature(SignatureError),
}

/// A CEL policy as read from its ConfigMap's text: the manifest it amounts to (hooks, settings
/// and reads filled in from the document) and what is known of its signature.
#[derive(Clone, Debug, PartialEq)]
pub struct CelSource {
    pub manifest: PolicyManifest,
    pub signed: Signed,
}

/// Reads a CEL policy: `document` (the text under [`CEL_KEY`]), `manifest` (under
/// `policy.yaml`, if any) and `signature` (under [`CEL_SIGNATURE_KEY`], if any), checked
/// against `keys` first when there are any. `default_name` names a policy whose manifest does
/// not.
pub fn read(
    document: &str,
    manifest: Option<&str>,
    signature: Option<&str>,
    keys: &TrustedKeys,
    default_name: &str,
) -> Result<CelSource, CelSourceError> {
    let signed = check_signature(document, signature, keys)?;
    Ok(CelSource {
        manifest: manifest_for(document, manifest, default_name)?,
        signed,
    })
}

/// The manifest a CEL policy amounts to; see the module's documentation.
pub fn manifest_for(
    document: &str,
    manifest: Option<&str>,
    default_name: &str,
) -> Result<PolicyManifest, CelSourceError> {
    let mut settings = parse_document(document)?;
    let hooks: Vec<Value> = PARTS
        .iter()
        .filter(|(part, _)| has_entries(&settings, part))
        .map(|(_, hook)| Value::from(hook.as_str()))
        .collect();
    if hooks.is_empty() {
        return Err(CelSourceError::Document(
            "has no mutations, resourceMutations or verdicts: a CEL policy needs at least one \
             of them to do anything"
                .into(),
        ));
    }
    let failure_policy = settings.remove("failurePolicy");

    let mut fields = match manifest {
        None => Mapping::new(),
        Some(text) => match serde_yaml_ng::from_str::<Value>(text) {
            Ok(Value::Mapping(m)) => m,
            Ok(Value::Null) => Mapping::new(),
            Ok(_) => return Err(manifest_error(".", "must be a mapping".into())),
            Err(e) => return Err(manifest_error(".", format!("not valid YAML: {e}"))),
        },
    };
    for (field, why) in DECIDED_BY_THE_DOCUMENT {
        if fields.contains_key(field) {
            return Err(manifest_error(field, format!("must not be set: {why}")));
        }
    }
    if let Some(policy) = failure_policy {
        if fields.contains_key("failurePolicy") {
            return Err(manifest_error(
                "failurePolicy",
                format!("is set in both this manifest and {CEL_KEY}; keep one"),
            ));
        }
        fields.insert("failurePolicy".into(), policy);
    }
    fields.insert("hooks".into(), Value::Sequence(hooks));
    if names_the_namespace(document) {
        declare_namespace_read(&mut fields)?;
    }
    fields.insert("settings".into(), Value::Mapping(settings));
    PolicyManifest::from_value(Value::Mapping(fields), default_name)
        .map_err(CelSourceError::Manifest)
}

/// The document as a mapping, or why it is not one. Its fields are checked by the evaluator's
/// `validate-settings`, which names them; here only what the manifest needs.
fn parse_document(document: &str) -> Result<Mapping, CelSourceError> {
    match serde_yaml_ng::from_str::<Value>(document) {
        Ok(Value::Mapping(m)) => Ok(m),
        Ok(Value::Null) => Err(CelSourceError::Document("is empty".into())),
        Ok(_) => Err(CelSourceError::Document(
            "must be a mapping (matchConditions, variables, mutations, ...)".into(),
        )),
        Err(e) => Err(CelSourceError::Document(format!("not valid YAML: {e}"))),
    }
}

/// Whether the document's `part` is a list with at least one entry. A part of another type is
/// taken as present, so that the evaluator names its error rather than the policy silently
/// losing a hook.
fn has_entries(document: &Mapping, part: &str) -> bool {
    match document.get(part) {
        None | Some(Value::Null) => false,
        Some(Value::Sequence(entries)) => !entries.is_empty(),
        Some(_) => true,
    }
}

/// Whether an expression of `document` may name `namespaceObject`. Read from the text, not the
/// parsed expressions: the operator compiles no expression of a policy outside the sandbox, and
/// a read declared but not made costs nothing (the evaluator reads only what its compiled
/// expressions name).
fn names_the_namespace(document: &str) -> bool {
    document.contains("namespaceObject")
}

/// Adds `{resource: namespaces}` to the manifest's `reads` unless it is there.
fn declare_namespace_read(fields: &mut Mapping) -> Result<(), CelSourceError> {
    let reads = fields
        .entry("reads".into())
        .or_insert_with(|| Value::Sequence(Vec::new()));
    let Value::Sequence(entries) = reads else {
        return Err(manifest_error("reads", "must be a list".into()));
    };
    let declared = entries.iter().any(|entry| {
        serde_yaml_ng::from_value::<ReadDeclaration>(entry.clone())
            .is_ok_and(|d| d.resource == "namespaces")
    });
    if !declared {
        let mut entry = Mapping::new();
        entry.insert("resource".into(), "namespaces".into());
        entries.push(Value::Mapping(entry));
    }
    Ok(())
}

fn check_signature(
    document: &str,
    signature: Option<&str>,
    keys: &TrustedKeys,
) -> Result<Signed, CelSourceError> {
    if keys.is_empty() {
        return Ok(match signature {
            Some(_) => Signed::Unverified,
            None => Signed::No,
        });
    }
    let Some(signature) = signature else {
        return Err(CelSourceError::Unsigned {
            keys: keys.len(),
            hint: "",
        });
    };
    keys.verify(document.as_bytes(), signature)
        .map(Signed::By)
        .map_err(CelSourceError::Signature)
}

/// The unsigned error with the hint that the signature is under `binaryData`.
pub(crate) fn misplaced_signature(keys: &TrustedKeys) -> CelSourceError {
    CelSourceError::Unsigned {
        keys: keys.len(),
        hint: " (it is under binaryData; it belongs under data, as base64 text)",
    }
}

fn manifest_error(field: &str, message: String) -> CelSourceError {
    CelSourceError::Manifest(ManifestError {
        field: field.into(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::FailurePolicy;

    const TOLERATION: &str = r#"
mutations:
- patchType: JSONPatch
  jsonPatch:
    expression: "[JSONPatch{op: 'add', path: '/spec/tolerations/-', value: {'key': 'gpu', 'operator': 'Exists'}}]"
"#;

    fn manifest(document: &str, manifest: Option<&str>) -> Result<PolicyManifest, CelSourceError> {
        manifest_for(document, manifest, "from-the-name")
    }

    #[test]
    fn hooks_are_the_parts_the_document_has() {
        let m = manifest(TOLERATION, None).unwrap();
        assert_eq!(m.hooks, vec![Hook::Decorate]);
        assert_eq!(m.name, "from-the-name");
        assert_eq!(m.settings["mutations"][0]["patchType"], "JSONPatch");

        let all = "mutations: [{patchType: JSONPatch, jsonPatch: {expression: '[]'}}]\n\
                   resourceMutations: [{patchType: JSONPatch, jsonPatch: {expression: '[]'}}]\n\
                   verdicts: [{condition: 'true', phase: running}]\n";
        let m = manifest(all, None).unwrap();
        assert_eq!(
            m.hooks,
            vec![Hook::Decorate, Hook::Resources, Hook::Classify]
        );

        let none = "matchConditions: [{name: a, expression: 'true'}]\nmutations: []\n";
        let err = manifest(none, None).unwrap_err().to_string();
        assert!(
            err.starts_with("data key policy.cel.yaml: has no mutations"),
            "{err}"
        );
    }

    #[test]
    fn a_part_of_the_wrong_type_is_left_to_the_evaluator_to_name() {
        let m = manifest("verdicts: {condition: 'true'}\n", None).unwrap();
        assert_eq!(m.hooks, vec![Hook::Classify]);
    }

    #[test]
    fn the_manifest_keeps_its_own_fields_and_may_not_set_what_the_document_decides() {
        let m = manifest(TOLERATION, Some("name: gpu\norder: 5\nmode: Shadow\n")).unwrap();
        assert_eq!((m.name.as_str(), m.order), ("gpu", 5));
        for field in ["hooks: [decorate]", "settings: {}", "sha256: abc"] {
            let err = manifest(TOLERATION, Some(field)).unwrap_err().to_string();
            let name = field.split(':').next().unwrap();
            assert!(
                err.starts_with(&format!(
                    "data key policy.yaml: manifest field {name}: must not be set"
                )),
                "{err}"
            );
        }
        let err = manifest(TOLERATION, Some("order: ["))
            .unwrap_err()
            .to_string();
        assert!(err.contains("manifest field .: not valid YAML"), "{err}");
        let err = manifest(TOLERATION, Some("ordr: 1"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("ordr"), "{err}");
    }

    #[test]
    fn failure_policy_is_taken_from_the_document_and_not_passed_to_the_evaluator() {
        let document = format!("failurePolicy: Ignore\n{TOLERATION}");
        let m = manifest(&document, None).unwrap();
        assert_eq!(m.failure_policy, FailurePolicy::Ignore);
        assert!(m.settings.get("failurePolicy").is_none());
        let m = manifest(TOLERATION, Some("failurePolicy: Ignore")).unwrap();
        assert_eq!(m.failure_policy, FailurePolicy::Ignore);
        let err = manifest(&document, Some("failurePolicy: Fail"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("failurePolicy: is set in both"), "{err}");
        let err = manifest(
            &("failurePolicy: Sometimes\n".to_owned() + TOLERATION),
            None,
        );
        assert!(err.unwrap_err().to_string().contains("failurePolicy"));
    }

    #[test]
    fn naming_the_namespace_declares_its_read_once() {
        let document = "mutations:\n- patchType: ApplyConfiguration\n  applyConfiguration:\n    \
                        expression: \"Object{metadata: Object.metadata{labels: \
                        namespaceObject.metadata.labels}}\"\n";
        let m = manifest(document, None).unwrap();
        assert_eq!(m.reads.len(), 1);
        assert_eq!(m.reads[0].resource, "namespaces");
        let m = manifest(
            document,
            Some("reads: [{resource: namespaces}, {resource: nodes}]"),
        )
        .unwrap();
        assert_eq!(m.reads.len(), 2);
        assert!(manifest(TOLERATION, None).unwrap().reads.is_empty());
        let err = manifest(document, Some("reads: nodes"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("manifest field reads: must be a list"),
            "{err}"
        );
    }

    #[test]
    fn documents_that_are_not_mappings_are_named() {
        for (document, expected) in [
            ("", "is empty"),
            ("- a\n- b\n", "must be a mapping"),
            ("mutations: [", "not valid YAML"),
        ] {
            let err = manifest(document, None).unwrap_err().to_string();
            assert!(
                err.starts_with("data key policy.cel.yaml: ") && err.contains(expected),
                "{err}"
            );
        }
    }

    #[test]
    fn with_trusted_keys_the_document_must_be_signed() {
        let (key, keys) = crate::signature::test_keys::signer("platform");
        let signature = key.sign(TOLERATION.as_bytes());
        let source = read(TOLERATION, None, Some(&signature), &keys, "p").unwrap();
        assert_eq!(source.signed, Signed::By(key.public_key().id().clone()));

        let err = read(TOLERATION, None, None, &keys, "p").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unsigned: policy.cel.yaml.sig is missing")
        );
        let edited = format!("{TOLERATION}# edited\n");
        let err = read(&edited, None, Some(&signature), &keys, "p").unwrap_err();
        assert!(matches!(
            err,
            CelSourceError::Signature(SignatureError::NoMatch { .. })
        ));

        let none = TrustedKeys::none();
        assert_eq!(
            read(TOLERATION, None, Some("x"), &none, "p")
                .unwrap()
                .signed,
            Signed::Unverified
        );
        assert_eq!(
            read(TOLERATION, None, None, &none, "p").unwrap().signed,
            Signed::No
        );
    }
}
