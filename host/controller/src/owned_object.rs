//! Writing an object a job owns beside its pods and services (its PodGroup, its Kueue
//! Workload): creating it from the planner's JSON with the job's events saying how it went, and
//! what a write of it led to. A create that finds the object there already is no error: an
//! earlier reconcile made it and the cache does not show it yet.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;
use tfjob_planner::{EventType, JobEvent};

use crate::context::Context;
use crate::error::Error;

/// What applying a change to an owned object led to.
pub enum Applied {
    Done,
    /// The stored object changed since it was cached; look again shortly.
    Conflict,
}

/// The events a create publishes on its job.
pub struct CreateEvents<F> {
    /// Reason and message when the object is created.
    pub created: (&'static str, String),
    /// Reason when the API refuses it, and its message from the error.
    pub failed: (&'static str, F),
}

/// Creates `object` (named `what` in errors) through `api`, publishing `events` on the job.
/// Returns whether this call created it (false: it was there already).
pub async fn create<F: FnOnce(&kube::Error) -> String>(
    ctx: &Context,
    api: &Api<DynamicObject>,
    reference: &ObjectReference,
    object: &Value,
    what: &str,
    events: CreateEvents<F>,
) -> Result<bool, Error> {
    let object: DynamicObject = serde_json::from_value(object.clone())
        .map_err(|e| Error::Internal(format!("{what}: {e}")))?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {
            let (reason, message) = events.created;
            let event = JobEvent::new(EventType::Normal, reason, message, None);
            ctx.publish(reference, &event).await;
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
        Err(e) => {
            // The API's own validation (a CRD's rules) speaks here: say it on the job.
            let (reason, message) = events.failed;
            let event = JobEvent::new(EventType::Warning, reason, message(&e), None);
            ctx.publish(reference, &event).await;
            Err(Error::kube(format!("creating {what}"), e))
        }
    }
}
