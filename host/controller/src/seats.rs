//! Reconcile seats, shared fairly among namespaces.
//!
//! `--controller-threads` reconciles run at once, as before; what changes is who gets the next
//! one. kube-runtime hands requests to its workers in the order they came due, so a namespace
//! that submits thousands of jobs, or whose reconciles are slow (its own policies loop until
//! their deadline), holds every worker and every other namespace waits behind it. Here the
//! controller runs without a concurrency bound of its own and every reconcile first takes a
//! seat: waiting reconciles queue per namespace, the queues are served round robin as seats
//! free up, and one namespace holds at most `per_namespace` seats at once, so with the default
//! of four threads another namespace always finds a seat free. The scheme is the one of the
//! Kubernetes API server's priority and fairness (queues per flow, bounded seats), with the
//! namespace as the flow. kube-runtime still never runs two reconciles of one job at once: a
//! request waiting for a seat counts as running for it.
//!
//! [`Ledger`] is the bookkeeping, pure and synchronous; [`Seats`] puts it behind a lock and
//! hands seats to waiting tasks.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// How many reconciles run at once, and how many of them one namespace may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeatLimits {
    /// Reconciles at once (`--controller-threads`).
    pub total: usize,
    /// Reconciles of one namespace's jobs at once (`--max-reconciles-per-namespace`).
    pub per_namespace: usize,
}

impl SeatLimits {
    /// `total` seats, of which one namespace may hold three in four (rounded up), so that with
    /// four or more seats other namespaces always find one free.
    pub fn new(total: u16) -> SeatLimits {
        let total = usize::from(total.max(1));
        SeatLimits {
            total,
            per_namespace: total - total / 4,
        }
    }

    /// These limits with at most `per_namespace` seats for one namespace (never fewer than one,
    /// never more than the total).
    pub fn per_namespace(self, per_namespace: u16) -> SeatLimits {
        SeatLimits {
            per_namespace: usize::from(per_namespace).clamp(1, self.total),
            ..self
        }
    }
}

/// Identifies one waiting request.
pub type Ticket = u64;

/// The answer to a request for a seat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// The seat is the requester's now.
    Granted,
    /// The requester waits with this ticket until a release grants it.
    Queued(Ticket),
}

/// Which seats are held and who waits for one: a FIFO queue per namespace, the namespaces with
/// waiters in a ring served round robin.
#[derive(Debug)]
pub struct Ledger {
    limits: SeatLimits,
    held_total: usize,
    held: HashMap<String, usize>,
    queues: HashMap<String, VecDeque<Ticket>>,
    /// Namespaces with waiters, the next to be served first.
    ring: VecDeque<String>,
    next_ticket: Ticket,
}

impl Ledger {
    pub fn new(limits: SeatLimits) -> Ledger {
        Ledger {
            limits,
            held_total: 0,
            held: HashMap::new(),
            queues: HashMap::new(),
            ring: VecDeque::new(),
            next_ticket: 0,
        }
    }

    /// A reconcile of a job in `namespace` asks for a seat. It gets one at once only when a
    /// seat is free, its namespace is under its share and no earlier request of the namespace
    /// waits (a waiter elsewhere cannot be passed over: it would already hold the free seat).
    pub fn request(&mut self, namespace: &str) -> Request {
        let queued = self.queues.get(namespace).is_some_and(|q| !q.is_empty());
        if !queued && self.grantable(namespace) {
            self.hold(namespace);
            return Request::Granted;
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let queue = self.queues.entry(namespace.to_owned()).or_default();
        queue.push_back(ticket);
        if queue.len() == 1 {
            self.ring.push_back(namespace.to_owned());
        }
        Request::Queued(ticket)
    }

    /// A seat of `namespace` is given back. Returns the waiters granted a seat by it, each with
    /// its namespace (more than one only if limits were ever uneven; usually zero or one).
    pub fn release(&mut self, namespace: &str) -> Vec<(String, Ticket)> {
        self.held_total = self.held_total.saturating_sub(1);
        if let Some(held) = self.held.get_mut(namespace) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(namespace);
            }
        }
        self.dispatch()
    }

    /// The waiter with `ticket` gave up. Returns false when it was not waiting any more: it was
    /// granted a seat, which the caller now holds and must release.
    pub fn cancel(&mut self, namespace: &str, ticket: Ticket) -> bool {
        let Some(queue) = self.queues.get_mut(namespace) else {
            return false;
        };
        let Some(at) = queue.iter().position(|&t| t == ticket) else {
            return false;
        };
        queue.remove(at);
        if queue.is_empty() {
            self.queues.remove(namespace);
            self.ring.retain(|ns| ns != namespace);
        }
        true
    }

    /// Seats held now, in all and by `namespace`.
    pub fn held(&self, namespace: &str) -> (usize, usize) {
        (
            self.held_total,
            self.held.get(namespace).copied().unwrap_or(0),
        )
    }

    /// Requests waiting for a seat.
    pub fn waiting(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }

    fn grantable(&self, namespace: &str) -> bool {
        self.held_total < self.limits.total
            && self.held.get(namespace).copied().unwrap_or(0) < self.limits.per_namespace
    }

    fn hold(&mut self, namespace: &str) {
        self.held_total += 1;
        *self.held.entry(namespace.to_owned()).or_default() += 1;
    }

    /// Hands free seats to waiters: the ring is walked from its front, a namespace at its share
    /// is passed over and keeps its place relative to the others, a namespace served goes to
    /// the back while it still has waiters.
    fn dispatch(&mut self) -> Vec<(String, Ticket)> {
        let mut granted = Vec::new();
        'seats: while self.held_total < self.limits.total {
            for at in 0..self.ring.len() {
                if !self.grantable(&self.ring[at]) {
                    continue;
                }
                let Some(namespace) = self.ring.remove(at) else {
                    break 'seats;
                };
                let queue = self.queues.get_mut(&namespace);
                let Some(ticket) = queue.and_then(VecDeque::pop_front) else {
                    continue 'seats;
                };
                self.hold(&namespace);
                if self.queues.get(&namespace).is_some_and(|q| !q.is_empty()) {
                    self.ring.push_back(namespace.clone());
                } else {
                    self.queues.remove(&namespace);
                }
                granted.push((namespace, ticket));
                continue 'seats;
            }
            break;
        }
        granted
    }
}

/// The seats of one controller: cheap to clone, every clone the same seats.
#[derive(Clone, Debug)]
pub struct Seats {
    inner: Arc<Mutex<Shared>>,
}

#[derive(Debug)]
struct Shared {
    ledger: Ledger,
    /// How to wake each waiter when it is granted a seat.
    wakers: HashMap<Ticket, oneshot::Sender<()>>,
}

impl Seats {
    pub fn new(limits: SeatLimits) -> Seats {
        Seats {
            inner: Arc::new(Mutex::new(Shared {
                ledger: Ledger::new(limits),
                wakers: HashMap::new(),
            })),
        }
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        // Every update of the ledger completes before the lock is released; a panic elsewhere
        // cannot leave it half-written.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a seat for a reconcile of a job in `namespace`. Dropping the future gives up
    /// the place in the queue (or the seat, if it was granted meanwhile).
    pub async fn take(&self, namespace: &str) -> Seat {
        let (ticket, woken) = {
            let mut shared = self.shared();
            match shared.ledger.request(namespace) {
                Request::Granted => return self.seat(namespace),
                Request::Queued(ticket) => {
                    let (tx, rx) = oneshot::channel();
                    shared.wakers.insert(ticket, tx);
                    (ticket, rx)
                }
            }
        };
        let waiting = Waiting {
            seats: self,
            namespace,
            ticket,
            done: false,
        };
        // The sender is dropped only after a grant was sent, or with the ledger entry cancelled
        // by `Waiting` itself: either way the wait is over.
        let _ = woken.await;
        waiting.granted();
        self.seat(namespace)
    }

    /// Seats held now, in all and by `namespace`, and requests waiting.
    pub fn held(&self, namespace: &str) -> (usize, usize, usize) {
        let shared = self.shared();
        let (total, own) = shared.ledger.held(namespace);
        (total, own, shared.ledger.waiting())
    }

    fn seat(&self, namespace: &str) -> Seat {
        Seat {
            seats: self.clone(),
            namespace: namespace.to_owned(),
        }
    }

    fn release(&self, namespace: &str) {
        let mut shared = self.shared();
        for (_, ticket) in shared.ledger.release(namespace) {
            if let Some(waker) = shared.wakers.remove(&ticket) {
                // A waiter that went away meanwhile finds its grant in `Waiting::drop`.
                let _ = waker.send(());
            }
        }
    }
}

/// A held seat; dropping it lets the next waiter in.
#[derive(Debug)]
pub struct Seat {
    seats: Seats,
    namespace: String,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.seats.release(&self.namespace);
    }
}

/// A place in the queue, given up if the waiting future is dropped.
struct Waiting<'a> {
    seats: &'a Seats,
    namespace: &'a str,
    ticket: Ticket,
    done: bool,
}

impl Waiting<'_> {
    fn granted(mut self) {
        self.done = true;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let granted = {
            let mut shared = self.seats.shared();
            shared.wakers.remove(&self.ticket);
            !shared.ledger.cancel(self.namespace, self.ticket)
        };
        if granted {
            // Granted just before the waiter went away: pass the seat on.
            self.seats.release(self.namespace);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_namespace: usize) -> SeatLimits {
        SeatLimits {
            total,
            per_namespace,
        }
    }

    #[test]
    fn defaults_leave_other_namespaces_a_seat_from_four_threads_up() {
        for (threads, per_namespace) in [(1, 1), (2, 2), (3, 3), (4, 3), (8, 6), (16, 12)] {
            assert_eq!(
                SeatLimits::new(threads),
                limits(usize::from(threads), per_namespace),
                "{threads} threads"
            );
        }
        assert_eq!(SeatLimits::new(4).per_namespace(0), limits(4, 1));
        assert_eq!(SeatLimits::new(4).per_namespace(9), limits(4, 4));
    }

    #[test]
    fn a_namespace_holds_at_most_its_share_and_another_gets_the_seat_left() {
        let mut ledger = Ledger::new(limits(4, 3));
        for _ in 0..3 {
            assert_eq!(ledger.request("flood"), Request::Granted);
        }
        let Request::Queued(_) = ledger.request("flood") else {
            panic!("the fourth seat is not the flooding namespace's");
        };
        assert_eq!(ledger.request("quiet"), Request::Granted);
        assert_eq!(ledger.held("flood"), (4, 3));
        assert_eq!(ledger.held("quiet"), (4, 1));
    }

    #[test]
    fn waiting_namespaces_are_served_round_robin_whatever_their_queue_lengths() {
        let mut ledger = Ledger::new(limits(1, 1));
        assert_eq!(ledger.request("a"), Request::Granted);
        let mut tickets = HashMap::new();
        for ns in ["a", "a", "a", "b", "c", "a", "b"] {
            let Request::Queued(t) = ledger.request(ns) else {
                panic!("one seat, taken");
            };
            tickets.insert(t, ns);
        }
        let mut served = Vec::new();
        let mut holder = "a";
        while ledger.waiting() > 0 {
            let granted = ledger.release(holder);
            assert_eq!(granted.len(), 1);
            let (ns, ticket) = &granted[0];
            assert_eq!(tickets[ticket], ns.as_str());
            holder = tickets[ticket];
            served.push(holder);
        }
        assert_eq!(served, ["a", "b", "c", "a", "b", "a", "a"]);
        assert!(ledger.release(holder).is_empty());
        assert_eq!(ledger.held("a"), (0, 0));
    }

    #[test]
    fn a_namespace_at_its_share_is_passed_over_and_keeps_its_turn() {
        let mut ledger = Ledger::new(limits(3, 2));
        assert_eq!(ledger.request("a"), Request::Granted);
        assert_eq!(ledger.request("a"), Request::Granted);
        assert_eq!(ledger.request("b"), Request::Granted);
        let Request::Queued(a) = ledger.request("a") else {
            panic!()
        };
        let Request::Queued(b) = ledger.request("b") else {
            panic!()
        };
        // "a" is first in the ring but at its share: "b" gets b's released seat.
        assert_eq!(ledger.release("b"), vec![("b".to_owned(), b)]);
        // One of a's own seats frees: a's waiter is next.
        assert_eq!(ledger.release("a"), vec![("a".to_owned(), a)]);
        assert_eq!(ledger.waiting(), 0);
    }

    #[test]
    fn a_cancelled_waiter_leaves_the_queue_and_a_granted_one_is_told_it_holds_the_seat() {
        let mut ledger = Ledger::new(limits(1, 1));
        assert_eq!(ledger.request("a"), Request::Granted);
        let Request::Queued(b) = ledger.request("b") else {
            panic!()
        };
        let Request::Queued(c) = ledger.request("c") else {
            panic!()
        };
        assert!(ledger.cancel("b", b), "b was waiting");
        assert_eq!(ledger.release("a"), vec![("c".to_owned(), c)]);
        assert!(!ledger.cancel("c", c), "c holds the seat now");
        assert!(!ledger.cancel("nowhere", 99));
    }

    #[tokio::test]
    async fn seats_wake_waiters_in_turn_and_a_dropped_waiter_passes_its_seat_on() {
        let seats = Seats::new(limits(1, 1));
        let first = seats.take("a").await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for ns in ["a", "b"] {
            let (seats, tx) = (seats.clone(), tx.clone());
            waiters.push(tokio::spawn(async move {
                let seat = seats.take(ns).await;
                tx.send(ns).unwrap();
                drop(seat);
            }));
            tokio::task::yield_now().await;
        }
        // A waiter that gives up is not served.
        let abandoned = {
            let seats = seats.clone();
            tokio::spawn(async move { seats.take("c").await })
        };
        tokio::task::yield_now().await;
        abandoned.abort();
        let _ = abandoned.await;
        assert_eq!(seats.held("a"), (1, 1, 2));
        drop(first);
        assert_eq!(rx.recv().await, Some("a"));
        assert_eq!(rx.recv().await, Some("b"));
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(seats.held("c"), (0, 0, 0), "every seat given back");
    }
}
