//! One reconcile: take a seat (see [`crate::seats`]), read the job's owned pods and services from
//! the caches, run the pure planner off the async worker threads, execute the plan; and the
//! error policy with per-job backoff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::core::error_boundary::{DeserializeGuard, InvalidObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tfjob_api::TFJob;
use tfjob_planner::call_watch::CallWatch;
use tfjob_planner::kueue::KueueView;
use tfjob_planner::{EventType, JobEvent, PlanInput, plan};
use tracing::Instrument as _;

use crate::context::Context;
use crate::error::Error;
use crate::execute::{CONFLICT_RETRY, Executed, execute, job_reference};
use crate::outcome::Outcome;
use crate::workqueue::QueueKey;

/// Reconciles one TFJob (or reports one that cannot be read), once it has a seat.
///
/// Every request kube-runtime dispatches waits here for its seat, thousands at once when jobs
/// come in bulk, so the waiting future is kept small: the reconcile itself, whose future holds
/// the plan and every write in flight, is allocated only once seated.
pub async fn reconcile(
    guard: Arc<DeserializeGuard<TFJob>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let key = QueueKey::of(kube::Resource::meta(&*guard));
    if !ctx.leadership.is_leading() {
        // A standby: the leader handles the job, and this instance reconciles every job when
        // it takes over. The request leaves the work queue (the worker dropped unfinished)
        // without counting as a reconcile.
        let _worker = ctx.metrics.worker(key);
        return Ok(Action::await_change());
    }
    // While it waits, the request holds the job's reference, not the job: the cache moves on
    // and a copy kept here for every waiting request would be a second cache. The guard is
    // moved in, so the parameter (which an async fn otherwise keeps to its end) holds nothing.
    let span = crate::trace_context::reconcile_span(kube::Resource::meta(&*guard));
    let waiting = Waiting::of(guard, ctx.jobs.is_some());
    let namespace = key.namespace.as_deref().unwrap_or_default();
    let _seat = ctx
        .seats
        .take(namespace)
        .instrument(tracing::span!(
            target: tfjob_planner::SPAN_TARGET,
            parent: &span,
            tracing::Level::DEBUG,
            "seat wait",
            k8s.namespace.name = namespace
        ))
        .await;
    Box::pin(seated(waiting, ctx, key).instrument(span)).await
}

/// What a request waiting for its seat keeps of its job.
enum Waiting {
    /// The job to read afresh from the controller's cache once seated.
    Job(ObjectRef<DeserializeGuard<TFJob>>),
    /// The job as given, in contexts without a cache.
    Given(Arc<DeserializeGuard<TFJob>>),
}

impl Waiting {
    /// What to keep of `guard` while waiting: only its reference when the job can be read
    /// afresh from a cache. `guard` is consumed, and with it this request's hold on the job.
    fn of(guard: Arc<DeserializeGuard<TFJob>>, cached: bool) -> Waiting {
        if cached {
            Waiting::Job(ObjectRef::from_obj(&*guard))
        } else {
            Waiting::Given(guard)
        }
    }
}

/// The reconcile of a request that holds a seat.
async fn seated(waiting: Waiting, ctx: Arc<Context>, key: QueueKey) -> Result<Action, Error> {
    // The request waited in the queue until now: its worker starts here.
    let worker = ctx.metrics.worker(key);
    // The wait may have been long: reconcile the job as it is now, or not at all if it is gone
    // (its pods and services go with it by their owner references).
    let fresh = match (waiting, &ctx.jobs) {
        (Waiting::Job(job), Some(jobs)) => jobs.get(&job),
        (Waiting::Job(_), None) => None,
        (Waiting::Given(guard), _) => Some(guard),
    };
    let Some(guard) = fresh else {
        return Ok(Action::await_change());
    };
    if !ctx.leadership.is_leading() {
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    let _running = ctx.progress.begin(started);
    ctx.metrics.reconcile_started();
    let result = match &guard.0 {
        Ok(job) => reconcile_job(job, &ctx).await,
        Err(invalid) => {
            report_invalid(invalid, &ctx).await;
            Ok(Outcome::Done)
        }
    };
    let span = tracing::Span::current();
    ctx.metrics
        .reconcile_finished(started.elapsed(), crate::trace_context::trace_id_of(&span));
    worker.finished(&result);
    record_outcome(&span, &result);
    result.map(Outcome::into_action)
}

/// Records how the reconcile ended on its span.
fn record_outcome(span: &tracing::Span, result: &Result<Outcome, Error>) {
    match result {
        Ok(outcome) => {
            span.record(
                "outcome",
                match outcome {
                    Outcome::Done => "done",
                    Outcome::RecheckAfter(_) => "recheck",
                    Outcome::Retry(_) => "retry",
                },
            );
            if let Some(after) = outcome.requeue() {
                span.record("requeue_after_ms", after.as_millis() as u64);
            }
        }
        Err(error) => {
            span.record("outcome", error.category());
            span.record("otel.status_code", "ERROR");
        }
    }
}

async fn reconcile_job(job: &TFJob, ctx: &Arc<Context>) -> Result<Outcome, Error> {
    let key = job_key(job);
    let uid = job.uid().unwrap_or_default();
    let pods = ctx.pods_of(&uid);
    let services = ctx.services_of(&uid);
    let pod_group = ctx.gang.as_ref().and_then(|g| g.observed(job));
    let priority_classes = match (&ctx.gang, &ctx.kueue) {
        (Some(g), _) => g.priority_values(),
        (None, Some(k)) => k.priority_values(),
        (None, None) => Default::default(),
    };
    let workload = ctx.kueue.as_ref().and_then(|k| k.observed(job));
    let flavors = ctx.kueue.as_ref().map(|k| k.flavors()).unwrap_or_default();
    let kueue = ctx.kueue.is_some();
    let now = jiff::Timestamp::now();

    // Policies may block (a Wasm guest runs inside them), so the planner runs on the blocking
    // pool, never on the executor's worker threads, and the reconcile stops waiting on a
    // policy call that outlives its bound.
    let planned = {
        let ctx = Arc::clone(ctx);
        let job = job.clone();
        let bound = ctx.policies.call_bound();
        run_watched(bound, move || {
            // One policy snapshot for the whole plan: a swap lands between reconciles.
            let pinned = ctx.policies.pinned();
            plan(&PlanInput {
                job: &job,
                pods: &pods,
                services: &services,
                now,
                settings: &ctx.settings,
                policies: pinned.as_deref().unwrap_or(ctx.policies.as_ref()),
                pod_group: pod_group.as_ref(),
                priority_classes: &priority_classes,
                kueue: kueue.then_some(KueueView {
                    workload: workload.as_ref(),
                    flavors: &flavors,
                }),
            })
        })
        .await
    };
    // A policy that could not decide (or did not return in time) is reported on the job.
    let plan = match planned.and_then(|p| p.map_err(Error::from)) {
        Ok(p) => p,
        Err(e @ Error::PlannerTask(_)) => return Err(e),
        Err(e) => {
            let event = JobEvent::new(
                EventType::Warning,
                "PolicyFailed",
                format!("{e}; will retry"),
                None,
            );
            ctx.publish(&job_reference(job), &event).await;
            return Err(e);
        }
    };
    if let Some(skip) = &plan.skip {
        tracing::debug!(job = %key.1, namespace = %key.0, ?skip, "not reconciling");
        return Ok(Outcome::Done);
    }
    let requeue = plan.requeue_after;
    match execute(ctx, job, plan).await? {
        Executed::Conflict => {
            tracing::debug!(job = %key.1, namespace = %key.0, "status conflict, retrying");
            Ok(Outcome::Retry(CONFLICT_RETRY))
        }
        Executed::Done => {
            ctx.reset_backoff(&key);
            Ok(requeue.map_or(Outcome::Done, Outcome::RecheckAfter))
        }
    }
}

/// Runs `work` on the blocking pool with a [`CallWatch`] attached, and stops waiting when a
/// policy call inside it has run longer than `bound` (the thread is left to finish; see
/// [`tfjob_planner::call_watch`]). Without a bound it simply waits.
async fn run_watched<R: Send + 'static>(
    bound: Option<Duration>,
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, Error> {
    let watch = CallWatch::new();
    let mut task = {
        let watch = watch.clone();
        // The blocking pool's thread does not inherit the reconcile's span; the policy calls
        // inside `work` are its children.
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || span.in_scope(|| watch.attach(work)))
    };
    let Some(bound) = bound else {
        return task.await.map_err(|e| Error::PlannerTask(e.to_string()));
    };
    let mut check = tokio::time::interval(WATCH_INTERVAL.min(bound));
    loop {
        tokio::select! {
            done = &mut task => return done.map_err(|e| Error::PlannerTask(e.to_string())),
            _ = check.tick() => {
                if let Some(running) = watch.overdue(bound) {
                    return Err(Error::PolicyStuck { running, bound });
                }
            }
        }
    }
}

/// How often a waiting reconcile looks at the policy call in progress.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);

/// Error policy: log, count by category and retry the job with exponential backoff.
pub fn error_policy(
    guard: Arc<DeserializeGuard<TFJob>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.reconcile_failed(error.category());
    let key = match &guard.0 {
        Ok(job) => job_key(job),
        Err(invalid) => (
            invalid.metadata.namespace.clone().unwrap_or_default(),
            invalid.metadata.name.clone().unwrap_or_default(),
        ),
    };
    let delay = ctx.next_backoff(key.clone(), error);
    ctx.metrics
        .queue
        .retry_after(kube::Resource::meta(&*guard), delay);
    tracing::warn!(namespace = %key.0, job = %key.1, category = error.category(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// An object that does not deserialise is reported once per resourceVersion and skipped; the
/// watch and every other job go on.
async fn report_invalid(invalid: &InvalidObject, ctx: &Context) {
    let meta = &invalid.metadata;
    tracing::warn!(
        namespace = meta.namespace.as_deref().unwrap_or_default(),
        job = meta.name.as_deref().unwrap_or_default(),
        error = %invalid.error,
        "TFJob cannot be read; skipping it until it changes"
    );
    let reference = ObjectReference {
        api_version: Some("kubeflow.org/v1".into()),
        kind: Some("TFJob".into()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..ObjectReference::default()
    };
    let event = JobEvent::new(
        EventType::Warning,
        "InvalidTFJob",
        format!("TFJob cannot be read: {}", invalid.error),
        Some(format!(
            "{}/{}/InvalidTFJob",
            meta.uid.as_deref().unwrap_or_default(),
            meta.resource_version.as_deref().unwrap_or_default()
        )),
    );
    ctx.publish(&reference, &event).await;
}

fn job_key(job: &TFJob) -> (String, String) {
    (job.namespace().unwrap_or_default(), job.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns, without calling it.
    fn future_size<A, B, F: Future>(_: impl Fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn a_request_waiting_for_its_seat_is_small() {
        let waiting = future_size(reconcile);
        let seated = future_size(|guard: Arc<DeserializeGuard<TFJob>>, ctx: Arc<Context>| {
            let key = QueueKey {
                namespace: None,
                name: String::new(),
            };
            seated(Waiting::Given(guard), ctx, key)
        });
        println!("waiting for a seat: {waiting} bytes; seated: {seated} bytes");
        assert!(waiting <= 512, "{waiting} bytes per waiting request");
        assert!(seated > waiting, "the reconcile itself is boxed apart");
    }

    #[tokio::test]
    async fn a_request_waiting_for_its_seat_does_not_keep_its_job() {
        use crate::owner_index;
        use crate::seats::{SeatLimits, Seats};

        // The request never gets a seat, so the context's client is never called.
        let (pods, _pod_writer) = owner_index::cache();
        let (services, _service_writer) = owner_index::cache();
        let (jobs, _job_writer) = kube::runtime::reflector::store();
        let seats = Seats::new(SeatLimits::new(1));
        let ctx = Arc::new(
            Context::offline(pods, services)
                .with_seats(seats.clone())
                .with_jobs(jobs),
        );
        let _only_seat = seats.take("ml").await;

        let job: TFJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": "a", "namespace": "ml", "uid": "uid-a"},
            "spec": {"tfReplicaSpecs": {}}
        }))
        .expect("a TFJob");
        let guard = Arc::new(DeserializeGuard(Ok(job)));
        let held = Arc::downgrade(&guard);
        let mut request = Box::pin(reconcile(guard, ctx));
        assert!(
            futures::poll!(&mut request).is_pending(),
            "waits for its seat"
        );
        // The cache's copy is the job's only home while the request waits: a waiting request
        // that kept the version it was dispatched with would pin an old copy of every job.
        assert!(
            held.upgrade().is_none(),
            "the waiting request keeps the job"
        );
    }
}
