//! Paths into a JSON document, written as the guard writes them or as JSON Pointers.

use std::fmt;

use serde_json::Value;

/// One step of a [`JsonPath`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A path into a JSON document, written as the guard writes them (`spec.containers[0].env`,
/// `metadata.labels["example.com/team"]`; brackets without quotes also take a key) or as a
/// JSON Pointer (`/spec/containers/0/env`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JsonPath(pub Vec<Segment>);

impl JsonPath {
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        if text.is_empty() {
            return Err("empty path (`result` compares the whole result)".into());
        }
        if let Some(pointer) = text.strip_prefix('/') {
            let segments = pointer
                .split('/')
                .map(|s| Segment::Key(s.replace("~1", "/").replace("~0", "~")))
                .collect();
            return Ok(JsonPath(segments));
        }
        let chars: Vec<char> = text.chars().collect();
        let mut segments = Vec::new();
        let mut i = 0;
        let mut expect_key = true;
        while i < chars.len() {
            match chars[i] {
                '[' => {
                    let (segment, next) =
                        bracket(&chars, i).map_err(|e| format!("{text:?}: {e}"))?;
                    segments.push(segment);
                    i = next;
                    expect_key = false;
                }
                '.' if !expect_key => {
                    i += 1;
                    expect_key = true;
                    if i == chars.len() {
                        return Err(format!("{text:?}: ends with `.`"));
                    }
                }
                '.' => return Err(format!("{text:?}: empty field name at offset {i}")),
                ']' => return Err(format!("{text:?}: `]` without `[` at offset {i}")),
                _ if expect_key => {
                    let start = i;
                    while i < chars.len() && !matches!(chars[i], '.' | '[' | ']') {
                        i += 1;
                    }
                    segments.push(Segment::Key(chars[start..i].iter().collect()));
                    expect_key = false;
                }
                c => return Err(format!("{text:?}: expected `.` or `[` before {c:?}")),
            }
        }
        Ok(JsonPath(segments))
    }

    /// The value at the path, if there is one. A key step into an array takes an index (as a
    /// JSON Pointer writes them).
    pub fn get<'a>(&self, mut value: &'a Value) -> Option<&'a Value> {
        for segment in &self.0 {
            value = match (segment, value) {
                (Segment::Key(k), Value::Object(m)) => m.get(k)?,
                (Segment::Key(k), Value::Array(a)) => a.get(k.parse::<usize>().ok()?)?,
                (Segment::Index(i), Value::Array(a)) => a.get(*i)?,
                _ => return None,
            };
        }
        Some(value)
    }

    pub(crate) fn child(&self, segment: Segment) -> JsonPath {
        let mut segments = self.0.clone();
        segments.push(segment);
        JsonPath(segments)
    }
}

/// A `[...]` step starting at `chars[start]`: `[3]`, `["a.b"]` (a JSON string) or `[a.b]`.
/// Returns the step and where the text goes on.
pub(crate) fn bracket(chars: &[char], start: usize) -> Result<(Segment, usize), String> {
    let mut i = start + 1;
    if chars.get(i) == Some(&'"') {
        // A JSON string: up to the first quote not escaped by a backslash.
        let mut j = i + 1;
        while j < chars.len() && chars[j] != '"' {
            j += if chars[j] == '\\' { 2 } else { 1 };
        }
        if chars.get(j + 1) != Some(&']') {
            return Err(format!("unterminated `[\"` at offset {start}"));
        }
        let quoted: String = chars[i..=j].iter().collect();
        let key: String = serde_json::from_str(&quoted)
            .map_err(|e| format!("{quoted} at offset {start} is not a JSON string: {e}"))?;
        return Ok((Segment::Key(key), j + 2));
    }
    while i < chars.len() && chars[i] != ']' {
        i += 1;
    }
    if i == chars.len() {
        return Err(format!("`[` at offset {start} is not closed"));
    }
    let inner: String = chars[start + 1..i].iter().collect();
    if inner.is_empty() {
        return Err(format!("empty `[]` at offset {start}"));
    }
    let segment = match inner.parse::<usize>() {
        Ok(n) if inner.bytes().all(|b| b.is_ascii_digit()) => Segment::Index(n),
        _ => Segment::Key(inner),
    };
    Ok((segment, i + 1))
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(result)");
        }
        for (n, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Index(i) => write!(f, "[{i}]")?,
                Segment::Key(k) if plain_key(k) => {
                    if n > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => write!(f, "[{}]", Value::from(k.as_str()))?,
            }
        }
        Ok(())
    }
}

/// Whether a key can be written without brackets and read back as the same key.
pub(crate) fn plain_key(k: &str) -> bool {
    !k.is_empty()
        && !k.bytes().all(|b| b.is_ascii_digit())
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
