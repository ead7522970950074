//! Reading TFJobs from YAML or JSON text, with errors that name the document and field path.

use serde::Deserialize;

use crate::TFJob;

/// A document that is not a TFJob.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("document {document}: not valid YAML: {source}")]
    Syntax {
        document: usize,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("document {document}: {path}: {message}")]
    Field {
        document: usize,
        path: String,
        message: String,
    },
    #[error("document {document}: kind is {found:?}, expected kubeflow.org/v1 TFJob")]
    WrongKind { document: usize, found: String },
}

/// Parses one TFJob from YAML (JSON is YAML too). Used by tests and single-document callers.
pub fn parse_tfjob_yaml(text: &str) -> Result<TFJob, ParseError> {
    let value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|source| ParseError::Syntax {
            document: 1,
            source,
        })?;
    tfjob_from_value(value, 1)
}

/// Parses every non-empty document of a multi-document YAML stream (1-based document numbers in
/// errors). A document that fails does not stop the others from being read.
pub fn parse_tfjob_documents(text: &str) -> Vec<Result<TFJob, ParseError>> {
    let mut results = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let document = i + 1;
        match serde_yaml_ng::Value::deserialize(doc) {
            Ok(serde_yaml_ng::Value::Null) => {}
            Ok(value) => results.push(tfjob_from_value(value, document)),
            Err(source) => {
                // After a syntax error the YAML stream cannot be resynchronised (the
                // deserializer would repeat the error forever), so reading stops here.
                results.push(Err(ParseError::Syntax { document, source }));
                break;
            }
        }
    }
    results
}

fn tfjob_from_value(value: serde_yaml_ng::Value, document: usize) -> Result<TFJob, ParseError> {
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let api_version = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    // Manifests without apiVersion/kind are accepted as TFJobs (handy for tests and `render`);
    // a manifest that names another kind is a mistake worth reporting.
    if (!kind.is_empty() && kind != "TFJob")
        || (!api_version.is_empty() && api_version != "kubeflow.org/v1")
    {
        return Err(ParseError::WrongKind {
            document,
            found: format!("{api_version} {kind}").trim().to_owned(),
        });
    }
    serde_path_to_error::deserialize(value).map_err(|e| ParseError::Field {
        document,
        path: kubernetes_path(&e.path().to_string()),
        message: e.into_inner().to_string(),
    })
}

/// Writes replica type keys the way validation errors do: `spec.tfReplicaSpecs[Worker]`.
fn kubernetes_path(path: &str) -> String {
    const MAP: &str = "spec.tfReplicaSpecs.";
    match path.strip_prefix(MAP) {
        Some(rest) => {
            let (key, tail) = rest.split_once('.').map_or((rest, ""), |(k, t)| (k, t));
            let tail = if tail.is_empty() {
                String::new()
            } else {
                format!(".{tail}")
            };
            format!("spec.tfReplicaSpecs[{key}]{tail}")
        }
        None => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_enum_value_names_the_field() {
        let err = parse_tfjob_yaml(
            "metadata: {name: a}\nspec:\n  tfReplicaSpecs:\n    Worker:\n      restartPolicy: Sometimes\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("spec.tfReplicaSpecs[Worker].restartPolicy"),
            "{text}"
        );
        assert!(text.contains("Sometimes"), "{text}");
    }

    #[test]
    fn multi_document_streams_keep_going_after_a_bad_document() {
        let docs = parse_tfjob_documents(
            "metadata: {name: a}\nspec: {}\n---\nkind: Pod\napiVersion: v1\n---\n---\nmetadata: {name: b}\nspec: {}\n",
        );
        assert_eq!(docs.len(), 3);
        assert!(docs[0].is_ok());
        assert!(matches!(
            docs[1],
            Err(ParseError::WrongKind { document: 2, .. })
        ));
        assert_eq!(
            docs[2].as_ref().unwrap().metadata.name.as_deref(),
            Some("b")
        );
    }

    #[test]
    fn a_syntax_error_ends_the_stream_instead_of_repeating_forever() {
        for text in [
            "[",
            "spec: [unclosed\n",
            "metadata: {name: a}\nspec: {}\n---\n{",
        ] {
            let docs = parse_tfjob_documents(text);
            assert!(
                matches!(docs.last(), Some(Err(ParseError::Syntax { .. }))),
                "{text:?}"
            );
            assert!(docs.len() <= 2, "{text:?}");
        }
    }

    #[test]
    fn unknown_pod_template_fields_are_accepted() {
        let job = parse_tfjob_yaml(
            r#"
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: a}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          someFutureField: {x: 1}
          containers: [{name: tensorflow, image: t, futureContainerField: true}]
"#,
        )
        .unwrap();
        assert_eq!(job.spec.tf_replica_specs.len(), 1);
    }
}
