//! Paged lists (`limit` and `continue`) served from one consistent snapshot, as a real API
//! server serves them from one etcd revision.
//!
//! Why it matters: a reflector lists in pages and then watches from the resourceVersion of the
//! list. If each page were cut from the store as it is when the page is asked for, an object
//! deleted before the cut shifts every later object one place back and one is never listed, and
//! a change made between the first and the last page to an object already listed falls before
//! the version the watch starts from and is never seen. A cache filled that way stays wrong for
//! good (a completed pod seen as running forever). So the first page takes the whole answer
//! (pointers to the stored objects, which are shared, not copied) and the version it was taken
//! at; later pages read from it and every page names that version.
//!
//! Snapshots are bounded: at most [`MAX_SNAPSHOTS`], together pointing at no more than
//! [`MAX_HELD_ITEMS`] objects, each dropped after [`IDLE_EXPIRY`] unused or once its last page is
//! served. The least recently used goes first. A token whose snapshot is gone is answered `410
//! Expired`, as a real server answers a token older than its compaction, and the client lists
//! again from the start.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::ApiError;

/// Snapshots kept at once.
pub const MAX_SNAPSHOTS: usize = 64;
/// Objects all kept snapshots may point at together (8 bytes each).
pub const MAX_HELD_ITEMS: usize = 2_000_000;
/// A snapshot not read for this long is dropped (a real server's tokens last until etcd
/// compacts, five minutes by default).
pub const IDLE_EXPIRY: Duration = Duration::from_secs(300);

/// What a list answers: its page of objects, the version they are all as of, and where the next
/// page starts.
#[derive(Debug)]
pub struct Page {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    /// The token of the next page, when there is one.
    pub continue_token: Option<String>,
    /// How many objects come after this page.
    pub remaining: usize,
}

/// The snapshots of paged lists still being read.
#[derive(Debug, Default)]
pub struct ListPages {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    next_id: u64,
    snapshots: HashMap<u64, Snapshot>,
    items: usize,
}

#[derive(Debug)]
struct Snapshot {
    /// What was listed (resource, namespace, selectors): a token serves only the same list.
    scope: String,
    resource_version: u64,
    items: Vec<Arc<Value>>,
    last_used: Instant,
}

impl ListPages {
    /// The first page of `items` (everything the list matches, as of `resource_version`): all of
    /// them when `limit` is `None` or they fit, else the first `limit`, keeping the rest for the
    /// pages that follow.
    pub fn first(
        &self,
        scope: String,
        resource_version: u64,
        items: Vec<Arc<Value>>,
        limit: Option<usize>,
        now: Instant,
    ) -> Page {
        let limit = limit.unwrap_or(usize::MAX);
        if items.len() <= limit {
            return Page {
                items,
                resource_version,
                continue_token: None,
                remaining: 0,
            };
        }
        let page = items[..limit].to_vec();
        let remaining = items.len() - limit;
        let mut held = self.lock();
        held.expire(now);
        let id = held.next_id;
        held.next_id += 1;
        held.items += items.len();
        held.snapshots.insert(
            id,
            Snapshot {
                scope,
                resource_version,
                items,
                last_used: now,
            },
        );
        held.shed(id);
        Page {
            items: page,
            resource_version,
            continue_token: Some(token_of(id, limit)),
            remaining,
        }
    }

    /// The page `token` names, of at most `limit` objects, from the snapshot the first page
    /// took. `scope` must be the first page's: a token continues only the list it came from.
    pub fn next(
        &self,
        scope: &str,
        token: &str,
        limit: Option<usize>,
        now: Instant,
    ) -> Result<Page, ApiError> {
        let (id, offset) = parse_token(token)?;
        let mut held = self.lock();
        held.expire(now);
        let Some(snapshot) = held.snapshots.get_mut(&id) else {
            return Err(ApiError::gone(
                "the provided continue parameter is too old to display a consistent list result: \
                 start a new list without the continue parameter",
            ));
        };
        if snapshot.scope != scope {
            return Err(ApiError::bad_request(format!(
                "continue {token:?} belongs to another list (its resource, namespace and \
                 selectors must be the first page's)"
            )));
        }
        if offset > snapshot.items.len() {
            return Err(ApiError::bad_request(format!(
                "invalid continue token {token:?}: it points past the end of its list"
            )));
        }
        snapshot.last_used = now;
        let end = offset
            .saturating_add(limit.unwrap_or(usize::MAX))
            .min(snapshot.items.len());
        let page = Page {
            items: snapshot.items[offset..end].to_vec(),
            resource_version: snapshot.resource_version,
            continue_token: (end < snapshot.items.len()).then(|| token_of(id, end)),
            remaining: snapshot.items.len() - end,
        };
        if page.continue_token.is_none() {
            held.drop_snapshot(id);
        }
        Ok(page)
    }

    /// How many snapshots are kept (for tests and the debug endpoints).
    pub fn kept(&self) -> usize {
        self.lock().snapshots.len()
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        // The state stays consistent across a panic (every change is a few assignments).
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Held {
    fn drop_snapshot(&mut self, id: u64) {
        if let Some(s) = self.snapshots.remove(&id) {
            self.items -= s.items.len();
        }
    }

    fn expire(&mut self, now: Instant) {
        let idle: Vec<u64> = self
            .snapshots
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.last_used) >= IDLE_EXPIRY)
            .map(|(id, _)| *id)
            .collect();
        for id in idle {
            self.drop_snapshot(id);
        }
    }

    /// Drops the least recently used snapshots (never `keep`, the one just taken) until the
    /// bounds hold.
    fn shed(&mut self, keep: u64) {
        while self.snapshots.len() > MAX_SNAPSHOTS || self.items > MAX_HELD_ITEMS {
            let oldest = self
                .snapshots
                .iter()
                .filter(|(id, _)| **id != keep)
                .min_by_key(|(id, s)| (s.last_used, **id))
                .map(|(id, _)| *id);
            match oldest {
                Some(id) => self.drop_snapshot(id),
                None => break,
            }
        }
    }
}

fn token_of(id: u64, offset: usize) -> String {
    format!("{id}-{offset}")
}

fn parse_token(token: &str) -> Result<(u64, usize), ApiError> {
    let invalid = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let (id, offset) = token.split_once('-').ok_or_else(invalid)?;
    Ok((
        id.parse().map_err(|_| invalid())?,
        offset.parse().map_err(|_| invalid())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects(n: usize) -> Vec<Arc<Value>> {
        (0..n).map(|i| Arc::new(json!({"i": i}))).collect()
    }

    fn numbers(page: &Page) -> Vec<u64> {
        page.items
            .iter()
            .map(|o| o["i"].as_u64().unwrap())
            .collect()
    }

    #[test]
    fn a_list_that_fits_keeps_nothing() {
        let pages = ListPages::default();
        let now = Instant::now();
        let page = pages.first("pods".into(), 7, objects(3), Some(3), now);
        assert_eq!(numbers(&page), [0, 1, 2]);
        assert_eq!(page.continue_token, None);
        let all = pages.first("pods".into(), 7, objects(3), None, now);
        assert_eq!(all.items.len(), 3);
        assert_eq!(pages.kept(), 0);
    }

    #[test]
    fn every_page_reads_the_first_pages_snapshot_and_version() {
        let pages = ListPages::default();
        let now = Instant::now();
        let first = pages.first("pods".into(), 40, objects(5), Some(2), now);
        assert_eq!((numbers(&first), first.remaining), (vec![0, 1], 3));
        // Whatever the store holds now, the next pages are the snapshot's, at its version.
        let token = first.continue_token.unwrap();
        let second = pages.next("pods", &token, Some(2), now).unwrap();
        assert_eq!(
            (numbers(&second), second.resource_version),
            (vec![2, 3], 40)
        );
        // A page asked for again (a client retrying) is the same page.
        let again = pages.next("pods", &token, Some(2), now).unwrap();
        assert_eq!(numbers(&again), [2, 3]);
        let last = pages
            .next("pods", &second.continue_token.unwrap(), Some(2), now)
            .unwrap();
        assert_eq!((numbers(&last), last.continue_token), (vec![4], None));
        // The last page served, the snapshot is dropped.
        assert_eq!(pages.kept(), 0);
        let gone = pages.next("pods", &token, Some(2), now).unwrap_err();
        assert_eq!(gone.code, 410);
    }

    #[test]
    fn a_token_continues_only_its_own_list() {
        let pages = ListPages::default();
        let now = Instant::now();
        let first = pages.first("pods|ns=a".into(), 1, objects(5), Some(2), now);
        let token = first.continue_token.unwrap();
        let err = pages.next("pods|ns=b", &token, Some(2), now).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.contains("another list"), "{}", err.message);
    }

    #[test]
    fn malformed_and_out_of_range_tokens_are_refused_naming_them() {
        let pages = ListPages::default();
        let now = Instant::now();
        for bad in [
            "",
            "x",
            "1",
            "1-",
            "-1",
            "a-b",
            "1-2-3",
            "99999999999999999999-0",
            "é-1",
        ] {
            let err = pages.next("pods", bad, Some(1), now).unwrap_err();
            assert_eq!(err.code, 400, "{bad:?}");
            assert!(err.message.contains("continue"), "{}", err.message);
        }
        let token = pages
            .first("pods".into(), 1, objects(3), Some(1), now)
            .continue_token
            .unwrap();
        let id = token.split_once('-').unwrap().0;
        let err = pages
            .next("pods", &format!("{id}-4"), Some(1), now)
            .unwrap_err();
        assert_eq!(err.code, 400);
        // An unknown snapshot is an expired one: the client starts again.
        assert_eq!(
            pages
                .next("pods", "12345-0", Some(1), now)
                .unwrap_err()
                .code,
            410
        );
    }

    #[test]
    fn idle_snapshots_expire() {
        let pages = ListPages::default();
        let start = Instant::now();
        let token = pages
            .first("pods".into(), 1, objects(3), Some(1), start)
            .continue_token
            .unwrap();
        let later = start + IDLE_EXPIRY;
        assert_eq!(
            pages.next("pods", &token, Some(1), later).unwrap_err().code,
            410
        );
        assert_eq!(pages.kept(), 0);
    }

    #[test]
    fn many_unfinished_lists_keep_at_most_the_bounds_dropping_the_least_recently_used() {
        let pages = ListPages::default();
        let start = Instant::now();
        let mut tokens = Vec::new();
        for i in 0..MAX_SNAPSHOTS + 10 {
            let at = start + Duration::from_millis(i as u64);
            let page = pages.first("pods".into(), 1, objects(2), Some(1), at);
            tokens.push(page.continue_token.unwrap());
        }
        assert_eq!(pages.kept(), MAX_SNAPSHOTS);
        let now = start + Duration::from_secs(1);
        assert_eq!(
            pages
                .next("pods", &tokens[0], Some(1), now)
                .unwrap_err()
                .code,
            410
        );
        assert!(
            pages
                .next("pods", tokens.last().unwrap(), Some(1), now)
                .is_ok()
        );

        // One huge list is kept even alone beyond the item bound (it is the one being read);
        // the next one pushes it out.
        let pages = ListPages::default();
        let big = pages
            .first(
                "a".into(),
                1,
                std::iter::repeat_n(Arc::new(json!({})), MAX_HELD_ITEMS + 1).collect(),
                Some(1),
                start,
            )
            .continue_token
            .unwrap();
        assert_eq!(pages.kept(), 1);
        pages.first("b".into(), 1, objects(2), Some(1), now);
        assert_eq!(pages.kept(), 1);
        assert_eq!(pages.next("a", &big, Some(1), now).unwrap_err().code, 410);
    }
}
