//! The retry schedule of a failing job, in one place: how soon the first retry comes (by what
//! failed), how it grows with consecutive failures, and how far a server's `Retry-After` is
//! believed. Pure arithmetic; [`crate::Context`] keeps the per-job failure counts.

use std::time::Duration;

/// First retry after a failed API call.
pub const API_FIRST_RETRY: Duration = Duration::from_millis(100);
/// First retry after a policy or internal failure.
pub const FIRST_RETRY: Duration = Duration::from_secs(10);
/// Longest delay between retries of a failing job.
pub const BACKOFF_MAX: Duration = Duration::from_secs(360);
/// Longest wait a server's `Retry-After` is honoured for. A real API server asks for a second
/// or a few; the value comes over the network, though (a proxy, a misconfigured server, a
/// `retryAfterSeconds` of four billion), and a job must not sleep for a century on it. Past this,
/// the job is retried after the cap and, if the server still refuses, asks again.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(900);

/// Exponential backoff: `first`, doubled per consecutive failure, capped at [`BACKOFF_MAX`];
/// never sooner than the server asked (`retry_after`), even past that cap, up to
/// [`RETRY_AFTER_MAX`].
pub fn backoff_for(
    first: Duration,
    consecutive_failures: u32,
    retry_after: Option<Duration>,
) -> Duration {
    let exp = consecutive_failures.saturating_sub(1).min(16);
    let delay = first.saturating_mul(1 << exp).min(BACKOFF_MAX);
    retry_after.map_or(delay, |asked| delay.max(asked.min(RETRY_AFTER_MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_failures_back_off_from_ten_seconds_to_six_minutes() {
        let secs: Vec<u64> = (1..=8)
            .map(|n| backoff_for(FIRST_RETRY, n, None).as_secs())
            .collect();
        assert_eq!(secs, vec![10, 20, 40, 80, 160, 320, 360, 360]);
        assert_eq!(backoff_for(FIRST_RETRY, u32::MAX, None), BACKOFF_MAX);
    }

    #[test]
    fn api_failures_are_retried_from_a_tenth_of_a_second() {
        let millis: Vec<u128> = [1, 2, 3, 4, 12, 13]
            .into_iter()
            .map(|n| backoff_for(API_FIRST_RETRY, n, None).as_millis())
            .collect();
        assert_eq!(millis, vec![100, 200, 400, 800, 204_800, 360_000]);
    }

    #[test]
    fn a_retry_after_from_the_server_is_waited_for_even_past_the_cap() {
        let asked = Some(Duration::from_secs(2));
        assert_eq!(
            backoff_for(API_FIRST_RETRY, 1, asked),
            Duration::from_secs(2)
        );
        assert_eq!(
            backoff_for(API_FIRST_RETRY, 6, asked),
            Duration::from_millis(3_200)
        );
        let long = Duration::from_secs(600);
        assert_eq!(backoff_for(API_FIRST_RETRY, 20, Some(long)), long);
    }

    #[test]
    fn a_retry_after_beyond_reason_is_cut_to_its_cap() {
        // The largest `retry_after_seconds` kube's `StatusDetails` can hold (a `u32`).
        let absurd = Duration::from_secs(u64::from(u32::MAX));
        assert_eq!(
            backoff_for(API_FIRST_RETRY, 1, Some(absurd)),
            RETRY_AFTER_MAX
        );
        assert_eq!(
            backoff_for(FIRST_RETRY, u32::MAX, Some(Duration::MAX)),
            RETRY_AFTER_MAX
        );
    }
}
