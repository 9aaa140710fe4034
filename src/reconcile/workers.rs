//! How many BundleDeployments are reconciled at once: fixed (`--concurrency N`), or adapting to
//! what the API server accepts. Adaptive is TCP's congestion control: a slow start (one more
//! worker after each pass served, so the limit doubles every round) until the API server first
//! throttles, then additive increase, multiplicative decrease: one more worker after every
//! `limit` passes served without throttling, half as many after a pass it throttled (HTTP 429,
//! which API Priority and Fairness answers when a client's queues are full), never outside
//! `[min, max]`. Without the slow start, a hundred bundles were installed before the limit had
//! grown from 4 to 20.
//!
//! The arithmetic is [`Limit`] (pure, unit-tested); [`Workers`] holds the permits.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The adaptive limit's arithmetic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Workers allowed now.
    pub current: usize,
    min: usize,
    max: usize,
    /// Unthrottled passes since the last change.
    served: usize,
    /// No pass has been throttled yet: grow by one per pass served.
    slow_start: bool,
}

impl Limit {
    /// Starts at `start`, within `[min, max]`.
    pub fn new(start: usize, min: usize, max: usize) -> Limit {
        let min = min.max(1);
        let max = max.max(min);
        Limit {
            current: start.clamp(min, max),
            min,
            max,
            served: 0,
            slow_start: true,
        }
    }

    /// A pass finished; `throttled` when the API server answered 429 during it. Returns the
    /// new limit.
    pub fn finished(&mut self, throttled: bool) -> usize {
        if throttled {
            self.current = (self.current / 2).max(self.min);
            self.served = 0;
            self.slow_start = false;
        } else if self.slow_start {
            self.current = (self.current + 1).min(self.max);
        } else {
            self.served += 1;
            if self.served >= self.current && self.current < self.max {
                self.current += 1;
                self.served = 0;
            }
        }
        self.current
    }
}

/// The reconcile workers' permits.
#[derive(Clone)]
pub struct Workers {
    permits: Arc<Semaphore>,
    state: Arc<Mutex<State>>,
}

struct State {
    /// None: fixed.
    limit: Option<Limit>,
    /// Permits handed out now.
    granted: usize,
    /// Permits to retire as they come back (the limit fell below what is handed out).
    owed: usize,
}

/// A worker's permit: given back when dropped (or retired when the limit fell meanwhile).
pub struct Permit {
    permit: Option<OwnedSemaphorePermit>,
    workers: Workers,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.workers.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(permit) = self.permit.take() {
            if state.owed > 0 {
                state.owed -= 1;
                permit.forget();
            }
        }
    }
}

impl Workers {
    /// A fixed number of workers.
    pub fn fixed(n: usize) -> Workers {
        Workers::with(n.max(1), None)
    }

    /// Workers adapting between `min` and `max`, starting at `start`.
    pub fn adaptive(start: usize, min: usize, max: usize) -> Workers {
        let limit = Limit::new(start, min, max);
        Workers::with(limit.current, Some(limit))
    }

    fn with(n: usize, limit: Option<Limit>) -> Workers {
        Workers {
            permits: Arc::new(Semaphore::new(n)),
            state: Arc::new(Mutex::new(State {
                limit,
                granted: n,
                owed: 0,
            })),
        }
    }

    /// The most workers there can ever be (the controller runs this many at most).
    pub fn max(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.limit.as_ref().map_or(state.granted, |l| l.max)
    }

    /// Workers allowed now.
    pub fn current(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.granted - state.owed
    }

    /// Waits for a worker.
    pub async fn acquire(&self) -> Permit {
        // The semaphore is never closed, so acquiring cannot fail; a None permit is harmless.
        let permit = self.permits.clone().acquire_owned().await.ok();
        Permit {
            permit,
            workers: self.clone(),
        }
    }

    /// A pass finished; adapts the limit (no-op when fixed).
    pub fn finished(&self, throttled: bool) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let allowed = state.granted - state.owed;
        let Some(limit) = state.limit.as_mut() else {
            return;
        };
        let wanted = limit.finished(throttled);
        if wanted > allowed {
            let more = wanted - allowed;
            // Permits still owed are simply no longer owed; the rest are new.
            let forgiven = more.min(state.owed);
            state.owed -= forgiven;
            let new = more - forgiven;
            state.granted += new;
            self.permits.add_permits(new);
        } else if wanted < allowed {
            let fewer = allowed - wanted;
            let retired = self.permits.forget_permits(fewer);
            state.granted -= retired;
            state.owed += fewer - retired;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_each_round_until_first_throttled() {
        let mut limit = Limit::new(4, 2, 40);
        for _ in 0..4 {
            limit.finished(false);
        }
        assert_eq!(
            limit.current, 8,
            "a round of 4 passes served: twice as many"
        );
        for _ in 0..100 {
            limit.finished(false);
        }
        assert_eq!(limit.current, 40, "never above max");
        assert_eq!(limit.finished(true), 20);
        for _ in 0..19 {
            limit.finished(false);
        }
        assert_eq!(limit.current, 20, "after a throttle: additive");
        assert_eq!(limit.finished(false), 21);
    }

    #[test]
    fn grows_by_one_per_window_and_halves_when_throttled() {
        let mut limit = Limit::new(4, 2, 6);
        limit.finished(true); // out of the slow start: 2
        limit.current = 4;
        for _ in 0..3 {
            assert_eq!(limit.finished(false), 4);
        }
        assert_eq!(limit.finished(false), 5, "a whole window served");
        for _ in 0..5 {
            limit.finished(false);
        }
        assert_eq!(limit.current, 6);
        for _ in 0..20 {
            limit.finished(false);
        }
        assert_eq!(limit.current, 6, "never above max");
        assert_eq!(limit.finished(true), 3);
        assert_eq!(limit.finished(true), 2);
        assert_eq!(limit.finished(true), 2, "never below min");
    }

    #[tokio::test]
    async fn permits_follow_the_limit_even_while_handed_out() {
        let workers = Workers::adaptive(4, 1, 8);
        let held: Vec<Permit> = futures::future::join_all((0..4).map(|_| workers.acquire())).await;
        workers.finished(true); // 4 -> 2 while all 4 are out
        assert_eq!(workers.current(), 2);
        drop(held);
        // Two came back and were retired: two remain.
        let a = workers.acquire().await;
        let b = workers.acquire().await;
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), workers.acquire())
                .await
                .is_err(),
            "a third worker waits"
        );
        drop((a, b));
        let fixed = Workers::fixed(3);
        fixed.finished(true);
        assert_eq!(fixed.current(), 3, "a fixed number does not adapt");
    }
}
