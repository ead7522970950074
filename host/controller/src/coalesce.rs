//! Coalescing of the owned objects' watch events, per set of owners, within a bounded window.
//!
//! A job's pods change in bursts: they are created, scheduled, started and finished together,
//! and each change of each pod woke the job. Every wake-up was a reconcile, its policy calls and
//! often a status write of its own, for what one reconcile a moment later would have seen at
//! once. [`coalesce`] holds an owned object's event for at most `window`: events of other
//! objects with the same owners that arrive meanwhile replace it, and one event (the latest)
//! wakes the owners when the window closes.
//!
//! The window is fixed from the first event, never extended by later ones. kube-runtime's
//! `debounce` restarts its wait on every request, retries included, so a job whose objects kept
//! changing waited for them to pause: under injected API faults, a job's retried pod creation
//! waited out its workers' whole run, and the job succeeded without its parameter server ever
//! being created. Here every event wakes its owners within `window`, whatever follows it.
//! Objects without owners and watch errors pass at once.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Resource;
use tokio_util::time::DelayQueue;

/// Who an object's event wakes: its namespace and the uids of all its owners (kube-runtime's
/// `owns_stream` wakes every owner of the watched kind, controller or not), in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Owners {
    namespace: Option<String>,
    uids: Vec<String>,
}

impl Owners {
    fn of<K: Resource>(obj: &K) -> Option<Owners> {
        let meta = obj.meta();
        let mut uids: Vec<String> = meta
            .owner_references
            .iter()
            .flatten()
            .map(|r| r.uid.clone())
            .collect();
        if uids.is_empty() {
            return None;
        }
        uids.sort();
        Some(Owners {
            namespace: meta.namespace.clone(),
            uids,
        })
    }
}

/// `stream` with the events of objects that share their owners coalesced: each is held at most
/// `window`, and replaced by any later one for the same owners meanwhile.
pub fn coalesce<S, K, E>(stream: S, window: Duration) -> Coalesced<S, K>
where
    S: Stream<Item = Result<K, E>>,
    K: Resource,
{
    Coalesced {
        inner: Box::pin(stream),
        done: false,
        window,
        held: HashMap::new(),
        due: DelayQueue::new(),
    }
}

/// The stream [`coalesce`] returns.
pub struct Coalesced<S, K> {
    inner: Pin<Box<S>>,
    done: bool,
    window: Duration,
    /// The latest event held for each set of owners.
    held: HashMap<Owners, K>,
    /// When each held event is due, in order.
    due: DelayQueue<Owners>,
}

impl<S, K, E> Stream for Coalesced<S, K>
where
    S: Stream<Item = Result<K, E>>,
    K: Resource + Unpin,
{
    type Item = Result<K, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        while !this.done {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(obj))) => {
                    let Some(owners) = Owners::of(&obj) else {
                        return Poll::Ready(Some(Ok(obj)));
                    };
                    match this.held.entry(owners) {
                        Entry::Occupied(mut held) => {
                            held.insert(obj);
                        }
                        Entry::Vacant(slot) => {
                            this.due.insert(slot.key().clone(), this.window);
                            slot.insert(obj);
                        }
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.done = true,
                Poll::Pending => break,
            }
        }
        if this.done {
            // The watch ended: what is held goes out now, in the order it came.
            return Poll::Ready(this.release_next());
        }
        match this.due.poll_expired(cx) {
            Poll::Ready(Some(expired)) => {
                let obj = this.held.remove(expired.get_ref());
                Poll::Ready(obj.map(Ok))
            }
            // Nothing held; the inner stream's waker is registered.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

impl<S, K> Coalesced<S, K> {
    /// The held event due first, taken out of the queue early.
    fn release_next<E>(&mut self) -> Option<Result<K, E>> {
        let owners = self.due.peek()?;
        let owners = self.due.remove(&owners).into_inner();
        self.held.remove(&owners).map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;
    use futures::{FutureExt, SinkExt};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn pod(name: &str, owners: &[&str]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ml".into()),
                owner_references: Some(
                    owners
                        .iter()
                        .map(|uid| OwnerReference {
                            uid: (*uid).into(),
                            controller: Some(true),
                            ..OwnerReference::default()
                        })
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn name(item: Option<Result<Pod, String>>) -> String {
        item.expect("an item")
            .expect("an object")
            .metadata
            .name
            .unwrap_or_default()
    }

    const WINDOW: Duration = Duration::from_millis(100);

    #[tokio::test(start_paused = true)]
    async fn events_of_one_owner_within_the_window_wake_it_once_with_the_latest() {
        let (mut tx, rx) = mpsc::unbounded::<Result<Pod, String>>();
        let mut out = coalesce(rx, WINDOW);
        tx.send(Ok(pod("a-0", &["a"]))).await.unwrap();
        assert!(out.next().now_or_never().is_none(), "held");
        tokio::time::advance(Duration::from_millis(60)).await;
        tx.send(Ok(pod("a-1", &["a"]))).await.unwrap();
        tx.send(Ok(pod("b-0", &["b"]))).await.unwrap();
        assert!(out.next().now_or_never().is_none(), "still held");
        // The window counts from the first event, not the last.
        tokio::time::advance(Duration::from_millis(40)).await;
        assert_eq!(name(out.next().await), "a-1");
        assert!(
            out.next().now_or_never().is_none(),
            "b's window is still open"
        );
        tokio::time::advance(Duration::from_millis(60)).await;
        assert_eq!(name(out.next().await), "b-0");
    }

    #[tokio::test(start_paused = true)]
    async fn an_owner_whose_objects_never_pause_is_still_woken_every_window() {
        let (mut tx, rx) = mpsc::unbounded::<Result<Pod, String>>();
        let mut out = coalesce(rx, WINDOW);
        let started = tokio::time::Instant::now();
        let mut woken = Vec::new();
        // An event every 10 ms for a second: kube-runtime's debounce would wait for a pause.
        for i in 0..100 {
            tx.send(Ok(pod(&format!("a-{i}"), &["a"]))).await.unwrap();
            tokio::time::advance(Duration::from_millis(10)).await;
            while let Some(item) = out.next().now_or_never() {
                woken.push((name(item), started.elapsed()));
            }
        }
        // A window opens at the first event after the last wake-up and closes `WINDOW` later;
        // events come every 10 ms, and the stream is looked at every 10 ms.
        let spacing = Duration::from_millis(10);
        let mut previous = Duration::ZERO;
        for (_, at) in &woken {
            assert!(*at - previous <= WINDOW + spacing, "{woken:?}");
            previous = *at;
        }
        assert!(woken.len() >= 9, "{woken:?}");
        assert!(
            Duration::from_secs(1) - previous <= WINDOW + spacing,
            "{woken:?}"
        );
        // Each carries the latest event of its window.
        for (name, at) in &woken {
            assert_eq!(*name, format!("a-{}", at.as_millis() / 10 - 1), "{woken:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn objects_with_other_owners_are_not_merged() {
        let (mut tx, rx) = mpsc::unbounded::<Result<Pod, String>>();
        let mut out = coalesce(rx, WINDOW);
        // Same owners in another order are the same set; one more owner is another set.
        tx.send(Ok(pod("x", &["a", "b"]))).await.unwrap();
        tx.send(Ok(pod("y", &["b", "a"]))).await.unwrap();
        tx.send(Ok(pod("z", &["a"]))).await.unwrap();
        tokio::time::advance(WINDOW).await;
        let mut names = vec![name(out.next().await), name(out.next().await)];
        names.sort();
        assert_eq!(names, ["y", "z"]);
        assert!(out.next().now_or_never().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn objects_without_owners_errors_and_the_end_pass_at_once() {
        let (mut tx, rx) = mpsc::unbounded::<Result<Pod, String>>();
        let mut out = coalesce(rx, WINDOW);
        tx.send(Ok(pod("held", &["a"]))).await.unwrap();
        tx.send(Ok(pod("orphan", &[]))).await.unwrap();
        tx.send(Err("watch failed".into())).await.unwrap();
        assert_eq!(name(out.next().now_or_never().unwrap()), "orphan");
        assert_eq!(
            out.next().now_or_never().unwrap().unwrap().unwrap_err(),
            "watch failed"
        );
        // When the watch ends, what is held goes out without waiting, then the end.
        drop(tx);
        assert_eq!(name(out.next().now_or_never().unwrap()), "held");
        assert!(out.next().now_or_never().unwrap().is_none());
    }
}
