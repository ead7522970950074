//! What one policy call may read of the cluster, and what it did read.
//!
//! A call's [`CallReads`] holds the policy's grants (see [`crate::cluster_reads`]), whose job
//! the call is about, and the shared [`ClusterCache`]. Each `get` or `list` the guest makes is
//! checked against the grants (resource, namespace, object), bounded ([`ReadBounds`]: reads per
//! call, objects and bytes per answer, bytes per call) and answered from the cache. The first
//! failure is kept: the engine ends the call with its category whatever the guest returns, so
//! no decision rests on an answer the policy did not get. Every answered read is recorded
//! (resource, what was asked, the cache's resourceVersion) for the pod's provenance.

use std::sync::Arc;

use tfjob_policy_logic::label_selector::LabelSelector;

use crate::cluster_cache::{self, ClusterCache, Freshness, Unanswerable};
use crate::cluster_reads::{ReadGrant, ReadScope, Resource};
use crate::error::Category;

/// How much one call may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadBounds {
    /// `get` and `list` calls, answered or not.
    pub reads_per_call: u32,
    /// Objects in one `list` answer.
    pub objects_per_answer: u32,
    /// JSON bytes in one answer.
    pub bytes_per_answer: usize,
    /// JSON bytes across the call's answers.
    pub bytes_per_call: usize,
}

impl Default for ReadBounds {
    /// 64 reads, 1,000 objects and 4 MiB per answer, 16 MiB per call: a policy that looks at
    /// its namespace, a few queues and a thousand nodes fits, one that copies a big cluster
    /// into its memory does not.
    fn default() -> ReadBounds {
        ReadBounds {
            reads_per_call: 64,
            objects_per_answer: 1000,
            bytes_per_answer: 4 << 20,
            bytes_per_call: 16 << 20,
        }
    }
}

/// Why a read gave no answer; its category ends the call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadFailure {
    #[error("read denied: {0}")]
    Denied(String),
    #[error("read unavailable: {0}")]
    Unavailable(String),
    #[error("too many reads: {0}")]
    TooManyReads(String),
    #[error("answer too large: {0}")]
    TooLarge(String),
    #[error("invalid read: {0}")]
    Invalid(String),
}

impl ReadFailure {
    /// The category a call that met this failure ends with.
    pub fn category(&self) -> Category {
        match self {
            ReadFailure::Denied(_) => Category::ReadDenied,
            ReadFailure::Unavailable(_) => Category::Unavailable,
            ReadFailure::TooManyReads(_) | ReadFailure::TooLarge(_) => Category::ReadLimit,
            ReadFailure::Invalid(_) => Category::ReadInvalid,
        }
    }
}

impl From<Unanswerable> for ReadFailure {
    fn from(e: Unanswerable) -> ReadFailure {
        ReadFailure::Unavailable(e.to_string())
    }
}

/// One answered read, as the pod's provenance records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadRecord {
    pub resource: Resource,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name (`get`) or the label selector (`list`, `?` then the selector).
    pub what: String,
    /// Objects answered.
    pub objects: usize,
    /// A `get`'s object's own resourceVersion (the cache's when there was none); a `list`'s,
    /// the cache's when it answered.
    pub resource_version: String,
}

/// Where the reads of calls are written down as they are answered, e.g. for `policy test` to
/// show what a case read.
pub type ReadJournal = Arc<std::sync::Mutex<Vec<ReadRecord>>>;

/// Who is reading: the policy's grants, and the job and policy the call is about.
#[derive(Clone, Debug)]
pub struct Reader {
    pub grants: Arc<[ReadGrant]>,
    /// The namespace of the job the call is about.
    pub job_namespace: String,
    /// The name of that job (a policy reads its own TFJob only).
    pub job_name: String,
    /// The namespace the policy is confined to, if it is.
    pub policy_namespace: Option<String>,
    pub cache: Arc<ClusterCache>,
    pub bounds: ReadBounds,
    /// Also written to, when set.
    pub journal: Option<ReadJournal>,
}

impl Reader {
    /// A reader granted nothing: every read is denied.
    pub fn nothing() -> Reader {
        Reader {
            grants: Arc::from([]),
            job_namespace: String::new(),
            job_name: String::new(),
            policy_namespace: None,
            cache: Arc::default(),
            bounds: ReadBounds::default(),
            journal: None,
        }
    }
}

/// The reads of one call.
#[derive(Debug)]
pub struct CallReads {
    reader: Reader,
    reads: u32,
    bytes: usize,
    failure: Option<ReadFailure>,
    records: Vec<ReadRecord>,
}

/// A `get` answered.
pub type Got = (Option<Arc<str>>, Freshness);
/// A `list` answered: items, whether more matched, freshness.
pub type Listed = (Vec<Arc<str>>, bool, Freshness);

impl CallReads {
    pub fn new(reader: Reader) -> CallReads {
        CallReads {
            reader,
            reads: 0,
            bytes: 0,
            failure: None,
            records: Vec::new(),
        }
    }

    /// The first read that failed, if any.
    pub fn failure(&self) -> Option<&ReadFailure> {
        self.failure.as_ref()
    }

    /// What the call read, in order.
    pub fn records(&self) -> &[ReadRecord] {
        &self.records
    }

    /// Reads one object.
    pub fn get(&mut self, resource: &str, namespace: &str, name: &str) -> Result<Got, ReadFailure> {
        let result = self.try_get(resource, namespace, name);
        self.keep(result)
    }

    /// Lists objects matching `selector`, at most `limit` (0: every match, within the bound).
    pub fn list(
        &mut self,
        resource: &str,
        namespace: &str,
        selector: &str,
        limit: u32,
    ) -> Result<Listed, ReadFailure> {
        let result = self.try_list(resource, namespace, selector, limit);
        self.keep(result)
    }

    fn record(&mut self, record: ReadRecord) {
        if let Some(journal) = &self.reader.journal {
            journal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(record.clone());
        }
        self.records.push(record);
    }

    fn keep<T>(&mut self, result: Result<T, ReadFailure>) -> Result<T, ReadFailure> {
        if let Err(e) = &result
            && self.failure.is_none()
        {
            self.failure = Some(e.clone());
        }
        result
    }

    fn try_get(&mut self, resource: &str, namespace: &str, name: &str) -> Result<Got, ReadFailure> {
        self.count()?;
        let (resource, grant) = self.granted(resource, namespace)?;
        if name.is_empty() || name.len() > 253 {
            return Err(ReadFailure::Invalid(format!(
                "get of {resource}: a name is 1 to 253 characters"
            )));
        }
        if !self.may_see(grant, namespace, name) {
            return Err(ReadFailure::Denied(self.only_own(grant)));
        }
        let shared = self.reader.cache.resource(resource)?;
        let (found, freshness) = cluster_cache::read(&shared).get(namespace, name)?;
        let size = found.as_ref().map_or(0, |c| c.json.len());
        self.charge(resource, size)?;
        self.record(ReadRecord {
            resource,
            namespace: namespace.to_owned(),
            what: name.to_owned(),
            objects: usize::from(found.is_some()),
            // The object's own version when it exists; the cache's, at which it did not.
            resource_version: found.as_ref().map_or_else(
                || freshness.resource_version.clone(),
                |c| c.resource_version.clone(),
            ),
        });
        Ok((found.map(|c| c.json), freshness))
    }

    fn try_list(
        &mut self,
        resource: &str,
        namespace: &str,
        selector: &str,
        limit: u32,
    ) -> Result<Listed, ReadFailure> {
        self.count()?;
        let (resource, grant) = self.granted(resource, namespace)?;
        let parsed = LabelSelector::parse(selector)
            .map_err(|e| ReadFailure::Invalid(format!("list of {resource}: {e}")))?;
        let bound = self.reader.bounds.objects_per_answer;
        let most = if limit == 0 { bound } else { limit.min(bound) };
        let shared = self.reader.cache.resource(resource)?;
        let (items, more, freshness) = cluster_cache::read(&shared).list(
            (!namespace.is_empty()).then_some(namespace),
            &parsed,
            |ns, name| self.may_see(grant, ns, name),
            most as usize,
        )?;
        if more && (limit == 0 || limit > bound) {
            return Err(ReadFailure::TooLarge(format!(
                "list of {resource} matched more than {bound} objects, the most one answer \
                 holds: narrow the selector or pass a limit"
            )));
        }
        let size = items.iter().map(|i| i.len()).sum();
        self.charge(resource, size)?;
        self.record(ReadRecord {
            resource,
            namespace: namespace.to_owned(),
            what: format!("?{parsed}"),
            objects: items.len(),
            resource_version: freshness.resource_version.clone(),
        });
        Ok((items, more, freshness))
    }

    fn count(&mut self) -> Result<(), ReadFailure> {
        if self.reads >= self.reader.bounds.reads_per_call {
            return Err(ReadFailure::TooManyReads(format!(
                "a call may make {} reads",
                self.reader.bounds.reads_per_call
            )));
        }
        self.reads += 1;
        Ok(())
    }

    fn charge(&mut self, resource: Resource, size: usize) -> Result<(), ReadFailure> {
        let bounds = self.reader.bounds;
        if size > bounds.bytes_per_answer {
            return Err(ReadFailure::TooLarge(format!(
                "the answer of {resource} is {size} bytes; one answer holds at most {}",
                bounds.bytes_per_answer
            )));
        }
        if self.bytes.saturating_add(size) > bounds.bytes_per_call {
            return Err(ReadFailure::TooLarge(format!(
                "the call's answers would reach {} bytes; a call reads at most {}",
                self.bytes.saturating_add(size),
                bounds.bytes_per_call
            )));
        }
        self.bytes += size;
        Ok(())
    }

    /// The grant that lets this call read `resource` in `namespace`.
    fn granted(
        &self,
        resource: &str,
        namespace: &str,
    ) -> Result<(Resource, ReadGrant), ReadFailure> {
        let shown = tfjob_policy_logic::text::elided(resource, 64);
        let parsed = Resource::parse(resource).map_err(ReadFailure::Denied)?;
        let of_resource = || {
            self.reader
                .grants
                .iter()
                .filter(move |g| g.resource == parsed)
        };
        if of_resource().next().is_none() {
            let granted: Vec<String> = self.reader.grants.iter().map(ToString::to_string).collect();
            return Err(ReadFailure::Denied(format!(
                "{shown} is not among the policy's granted reads ({}); declare it under the \
                 manifest's reads",
                if granted.is_empty() {
                    "none".to_owned()
                } else {
                    granted.join(", ")
                }
            )));
        }
        if !parsed.is_namespaced() {
            if !namespace.is_empty() {
                return Err(ReadFailure::Invalid(format!(
                    "{parsed} is cluster-scoped: pass an empty namespace"
                )));
            }
            let grant = of_resource().next().copied().expect("found above");
            return Ok((parsed, grant));
        }
        if namespace.is_empty() {
            return Err(ReadFailure::Invalid(format!(
                "{parsed} is namespaced: pass the namespace to read"
            )));
        }
        of_resource()
            .find(|g| self.scope_namespace(g.scope) == Some(namespace))
            .map(|g| (parsed, *g))
            .ok_or_else(|| {
                let scopes: Vec<String> = of_resource().map(ToString::to_string).collect();
                ReadFailure::Denied(format!(
                    "{parsed} of namespace {:?} is not readable: the policy was granted {}",
                    tfjob_policy_logic::text::elided(namespace, 64),
                    scopes.join(", ")
                ))
            })
    }

    /// The namespace a scope stands for in this call.
    fn scope_namespace(&self, scope: Option<ReadScope>) -> Option<&str> {
        match scope? {
            ReadScope::JobNamespace => Some(&self.reader.job_namespace),
            ReadScope::PolicyNamespace => self.reader.policy_namespace.as_deref(),
        }
    }

    /// Whether `grant` covers the object `name` (a confined policy's own Namespace, the job's
    /// own TFJob).
    fn may_see(&self, grant: ReadGrant, _namespace: &str, name: &str) -> bool {
        if grant.own_namespace_only {
            return self.reader.policy_namespace.as_deref() == Some(name);
        }
        if grant.resource == Resource::TfJobs {
            return name == self.reader.job_name;
        }
        true
    }

    fn only_own(&self, grant: ReadGrant) -> String {
        if grant.resource == Resource::TfJobs {
            format!(
                "a policy reads its job's own TFJob only ({})",
                self.reader.job_name
            )
        } else {
            format!(
                "a policy confined to namespace {} reads its own Namespace object only",
                self.reader.policy_namespace.as_deref().unwrap_or_default()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::cluster_cache::ResourceCache;
    use crate::cluster_reads::{ReadCeiling, ReadDeclaration};

    fn grants(
        declared: &[(&str, Option<ReadScope>)],
        confined_to: Option<&str>,
    ) -> Arc<[ReadGrant]> {
        let declared: Vec<ReadDeclaration> = declared
            .iter()
            .map(|(r, s)| ReadDeclaration {
                resource: (*r).into(),
                scope: *s,
            })
            .collect();
        ReadCeiling::everything()
            .grant(&declared, confined_to)
            .unwrap()
            .into()
    }

    fn named(ns: &str, name: &str, labels: Value) -> Value {
        let mut metadata = json!({"name": name, "labels": labels, "resourceVersion": "7"});
        if !ns.is_empty() {
            metadata["namespace"] = json!(ns);
        }
        json!({ "metadata": metadata })
    }

    fn cache() -> Arc<ClusterCache> {
        Arc::new(ClusterCache::of([
            ResourceCache::of(
                Resource::Namespaces,
                100,
                ["team-a", "team-b", "vision"].map(|n| named("", n, json!({"team": n}))),
            ),
            ResourceCache::of(
                Resource::Nodes,
                100,
                (0..20).map(|i| {
                    named(
                        "",
                        &format!("node-{i:02}"),
                        json!({"pool": if i < 5 { "gpu" } else { "cpu" }}),
                    )
                }),
            ),
            ResourceCache::of(
                Resource::ConfigMaps,
                100,
                [
                    named("team-a", "limits", json!({})),
                    named("team-b", "limits", json!({})),
                ],
            ),
            ResourceCache::of(
                Resource::TfJobs,
                100,
                [
                    named("team-a", "mnist", json!({})),
                    named("team-a", "other", json!({})),
                ],
            ),
        ]))
    }

    fn reads(grants: Arc<[ReadGrant]>, policy_namespace: Option<&str>) -> CallReads {
        CallReads::new(Reader {
            grants,
            job_namespace: "team-a".into(),
            job_name: "mnist".into(),
            policy_namespace: policy_namespace.map(Into::into),
            cache: cache(),
            bounds: ReadBounds::default(),
            journal: None,
        })
    }

    #[test]
    fn granted_reads_are_answered_and_recorded() {
        let mut r = reads(grants(&[("namespaces", None), ("nodes", None)], None), None);
        let (ns, freshness) = r.get("namespaces", "", "vision").unwrap();
        assert!(ns.unwrap().contains("\"team\":\"vision\""));
        assert!(freshness.synced);
        assert!(r.get("namespaces", "", "missing").unwrap().0.is_none());
        let (items, more, _) = r.list("nodes", "", "pool=gpu", 0).unwrap();
        assert_eq!((items.len(), more), (5, false));
        assert_eq!(r.failure(), None);
        let what: Vec<&str> = r.records().iter().map(|r| r.what.as_str()).collect();
        assert_eq!(what, ["vision", "missing", "?pool=gpu"]);
        assert_eq!(r.records()[2].objects, 5);
        assert_eq!(r.records()[2].resource_version, "7");
    }

    #[test]
    fn what_was_not_granted_is_denied_and_the_first_failure_is_kept() {
        let mut r = reads(grants(&[("namespaces", None)], None), None);
        let err = r.get("nodes", "", "node-00").unwrap_err();
        assert_eq!(err.category(), Category::ReadDenied);
        assert!(
            err.to_string()
                .contains("nodes is not among the policy's granted reads (namespaces)"),
            "{err}"
        );
        let secrets = r.get("secrets", "team-a", "token").unwrap_err();
        assert!(
            secrets.to_string().contains("holds credentials"),
            "{secrets}"
        );
        assert_eq!(r.failure(), Some(&err), "the first failure is the call's");
        assert!(r.records().is_empty());
    }

    #[test]
    fn a_namespaced_read_is_of_its_granted_namespace_only() {
        let mut r = reads(
            grants(&[("configmaps", Some(ReadScope::JobNamespace))], None),
            None,
        );
        assert!(r.get("configmaps", "team-a", "limits").unwrap().0.is_some());
        let other = r.get("configmaps", "team-b", "limits").unwrap_err();
        assert_eq!(other.category(), Category::ReadDenied, "{other}");
        assert!(
            other.to_string().contains("configmaps(job-namespace)"),
            "{other}"
        );
        let unnamed = r.get("configmaps", "", "limits").unwrap_err();
        assert_eq!(unnamed.category(), Category::ReadInvalid, "{unnamed}");
        let (items, _, _) = r.list("configmaps", "team-a", "", 0).unwrap();
        assert_eq!(items.len(), 1);
    }

    #[test]
    fn a_confined_policy_reads_its_own_namespace_object_only() {
        let confined = grants(&[("namespaces", None)], Some("team-a"));
        let mut r = reads(confined.clone(), Some("team-a"));
        assert!(r.get("namespaces", "", "team-a").unwrap().0.is_some());
        let (items, _, _) = reads(confined.clone(), Some("team-a"))
            .list("namespaces", "", "", 0)
            .unwrap();
        assert_eq!(items.len(), 1, "a list shows the own namespace only");
        let err = r.get("namespaces", "", "team-b").unwrap_err();
        assert!(
            err.to_string().contains("its own Namespace object only"),
            "{err}"
        );
    }

    #[test]
    fn a_policy_reads_its_own_tfjob_only() {
        let mut r = reads(
            grants(&[("tfjobs", Some(ReadScope::JobNamespace))], None),
            None,
        );
        assert!(r.get("tfjobs", "team-a", "mnist").unwrap().0.is_some());
        assert_eq!(r.list("tfjobs", "team-a", "", 0).unwrap().0.len(), 1);
        assert_eq!(
            r.get("tfjobs", "team-a", "other").unwrap_err().category(),
            Category::ReadDenied
        );
    }

    #[test]
    fn the_bounds_of_a_call_end_it_with_read_limit() {
        let granted = grants(&[("nodes", None)], None);
        let mut r = reads(granted.clone(), None);
        r.reader.bounds.reads_per_call = 3;
        for _ in 0..3 {
            r.get("nodes", "", "node-00").unwrap();
        }
        let err = r.get("nodes", "", "node-00").unwrap_err();
        assert!(matches!(err, ReadFailure::TooManyReads(_)), "{err}");
        assert_eq!(err.category(), Category::ReadLimit);

        let mut r = reads(granted.clone(), None);
        r.reader.bounds.objects_per_answer = 10;
        let (items, more, _) = r.list("nodes", "", "", 4).unwrap();
        assert_eq!(
            (items.len(), more),
            (4, true),
            "a limit the caller chose says more"
        );
        let err = r.list("nodes", "", "", 0).unwrap_err();
        assert!(
            err.to_string().contains("matched more than 10 objects"),
            "{err}"
        );
        assert!(
            r.list("nodes", "", "", 50).is_err(),
            "a limit above the bound is no way around it"
        );

        let mut r = reads(granted.clone(), None);
        r.reader.bounds.bytes_per_answer = 100;
        assert!(matches!(
            r.list("nodes", "", "", 0).unwrap_err(),
            ReadFailure::TooLarge(_)
        ));

        let mut r = reads(granted, None);
        let one = r.get("nodes", "", "node-00").unwrap().0.unwrap().len();
        r.reader.bounds.bytes_per_call = one * 2;
        r.get("nodes", "", "node-01").unwrap();
        let err = r.get("nodes", "", "node-02").unwrap_err();
        assert!(err.to_string().contains("a call reads at most"), "{err}");
    }

    #[test]
    fn malformed_requests_are_invalid_and_name_what() {
        let mut r = reads(grants(&[("nodes", None)], None), None);
        for (err, names) in [
            (
                r.list("nodes", "", "pool in gpu", 0).unwrap_err(),
                "parentheses",
            ),
            (
                r.list("nodes", "", &"a=b,".repeat(5000), 0).unwrap_err(),
                "at most 4096",
            ),
            (r.get("nodes", "", "").unwrap_err(), "1 to 253"),
            (
                r.get("nodes", "", &"n".repeat(300)).unwrap_err(),
                "1 to 253",
            ),
            (
                r.get("nodes", "team-a", "node-00").unwrap_err(),
                "cluster-scoped",
            ),
        ] {
            assert_eq!(err.category(), Category::ReadInvalid, "{err}");
            assert!(err.to_string().contains(names), "{err}");
        }
        let huge = "é".repeat(10_000);
        let err = r.get(&huge, "", "x").unwrap_err();
        assert!(
            err.to_string().len() < 1000,
            "a huge resource name is not echoed whole"
        );
    }

    #[test]
    fn reads_of_a_cache_not_synced_or_not_running_are_unavailable() {
        let mut r = reads(grants(&[("nodes", None), ("namespaces", None)], None), None);
        r.reader.cache = Arc::new(ClusterCache::of([ResourceCache::new(Resource::Nodes, 10)]));
        let err = r.get("nodes", "", "node-00").unwrap_err();
        assert_eq!(err.category(), Category::Unavailable);
        assert!(err.to_string().contains("has not synced yet"), "{err}");
        let err = r.list("namespaces", "", "", 0).unwrap_err();
        assert!(
            err.to_string()
                .contains("no cache of namespaces is running"),
            "{err}"
        );
    }
}
