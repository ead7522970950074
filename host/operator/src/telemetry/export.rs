//! [`BoundedExport`]: the span processor between the operator's spans and the OTLP exporter,
//! built so that a collector that is down, slow or never answers costs a reconcile nothing.
//!
//! Ending a span only offers it to a bounded queue: when the queue is full the span is dropped
//! and counted, never waited for. One thread of its own, with its own single-threaded Tokio
//! runtime, takes spans off the queue in batches and exports each batch within a timeout; a
//! batch refused, failed or timed out is counted as dropped too. The thread is woken when a
//! whole batch waits, by its timer, or by a flush, never for one span: at some forty spans a
//! job, a wake per span was a context switch per span on an operator already short of CPU. The SDK's own batch processor
//! does the same but keeps its drop count to itself, and the count is what tells an SRE that
//! traces have holes (`tfjob_operator_trace_spans_dropped_total`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, mpsc};

/// How many spans went out and how many were lost, shared with `/metrics`.
///
/// One per process ([`span_counts`]): the `tracing` subscriber the spans come through is
/// process-wide, and so is what its exporter loses, whichever operator (one `run`, or an
/// embedded cluster's) serves the metrics.
#[derive(Clone, Debug, Default)]
pub struct SpanCounts {
    pub exported: Counter,
    pub dropped: Counter,
}

impl SpanCounts {
    /// Registers `tfjob_operator_trace_spans_{exported,dropped}_total`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tfjob_operator_trace_spans_exported",
            "Spans the OTLP collector accepted",
            self.exported.clone(),
        );
        registry.register(
            "tfjob_operator_trace_spans_dropped",
            "Spans lost: ended while the export queue was full, or in a batch the collector \
             refused, failed or did not answer in time",
            self.dropped.clone(),
        );
    }
}

/// This process's span counts.
pub fn span_counts() -> &'static SpanCounts {
    static COUNTS: std::sync::LazyLock<SpanCounts> = std::sync::LazyLock::new(SpanCounts::default);
    &COUNTS
}

/// How the export thread batches.
#[derive(Clone, Copy, Debug)]
pub struct ExportSettings {
    /// Spans waiting at most.
    pub queue_size: usize,
    /// Spans per export request at most.
    pub batch_size: usize,
    /// A partial batch waits at most this long.
    pub interval: Duration,
    /// One export request may take this long before its spans are counted as dropped.
    pub timeout: Duration,
}

impl ExportSettings {
    /// The SDK specification's batch defaults (512 spans, 5 s), with the queue given.
    pub fn with_queue(queue_size: usize, timeout: Duration) -> ExportSettings {
        ExportSettings {
            queue_size,
            batch_size: queue_size.min(512),
            interval: Duration::from_secs(5),
            timeout,
        }
    }
}

/// A request to the export thread besides spans.
enum Control {
    /// Export everything queued, then answer.
    Flush(std::sync::mpsc::SyncSender<()>),
    /// Export everything queued, shut the exporter down, answer and stop.
    Shutdown(std::sync::mpsc::SyncSender<()>),
}

/// The export thread could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExportStartError {
    #[error("cannot start the span export thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
}

/// Ended spans waiting for the export thread, at most `capacity` of them.
#[derive(Debug)]
struct Queue {
    state: Mutex<Queued>,
    capacity: usize,
    batch_size: usize,
    /// Notified when a whole batch waits.
    batch_ready: Notify,
}

#[derive(Debug, Default)]
struct Queued {
    spans: VecDeque<SpanData>,
    /// The export thread has stopped: nothing queued now would ever leave.
    closed: bool,
}

impl Queue {
    fn new(settings: ExportSettings) -> Queue {
        Queue {
            state: Mutex::default(),
            capacity: settings.queue_size.max(1),
            batch_size: settings.batch_size.max(1),
            batch_ready: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, Queued> {
        // The state is a queue of finished spans; one left by a panic is still a queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `span`; false, and the span is gone, when the queue is full or closed.
    fn offer(&self, span: SpanData) -> bool {
        let mut state = self.state();
        if state.closed || state.spans.len() >= self.capacity {
            return false;
        }
        state.spans.push_back(span);
        let batch_ready = state.spans.len() == self.batch_size;
        drop(state);
        if batch_ready {
            self.batch_ready.notify_one();
        }
        true
    }

    /// The oldest spans, at most a batch, if at least `at_least` wait.
    fn take(&self, at_least: usize) -> Option<Vec<SpanData>> {
        let mut state = self.state();
        if state.spans.is_empty() || state.spans.len() < at_least {
            return None;
        }
        let n = state.spans.len().min(self.batch_size);
        Some(state.spans.drain(..n).collect())
    }

    /// Closes the queue; returns how many spans it still held, now dropped.
    fn close(&self) -> usize {
        let mut state = self.state();
        state.closed = true;
        std::mem::take(&mut state.spans).len()
    }
}

/// A span processor with a bounded queue and one export thread; see the module documentation.
#[derive(Debug)]
pub struct BoundedExport {
    queue: Arc<Queue>,
    control: mpsc::UnboundedSender<Control>,
    counts: SpanCounts,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl BoundedExport {
    /// Starts the export thread, which builds its exporter with `build` inside its own runtime
    /// (gRPC channels belong to the runtime they are made on) and gives it `resource`.
    pub fn start<E, F>(
        build: F,
        resource: Resource,
        settings: ExportSettings,
        counts: SpanCounts,
    ) -> Result<BoundedExport, ExportStartError>
    where
        E: SpanExporter + 'static,
        F: FnOnce() -> Result<E, String> + Send + 'static,
    {
        let queue = Arc::new(Queue::new(settings));
        let queued = Arc::clone(&queue);
        let (control, requests) = mpsc::unbounded_channel();
        let (built_tx, built_rx) = std::sync::mpsc::sync_channel(1);
        let thread_counts = counts.clone();
        let thread = std::thread::Builder::new()
            .name("span-export".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = built_tx.send(Err(format!("its runtime: {e}")));
                        return;
                    }
                };
                let mut exporter = match runtime.block_on(async { build() }) {
                    Ok(exporter) => exporter,
                    Err(e) => {
                        let _ = built_tx.send(Err(e));
                        return;
                    }
                };
                exporter.set_resource(&resource);
                let _ = built_tx.send(Ok(()));
                runtime.block_on(export_loop(
                    exporter,
                    queued,
                    requests,
                    settings,
                    thread_counts,
                ));
            })?;
        match built_rx.recv() {
            Ok(Ok(())) => Ok(BoundedExport {
                queue,
                control,
                counts,
                thread: Mutex::new(Some(thread)),
            }),
            Ok(Err(e)) => Err(ExportStartError::Exporter(e)),
            Err(_) => Err(ExportStartError::Exporter(
                "the export thread stopped while building it".to_owned(),
            )),
        }
    }

    /// Sends `control` and waits up to `timeout` for its answer.
    fn ask(
        &self,
        make: fn(std::sync::mpsc::SyncSender<()>) -> Control,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (done, answered) = std::sync::mpsc::sync_channel(1);
        self.control
            .send(make(done))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        answered.recv_timeout(timeout).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => OTelSdkError::Timeout(timeout),
            std::sync::mpsc::RecvTimeoutError::Disconnected => OTelSdkError::AlreadyShutdown,
        })
    }
}

impl SpanProcessor for BoundedExport {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        // Recorded but not sampled: kept for the process's own use, never exported.
        if !span.span_context.is_sampled() {
            return;
        }
        if !self.queue.offer(span) {
            self.counts.dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, Duration::from_secs(30))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let result = self.ask(Control::Shutdown, timeout);
        if result.is_ok()
            && let Some(thread) = self.thread.lock().expect("export thread lock").take()
        {
            let _ = thread.join();
        }
        result
    }
}

/// The export thread's work: batches from `queue` exported one request at a time.
async fn export_loop<E: SpanExporter>(
    exporter: E,
    queue: Arc<Queue>,
    mut requests: mpsc::UnboundedReceiver<Control>,
    settings: ExportSettings,
    counts: SpanCounts,
) {
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            request = requests.recv() => {
                drain(&exporter, &queue, 1, settings, &counts).await;
                match request {
                    Some(Control::Flush(done)) => {
                        let _ = done.send(());
                    }
                    Some(Control::Shutdown(done)) => {
                        let _ = exporter.shutdown_with_timeout(settings.timeout);
                        counts.dropped.inc_by(queue.close() as u64);
                        let _ = done.send(());
                        return;
                    }
                    // Every processor handle gone without a shutdown: what was left is out.
                    None => {
                        counts.dropped.inc_by(queue.close() as u64);
                        return;
                    }
                }
            }
            () = queue.batch_ready.notified() => {
                drain(&exporter, &queue, queue.batch_size, settings, &counts).await;
            }
            _ = tick.tick() => drain(&exporter, &queue, 1, settings, &counts).await,
        }
    }
}

/// Exports batches from `queue` while at least `at_least` spans wait.
async fn drain<E: SpanExporter>(
    exporter: &E,
    queue: &Queue,
    at_least: usize,
    settings: ExportSettings,
    counts: &SpanCounts,
) {
    while let Some(mut batch) = queue.take(at_least) {
        export(exporter, &mut batch, settings.timeout, counts).await;
    }
}

/// Exports `batch` (emptying it) within `timeout`, counting the outcome.
async fn export<E: SpanExporter>(
    exporter: &E,
    batch: &mut Vec<SpanData>,
    timeout: Duration,
    counts: &SpanCounts,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let n = spans.len() as u64;
    match tokio::time::timeout(timeout, exporter.export(spans)).await {
        Ok(Ok(())) => {
            counts.exported.inc_by(n);
        }
        Ok(Err(error)) => {
            counts.dropped.inc_by(n);
            tracing::debug!(%error, spans = n, "the collector did not take a batch of spans");
        }
        Err(_) => {
            counts.dropped.inc_by(n);
            tracing::debug!(spans = n, ?timeout, "a batch of spans timed out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    /// What the fake collector does with each request.
    #[derive(Clone, Copy, Debug)]
    enum Answer {
        Accept,
        Refuse,
        Never,
    }

    #[derive(Debug)]
    struct FakeCollector {
        answer: Answer,
        received: Arc<AtomicUsize>,
    }

    impl SpanExporter for FakeCollector {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.received.fetch_add(batch.len(), Ordering::SeqCst);
            match self.answer {
                Answer::Accept => Ok(()),
                Answer::Refuse => Err(OTelSdkError::InternalFailure("503".to_owned())),
                Answer::Never => std::future::pending().await,
            }
        }
    }

    fn provider(
        answer: Answer,
        settings: ExportSettings,
    ) -> (SdkTracerProvider, SpanCounts, Arc<AtomicUsize>) {
        let counts = SpanCounts::default();
        let received = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&received);
        let processor = BoundedExport::start(
            move || {
                Ok(FakeCollector {
                    answer,
                    received: seen,
                })
            },
            Resource::builder_empty().build(),
            settings,
            counts.clone(),
        )
        .unwrap();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        (provider, counts, received)
    }

    fn settings(queue_size: usize) -> ExportSettings {
        ExportSettings {
            queue_size,
            batch_size: 4,
            interval: Duration::from_millis(20),
            timeout: Duration::from_millis(200),
        }
    }

    fn end_spans(provider: &SdkTracerProvider, n: usize) {
        let tracer = provider.tracer("test");
        for i in 0..n {
            drop(tracer.start(format!("span {i}")));
        }
    }

    #[test]
    fn accepted_spans_are_counted_as_exported() {
        let (provider, counts, received) = provider(Answer::Accept, settings(64));
        end_spans(&provider, 10);
        provider.force_flush().unwrap();
        assert_eq!(counts.exported.get(), 10);
        assert_eq!(counts.dropped.get(), 0);
        assert_eq!(received.load(Ordering::SeqCst), 10);
        provider.shutdown().unwrap();
    }

    #[test]
    fn a_whole_batch_leaves_at_once_and_a_partial_one_waits_for_the_timer() {
        // The timer never fires within the test: only a whole batch wakes the export thread.
        let slow_timer = ExportSettings {
            interval: Duration::from_secs(3600),
            ..settings(64)
        };
        let (provider, counts, received) = provider(Answer::Accept, slow_timer);
        // The interval's first tick is immediate; let it pass with nothing queued.
        std::thread::sleep(Duration::from_millis(50));
        end_spans(&provider, 4 + 3);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while counts.exported.get() < 4 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(counts.exported.get(), 4);
        assert_eq!(received.load(Ordering::SeqCst), 4);
        // The three left wait for the timer, or a flush.
        provider.force_flush().unwrap();
        assert_eq!(counts.exported.get(), 7);
        provider.shutdown().unwrap();
    }

    #[test]
    fn refused_batches_are_counted_as_dropped() {
        let (provider, counts, _) = provider(Answer::Refuse, settings(64));
        end_spans(&provider, 9);
        provider.force_flush().unwrap();
        assert_eq!(counts.exported.get(), 0);
        assert_eq!(counts.dropped.get(), 9);
        provider.shutdown().unwrap();
    }

    #[test]
    fn a_collector_that_never_answers_never_blocks_a_span_end() {
        // The first batch hangs in export for good (the timeout is an hour): were a span's end
        // to wait for room in the queue, this test would never finish. The queue of 8 fills
        // and every further span is dropped at once, counted.
        let hung = ExportSettings {
            timeout: Duration::from_secs(3600),
            ..settings(8)
        };
        let (provider, counts, _) = provider(Answer::Never, hung);
        end_spans(&provider, 1000);
        // At most one batch (4) in export and a full queue (8) are not counted yet.
        assert!(
            counts.dropped.get() >= 1000 - 12,
            "{}",
            counts.dropped.get()
        );
        assert_eq!(counts.exported.get(), 0);
        // Shutting down waits only as long as it is told to.
        assert!(
            provider
                .shutdown_with_timeout(Duration::from_millis(50))
                .is_err()
        );
    }

    #[test]
    fn an_exporter_that_cannot_be_built_is_reported() {
        let error = BoundedExport::start(
            || Err::<FakeCollector, _>("no endpoint".to_owned()),
            Resource::builder_empty().build(),
            settings(8),
            SpanCounts::default(),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot build the OTLP exporter: no endpoint"
        );
    }

    #[test]
    fn spans_after_shutdown_are_dropped_and_counted() {
        let (provider, counts, _) = provider(Answer::Accept, settings(8));
        end_spans(&provider, 2);
        provider.shutdown().unwrap();
        assert_eq!(counts.exported.get(), 2);
        // A tracer kept past shutdown: the provider stops handing spans to processors, so
        // nothing more is queued; nothing hangs either.
        end_spans(&provider, 3);
        assert!(counts.dropped.get() <= 3);
    }
}
