//! The pinned versions of the control plane's components, read from
//! `tests/control-plane/versions` (the file the build script reads too): `KEY=VALUE` lines,
//! `#` comments and blank lines.

use std::collections::BTreeMap;
use std::path::Path;

use crate::Error;

/// The versions the binaries are built at, which name the directories they are kept in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    pub kubernetes: String,
    pub etcd: String,
    pub kwok: String,
}

impl Versions {
    /// Reads the versions file at `path`.
    pub fn read(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|reason| Error::Versions {
            path: path.to_owned(),
            reason,
        })
    }

    /// The versions in `text`; an error names the line or the missing key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut values = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {}: expected KEY=VALUE: {line:?}", number + 1));
            };
            let value = value.trim();
            if !value.starts_with('v') || value.len() < 2 {
                return Err(format!(
                    "line {}: {key}: a version is v and a number: {value:?}",
                    number + 1
                ));
            }
            values.insert(key.trim().to_owned(), value.to_owned());
        }
        let mut take = |key: &str| values.remove(key).ok_or_else(|| format!("no {key}= line"));
        Ok(Versions {
            kubernetes: take("KUBERNETES")?,
            etcd: take("ETCD")?,
            kwok: take("KWOK")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projects_file_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/control-plane/versions");
        let versions = Versions::read(&path).unwrap();
        assert!(versions.kubernetes.starts_with("v1."), "{versions:?}");
        assert!(versions.etcd.starts_with("v3."), "{versions:?}");
    }

    #[test]
    fn bad_lines_and_missing_keys_are_named() {
        assert_eq!(
            Versions::parse("KUBERNETES v1.37.2").unwrap_err(),
            "line 1: expected KEY=VALUE: \"KUBERNETES v1.37.2\""
        );
        assert_eq!(
            Versions::parse("# c\nKUBERNETES=1.37\n").unwrap_err(),
            "line 2: KUBERNETES: a version is v and a number: \"1.37\""
        );
        assert_eq!(
            Versions::parse("KUBERNETES=v1.37.2\nKWOK=v0.8.0\n").unwrap_err(),
            "no ETCD= line"
        );
        let ok =
            Versions::parse("KUBERNETES=v1.37.2\nETCD=v3.7.3\nKWOK=v0.8.0\nOTHER=v1\n").unwrap();
        assert_eq!(ok.kwok, "v0.8.0");
    }
}
