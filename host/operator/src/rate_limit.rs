//! The client-side rate limit of the operator's API client (`--kube-api-qps`,
//! `--kube-api-burst`), a token bucket as client-go's and training-operator 1.9's: up to `burst`
//! requests at once, refilled at `qps` per second.
//!
//! A tower layer on the kube client's HTTP stack: the wait happens in `poll_ready`, so the
//! client's request buffer dispatches no request before a token is free, whoever sends it (the
//! controller, its watches, the policy sync, events). Waiting costs no thread and no CPU.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tower::{Layer, Service};

/// How fast the operator may call the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiRate {
    /// Requests per second, sustained.
    pub qps: NonZeroU32,
    /// Requests at once after a quiet period.
    pub burst: NonZeroU32,
}

/// The layer; every service it wraps shares one bucket.
#[derive(Clone)]
pub struct RateLimitLayer {
    /// `None` lets every request through (the embedded cluster's in-process operator).
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
}

impl RateLimitLayer {
    pub fn new(rate: ApiRate) -> RateLimitLayer {
        let quota = Quota::per_second(rate.qps).allow_burst(rate.burst);
        RateLimitLayer {
            limiter: Some(Arc::new(RateLimiter::direct(quota))),
        }
    }

    /// A layer that limits nothing.
    pub fn unlimited() -> RateLimitLayer {
        RateLimitLayer { limiter: None }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            limiter: self.limiter.clone(),
            waiting: None,
            permitted: self.limiter.is_none(),
        }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A service that takes a token from the bucket before each request.
pub struct RateLimited<S> {
    inner: S,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// The wait for the next token, while there is one.
    waiting: Option<Wait>,
    /// A token was taken for the next `call`.
    permitted: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if let (false, Some(limiter)) = (self.permitted, &self.limiter) {
            let wait = self.waiting.get_or_insert_with(|| {
                let limiter = Arc::clone(limiter);
                Box::pin(async move { limiter.until_ready().await })
            });
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.waiting = None;
            self.permitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        // A token is spent per request; the next one waits for its own.
        self.permitted = self.limiter.is_none();
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::time::Duration;
    use tower::ServiceExt;

    fn rate(qps: u32, burst: u32) -> ApiRate {
        ApiRate {
            qps: NonZeroU32::new(qps).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        }
    }

    fn ok_service() -> impl Service<(), Response = (), Error = std::convert::Infallible> {
        tower::service_fn(|()| async { Ok::<(), std::convert::Infallible>(()) })
    }

    #[tokio::test]
    async fn a_burst_passes_at_once_and_the_next_request_waits_for_the_refill() {
        let layer = RateLimitLayer::new(rate(1, 3));
        let mut service = layer.layer(ok_service());
        for n in 0..3 {
            let ready = service.ready().now_or_never();
            assert!(ready.is_some(), "request {n} of the burst had to wait");
            service.call(()).await.unwrap();
        }
        // The bucket is empty; the next token comes a second later.
        assert!(service.ready().now_or_never().is_none());
        tokio::time::timeout(Duration::from_secs(5), service.ready())
            .await
            .expect("the bucket refills")
            .unwrap();
    }

    #[tokio::test]
    async fn the_unlimited_layer_never_waits() {
        let mut service = RateLimitLayer::unlimited().layer(ok_service());
        for _ in 0..1000 {
            assert!(service.ready().now_or_never().is_some());
            service.call(()).await.unwrap();
        }
    }

    #[tokio::test]
    async fn services_made_by_one_layer_share_the_bucket() {
        let layer = RateLimitLayer::new(rate(1, 2));
        let mut a = layer.layer(ok_service());
        let mut b = layer.layer(ok_service());
        a.ready().await.unwrap().call(()).await.unwrap();
        b.ready().await.unwrap().call(()).await.unwrap();
        assert!(
            a.ready().now_or_never().is_none(),
            "a third request passed a bucket of two"
        );
    }
}
