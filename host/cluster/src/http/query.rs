//! Query parameters as a Kubernetes API server decodes them.
//!
//! A real API server turns a request's query into its options types (`ListOptions`,
//! `CreateOptions`, `DeleteOptions`, `PodLogOptions`, ...) with apimachinery's parameter codec,
//! then validates them. Every handler here reads its options through this module, so a request
//! means the same thing whichever client spelled it:
//! - a boolean is false when absent, `0` or `false` in any letter case, and true for any other
//!   value, the empty one included (`watch=True` from the Python client, `watch=1`, a bare
//!   `watch`): apimachinery's `Convert_Slice_string_To_bool`, not Go's `strconv.ParseBool`;
//! - an integer that does not parse is a `400 BadRequest` in Go's `strconv` words;
//! - an option with a closed set of values (`dryRun`, `propagationPolicy`, `fieldValidation`,
//!   `resourceVersionMatch`) or a forbidden combination is a `422 Invalid` of the options kind
//!   (`ListOptions.meta.k8s.io "" is invalid: ...`), as the server's validation answers.
//!
//! Parsing and validation are pure; the server applies what they return.

use crate::error::{ApiError, StatusCause};

/// The decoded pairs of a query string, in order; a key may repeat (`dryRun=All&dryRun=All`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// The pairs of `raw` (the part after `?`), percent-decoded, `+` read as a space.
    pub fn parse(raw: Option<&str>) -> Query {
        let pairs = raw
            .unwrap_or_default()
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (decode(k), decode(v))
            })
            .collect();
        Query { pairs }
    }

    /// The first value of `key`, as the codec reads single-valued options.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of `key` unless it is empty.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// Every value of `key`, in order.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean option: absent, `0` and `false` (any case) are false, anything else true.
    pub fn flag(&self, key: &str) -> bool {
        self.optional_flag(key).unwrap_or(false)
    }

    /// A boolean option that means something different when absent (`sendInitialEvents`).
    pub fn optional_flag(&self, key: &str) -> Option<bool> {
        self.get(key)
            .map(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
    }

    /// An integer option; absent or empty is none, anything else must parse as a 64-bit integer.
    pub fn integer(&self, key: &str) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.text(key) else {
            return Ok(None);
        };
        v.parse::<i64>().map(Some).map_err(|e| {
            let why = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                    "value out of range"
                }
                _ => "invalid syntax",
            };
            ApiError::bad_request(format!("{key}: strconv.ParseInt: parsing {v:?}: {why}"))
        })
    }
}

/// Percent-decoding of one query component (selectors hold `=`, `,`, `!`, spaces and
/// parentheses); a `%` not followed by two hex digits is kept as it is.
pub fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%' && i + 3 <= bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (hex, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The options of a list or watch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    pub label_selector: String,
    pub field_selector: String,
    pub watch: bool,
    pub allow_watch_bookmarks: bool,
    /// `resourceVersion`, if given and not empty.
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub timeout_seconds: Option<i64>,
    /// At most this many items (none or not positive: all of them).
    pub limit: Option<i64>,
    pub continue_token: Option<String>,
    /// For a watch: whether to start with the current objects and a bookmark marking their end.
    pub send_initial_events: Option<bool>,
}

impl ListOptions {
    /// Reads and validates the options of a list or watch.
    pub fn from_query(q: &Query) -> Result<ListOptions, ApiError> {
        let options = ListOptions {
            label_selector: q.get("labelSelector").unwrap_or_default().to_owned(),
            field_selector: q.get("fieldSelector").unwrap_or_default().to_owned(),
            watch: q.flag("watch"),
            allow_watch_bookmarks: q.flag("allowWatchBookmarks"),
            resource_version: q.text("resourceVersion").map(str::to_owned),
            resource_version_match: q.text("resourceVersionMatch").map(str::to_owned),
            timeout_seconds: q.integer("timeoutSeconds")?,
            limit: q.integer("limit")?,
            continue_token: q.text("continue").map(str::to_owned),
            send_initial_events: q.optional_flag("sendInitialEvents"),
        };
        let causes = options.problems();
        if causes.is_empty() {
            Ok(options)
        } else {
            Err(invalid_options("ListOptions", causes))
        }
    }

    /// What the API server's `ValidateListOptions` refuses.
    fn problems(&self) -> Vec<StatusCause> {
        let mut causes = Vec::new();
        let matching = self.resource_version_match.as_deref();
        if self.watch {
            if self.send_initial_events.is_some() && matching != Some(NOT_OLDER_THAN) {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if let Some(m) = matching {
                if self.send_initial_events.is_none() {
                    causes.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != NOT_OLDER_THAN {
                    causes.push(not_supported("resourceVersionMatch", m, &[NOT_OLDER_THAN]));
                }
                if self.continue_token.is_some() {
                    causes.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
            return causes;
        }
        if let Some(m) = matching {
            if self.resource_version.is_none() {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if self.continue_token.is_some() {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != EXACT && m != NOT_OLDER_THAN {
                causes.push(not_supported(
                    "resourceVersionMatch",
                    m,
                    &[EXACT, NOT_OLDER_THAN, ""],
                ));
            }
            if m == EXACT && self.resource_version.as_deref() == Some("0") {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events.is_some() {
            causes.push(forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        causes
    }

    /// The resourceVersion a watch starts after; `None` (no version, or `0`) starts with the
    /// current objects.
    pub fn watch_from(&self) -> Result<Option<u64>, ApiError> {
        match self.resource_version.as_deref() {
            None | Some("0") => Ok(None),
            Some(rv) => rv.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!("invalid resourceVersion {rv:?}: not a number"))
            }),
        }
    }
}

const EXACT: &str = "Exact";
const NOT_OLDER_THAN: &str = "NotOlderThan";

/// The options of a create, update or patch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// `dryRun=All`: everything but storing the change.
    pub dry_run: bool,
    pub field_manager: Option<String>,
    pub field_validation: Option<String>,
    /// `force=true`: a server-side apply takes over the fields others own.
    pub force: bool,
}

/// Which write the options are for, as the options kind is named in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Create,
    Update,
    Patch,
}

impl Write {
    fn options_kind(self) -> &'static str {
        match self {
            Write::Create => "CreateOptions",
            Write::Update => "UpdateOptions",
            Write::Patch => "PatchOptions",
        }
    }
}

/// The longest field manager a server accepts.
const FIELD_MANAGER_MAX: usize = 128;

impl WriteOptions {
    /// Reads and validates the options of a write.
    pub fn from_query(q: &Query, write: Write) -> Result<WriteOptions, ApiError> {
        let mut causes = dry_run_problems(q);
        let field_manager = q.text("fieldManager").map(str::to_owned);
        if let Some(manager) = &field_manager {
            if manager.len() > FIELD_MANAGER_MAX {
                causes.push(StatusCause {
                    reason: "FieldValueTooLong".into(),
                    field: "fieldManager".into(),
                    message: format!("Too long: may not be more than {FIELD_MANAGER_MAX} bytes"),
                });
            }
            if manager.chars().any(|c| !(' '..='~').contains(&c)) {
                causes.push(StatusCause {
                    reason: "FieldValueInvalid".into(),
                    field: "fieldManager".into(),
                    message: format!(
                        "Invalid value: {manager:?}: must only contain printable characters"
                    ),
                });
            }
        }
        let field_validation = q.text("fieldValidation").map(str::to_owned);
        if let Some(v) = field_validation.as_deref()
            && !["Ignore", "Warn", "Strict"].contains(&v)
        {
            causes.push(not_supported(
                "fieldValidation",
                v,
                &["", "Ignore", "Strict", "Warn"],
            ));
        }
        if causes.is_empty() {
            Ok(WriteOptions {
                dry_run: q.get("dryRun").is_some(),
                field_manager,
                field_validation,
                force: q.text("force") == Some("true"),
            })
        } else {
            Err(invalid_options(write.options_kind(), causes))
        }
    }
}

/// The query's part of a delete's options; the body's `DeleteOptions` come first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteQuery {
    pub dry_run: bool,
    pub propagation_policy: Option<String>,
    pub orphan_dependents: Option<bool>,
    pub grace_period_seconds: Option<i64>,
}

impl DeleteQuery {
    /// Reads the delete options of the query; the values are validated with the body's.
    pub fn from_query(q: &Query) -> Result<DeleteQuery, ApiError> {
        let causes = dry_run_problems(q);
        if !causes.is_empty() {
            return Err(invalid_options("DeleteOptions", causes));
        }
        Ok(DeleteQuery {
            dry_run: q.get("dryRun").is_some(),
            propagation_policy: q.text("propagationPolicy").map(str::to_owned),
            orphan_dependents: q
                .get("orphanDependents")
                .map(|_| q.flag("orphanDependents")),
            grace_period_seconds: q.integer("gracePeriodSeconds")?,
        })
    }
}

/// `dryRun` takes only `All` (repeatable); an empty value counts as not given.
fn dry_run_problems(q: &Query) -> Vec<StatusCause> {
    let values: Vec<&str> = q.all("dryRun").collect();
    if values.iter().all(|v| *v == "All") || values == [""] {
        return Vec::new();
    }
    let listed: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    vec![StatusCause {
        reason: "FieldValueNotSupported".into(),
        field: "dryRun".into(),
        message: format!(
            "Unsupported value: []string{{{}}}: supported values: \"All\"",
            listed.join(", ")
        ),
    }]
}

/// A `422 Invalid` of an options kind of `meta.k8s.io`, as the server names it.
pub fn invalid_options(kind: &str, causes: Vec<StatusCause>) -> ApiError {
    ApiError::invalid_fields(
        &format!("{kind}.meta.k8s.io"),
        "meta.k8s.io",
        kind,
        "",
        causes,
    )
}

fn forbidden(field: &str, detail: &str) -> StatusCause {
    StatusCause {
        reason: "FieldValueForbidden".into(),
        field: field.into(),
        message: format!("Forbidden: {detail}"),
    }
}

/// `field: Unsupported value: "v": supported values: "a", "b"`.
pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> StatusCause {
    let listed: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    StatusCause {
        reason: "FieldValueNotSupported".into(),
        field: field.into(),
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            listed.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(raw: &str) -> Query {
        Query::parse(Some(raw))
    }

    #[test]
    fn booleans_are_read_as_the_api_server_reads_them() {
        for truthy in [
            "watch=true",
            "watch=True",
            "watch=TRUE",
            "watch=1",
            "watch=t",
            "watch=yes",
            "watch=",
            "watch",
        ] {
            assert!(q(truthy).flag("watch"), "{truthy}");
        }
        for falsy in [
            "",
            "watch=false",
            "watch=False",
            "watch=FALSE",
            "watch=0",
            "x=1",
        ] {
            assert!(!q(falsy).flag("watch"), "{falsy}");
        }
        assert_eq!(
            q("sendInitialEvents=false").optional_flag("sendInitialEvents"),
            Some(false)
        );
        assert_eq!(q("").optional_flag("sendInitialEvents"), None);
    }

    #[test]
    fn integers_that_do_not_parse_are_bad_requests_naming_the_parameter() {
        assert_eq!(q("limit=5").integer("limit").unwrap(), Some(5));
        assert_eq!(q("limit=").integer("limit").unwrap(), None);
        for (raw, why) in [
            ("limit=five", "invalid syntax"),
            ("limit=1e3", "invalid syntax"),
            ("limit=99999999999999999999", "value out of range"),
            ("limit=%E2%82%AC", "invalid syntax"),
        ] {
            let e = q(raw).integer("limit").unwrap_err();
            assert_eq!((e.code, e.reason), (400, "BadRequest"), "{raw}");
            assert!(e.message.starts_with("limit: strconv.ParseInt"), "{e}");
            assert!(e.message.ends_with(why), "{e}");
        }
        let e = ListOptions::from_query(&q("watch=1&timeoutSeconds=soon")).unwrap_err();
        assert!(e.message.contains("timeoutSeconds"), "{e}");
    }

    #[test]
    fn values_are_percent_decoded_and_the_first_one_counts() {
        let query = q("labelSelector=app%3Dx%2Ctier+in+%28a%2Cb%29&limit=2&limit=3&bad=100%");
        assert_eq!(query.get("labelSelector"), Some("app=x,tier in (a,b)"));
        assert_eq!(query.integer("limit").unwrap(), Some(2));
        assert_eq!(query.get("bad"), Some("100%"));
        assert_eq!(decode("%E2%82%AC"), "€");
    }

    #[test]
    fn list_options_are_validated_as_the_api_server_validates_them() {
        let ok = ListOptions::from_query(&q(
            "watch=True&allowWatchBookmarks=1&resourceVersion=7&timeoutSeconds=5",
        ))
        .unwrap();
        assert!(ok.watch && ok.allow_watch_bookmarks);
        assert_eq!(ok.watch_from().unwrap(), Some(7));
        assert_eq!(ok.timeout_seconds, Some(5));

        let e = ListOptions::from_query(&q("resourceVersionMatch=Exact")).unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
             resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
        let e = ListOptions::from_query(&q("resourceVersion=3&resourceVersionMatch=Newest"))
            .unwrap_err();
        assert!(
            e.message.contains(
                "Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\""
            ),
            "{e}"
        );
        let e = ListOptions::from_query(&q("sendInitialEvents=true")).unwrap_err();
        assert!(
            e.message
                .contains("sendInitialEvents is forbidden for list"),
            "{e}"
        );
        let e = ListOptions::from_query(&q("watch=1&sendInitialEvents=true")).unwrap_err();
        assert!(
            e.message.contains("requires setting resourceVersionMatch"),
            "{e}"
        );
        ListOptions::from_query(&q(
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        ))
        .unwrap();
        let e = ListOptions::from_query(&q("watch=1&resourceVersion=abc"))
            .unwrap()
            .watch_from()
            .unwrap_err();
        assert_eq!(e.code, 400);
    }

    #[test]
    fn write_options_refuse_what_the_api_server_refuses() {
        let ok = WriteOptions::from_query(
            &q("dryRun=All&fieldManager=kubectl-client-side-apply&fieldValidation=Strict"),
            Write::Create,
        )
        .unwrap();
        assert!(ok.dry_run);
        assert!(
            !WriteOptions::from_query(&q(""), Write::Create)
                .unwrap()
                .dry_run
        );

        let e = WriteOptions::from_query(&q("dryRun=Some"), Write::Create).unwrap_err();
        assert_eq!(
            e.message,
            "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: \
             []string{\"Some\"}: supported values: \"All\""
        );
        let long = "m".repeat(129);
        let e = WriteOptions::from_query(&q(&format!("fieldManager={long}")), Write::Patch)
            .unwrap_err();
        assert!(e.message.starts_with("PatchOptions.meta.k8s.io"), "{e}");
        assert!(e.message.contains("fieldManager: Too long"), "{e}");
        let e = WriteOptions::from_query(&q("fieldManager=a%0Ab"), Write::Update).unwrap_err();
        assert!(e.message.contains("printable"), "{e}");
        let e = WriteOptions::from_query(&q("fieldValidation=Loose"), Write::Update).unwrap_err();
        assert!(
            e.message.contains("fieldValidation: Unsupported value"),
            "{e}"
        );
    }

    #[test]
    fn delete_options_of_the_query() {
        let d = DeleteQuery::from_query(&q(
            "propagationPolicy=Foreground&gracePeriodSeconds=0&orphanDependents=False&dryRun=All",
        ))
        .unwrap();
        assert_eq!(
            d,
            DeleteQuery {
                dry_run: true,
                propagation_policy: Some("Foreground".into()),
                orphan_dependents: Some(false),
                grace_period_seconds: Some(0),
            }
        );
        assert_eq!(
            DeleteQuery::from_query(&q("gracePeriodSeconds=x"))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            DeleteQuery::from_query(&q("dryRun=x")).unwrap_err().code,
            422
        );
    }
}
