//! The circuit breaker for handler outages that still answer: a 502, 503
//! or 504, a timeout, a broken connection. Connection refused already
//! holds dispatch off without counting attempts (the dispatch loop's
//! `Outage`); a handler behind a load balancer answering 503 for ten
//! minutes would otherwise burn every item's attempts and fail them.
//!
//! The breaker keeps the last `calls` handler calls' results, each failure
//! with the item it was for. It opens when at least half of that window
//! has been seen and the items that failed as an outage in it, each
//! counted once however often it failed, make up `ratio` of its calls.
//! One item that times out or resets the connection again and again is
//! evidence against that item, not the handler: it uses up its attempts
//! and fails instead of holding every partition off.
//! While the breaker is open an outage failure counts no attempt and is
//! reported as "unreachable", which makes dispatch hold off and probe with
//! one call at a time (with a growing hold-off, as for connection refused).
//! The first call started after it opened that gets a real answer (any
//! status but 502-504, a body included) closes it: an answer to a call
//! made before the outage says nothing about the handler now (on a busy
//! machine such answers are taken in late, and each one closing the
//! breaker burned another round of attempts).
//! Dispatch asks [`Breaker::is_open`] before it starts calls, and a
//! delivery frees its call's slot only once its result is recorded here,
//! so an outage costs at most the failures that open the breaker, the
//! calls in flight then (`--concurrency`) and one probe per hold-off: the
//! bound the book states under Flow control.
//!
//! A 404 or 405 is evidence of a wrong handler URL (a path the handler
//! does not serve) when it is not the handler's answer about one item.
//! One that follows an answer in the window is that item's own: it fails
//! the item as before. One that follows no answer (the first calls, or a
//! run of 404s) is spared: it counts as an outage failure in the window
//! and the item is tried again later with no attempt counted, once; so a
//! wrong path opens the breaker after half a window of items without
//! burning any, and an item that answers 404 alone fails on its second.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

/// What a call's result did to the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// It stays as it was; `open` says how that is.
    Stays {
        /// The breaker is open.
        open: bool,
    },
    /// This result opened it.
    Opened,
    /// This result closed it.
    Closed,
    /// A 404 or 405 that may mean the URL is wrong (no answer before it):
    /// counted in the window, the item is tried again without an attempt.
    Spared,
}

impl Turn {
    /// Whether the breaker is open after the result.
    pub(crate) fn open(self) -> bool {
        matches!(self, Turn::Opened | Turn::Stays { open: true })
    }
}

/// One handler call's result, as the breaker sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call<'a> {
    /// Any answer that is not a failure below.
    Answer,
    /// Failed as an outage does (502-504, a timeout, a broken connection),
    /// for this item (a batch's first).
    Outage(&'a str),
    /// Answered 404 or 405, for this item (a batch's first).
    Missing(&'a str),
}

/// A window entry.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// An answer.
    Answer,
    /// A 404 or 405 taken as the item's own answer: no evidence either way.
    Own,
    /// An outage failure, or a spared 404, for this item.
    Failed(String),
}

/// The breaker's window and state.
#[derive(Debug)]
pub(crate) struct Breaker {
    /// Calls in the window; 0 = the breaker is off.
    calls: usize,
    /// Share of outage failures in the window that opens it.
    ratio: f64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The last calls' results, oldest first.
    window: VecDeque<Entry>,
    /// Items spared lately (at most a window of them): a second 404 of
    /// the same item is its own.
    spared: VecDeque<String>,
    /// When it opened; None while it is closed.
    opened: Option<Instant>,
}

impl Breaker {
    pub(crate) fn new(calls: usize, ratio: f64) -> Self {
        Self {
            calls,
            ratio,
            state: Mutex::default(),
        }
    }

    /// Whether it is open now: dispatch starts no call but a probe.
    pub(crate) fn is_open(&self) -> bool {
        self.state.lock().expect("breaker lock").opened.is_some()
    }

    /// Records the result of one call, made at `started`.
    pub(crate) fn record(&self, call: Call<'_>, started: Instant) -> Turn {
        if self.calls == 0 {
            return Turn::Stays { open: false };
        }
        let mut s = self.state.lock().expect("breaker lock");
        let open = s.opened.is_some();
        if s.opened.is_some_and(|at| started < at) {
            return Turn::Stays { open };
        }
        let (entry, spared) = match call {
            Call::Answer if open => {
                s.opened = None;
                s.window.clear();
                s.window.push_back(Entry::Answer);
                return Turn::Closed;
            }
            Call::Answer => (Entry::Answer, false),
            Call::Outage(item) => (Entry::Failed(item.to_owned()), false),
            Call::Missing(item) if open => (Entry::Failed(item.to_owned()), false),
            Call::Missing(item) => {
                let own = matches!(s.window.back(), Some(Entry::Answer))
                    || s.spared.iter().any(|i| i == item);
                if own {
                    (Entry::Own, false)
                } else {
                    s.spared.push_back(item.to_owned());
                    if s.spared.len() > self.calls {
                        s.spared.pop_front();
                    }
                    (Entry::Failed(item.to_owned()), true)
                }
            }
        };
        let failed = matches!(entry, Entry::Failed(_));
        s.window.push_back(entry);
        if s.window.len() > self.calls {
            s.window.pop_front();
        }
        if open || !failed {
            return Turn::Stays { open };
        }
        let items = s
            .window
            .iter()
            .filter_map(|e| match e {
                Entry::Failed(item) => Some(item),
                _ => None,
            })
            .collect::<HashSet<_>>()
            .len();
        let seen = s.window.len();
        if seen * 2 >= self.calls && items as f64 >= self.ratio * seen as f64 {
            s.opened = Some(Instant::now());
            s.spared.clear();
            return Turn::Opened;
        }
        if spared {
            Turn::Spared
        } else {
            Turn::Stays { open: false }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records a call: a failure of a new item each time, or an answer.
    fn record(b: &Breaker, outage: bool) -> Turn {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let item = format!("i{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let call = if outage {
            Call::Outage(&item)
        } else {
            Call::Answer
        };
        b.record(call, Instant::now())
    }

    #[test]
    fn opens_on_a_share_of_failures_and_closes_on_an_answer() {
        let b = Breaker::new(20, 0.5);
        // Half a window of failures opens it; not fewer.
        for _ in 0..9 {
            assert_eq!(record(&b, true), Turn::Stays { open: false });
        }
        assert!(!b.is_open());
        assert_eq!(record(&b, true), Turn::Opened);
        assert!(b.is_open());
        assert_eq!(record(&b, true), Turn::Stays { open: true });
        assert_eq!(record(&b, false), Turn::Closed);
        assert!(!b.is_open());
        // A failure every other call stays below a ratio of 0.6.
        let b = Breaker::new(20, 0.6);
        for _ in 0..40 {
            assert_eq!(record(&b, true), Turn::Stays { open: false });
            assert_eq!(record(&b, false), Turn::Stays { open: false });
        }
        // Then failures only: 12 in the last 20 (10 + 2 of the
        // alternating ones still in the window) open it at the fourth.
        for _ in 0..3 {
            assert_eq!(record(&b, true), Turn::Stays { open: false });
        }
        assert_eq!(record(&b, true), Turn::Opened);
        let off = Breaker::new(0, 0.5);
        for _ in 0..100 {
            assert_eq!(record(&off, true), Turn::Stays { open: false });
        }
    }

    #[test]
    fn an_answer_to_a_call_made_before_it_opened_does_not_close_it() {
        let b = Breaker::new(20, 0.5);
        let before = Instant::now();
        for _ in 0..9 {
            record(&b, true);
        }
        assert_eq!(record(&b, true), Turn::Opened);
        assert_eq!(b.record(Call::Answer, before), Turn::Stays { open: true });
        assert_eq!(b.record(Call::Answer, Instant::now()), Turn::Closed);
    }

    #[test]
    fn a_few_items_failing_again_and_again_do_not_open_it() {
        // Nine poison items alone at the end of the work: however many
        // times they fail, they are nine items of a window of 20, not an
        // outage.
        let b = Breaker::new(20, 0.5);
        for _ in 0..20 {
            assert_eq!(record(&b, false), Turn::Stays { open: false });
        }
        for round in 0..10 {
            for item in 0..9 {
                let turn = b.record(Call::Outage(&format!("poison-{item}")), Instant::now());
                assert_eq!(turn, Turn::Stays { open: false }, "round {round}");
            }
        }
        // A tenth item that fails makes half the window: it opens.
        assert_eq!(
            b.record(Call::Outage("poison-9"), Instant::now()),
            Turn::Opened
        );
    }

    #[test]
    fn a_404_for_every_item_opens_it_without_an_attempt() {
        let b = Breaker::new(20, 0.5);
        let missing = |i: usize| b.record(Call::Missing(&format!("m{i}")), Instant::now());
        // No answer before: each is spared, and half a window opens it.
        for i in 0..9 {
            assert_eq!(missing(i), Turn::Spared, "{i}");
        }
        assert_eq!(missing(9), Turn::Opened);
        assert_eq!(missing(10), Turn::Stays { open: true });
        assert_eq!(b.record(Call::Answer, Instant::now()), Turn::Closed);
    }

    #[test]
    fn a_404_after_an_answer_is_the_items_own() {
        let b = Breaker::new(20, 0.5);
        for round in 0..30 {
            assert_eq!(record(&b, false), Turn::Stays { open: false });
            let item = format!("own-{round}");
            let turn = b.record(Call::Missing(&item), Instant::now());
            assert_eq!(turn, Turn::Stays { open: false }, "round {round}");
        }
        // An item answering 404 alone is spared once, then it is its own.
        let b = Breaker::new(20, 0.5);
        assert_eq!(
            b.record(Call::Missing("lone"), Instant::now()),
            Turn::Spared
        );
        assert_eq!(
            b.record(Call::Missing("lone"), Instant::now()),
            Turn::Stays { open: false }
        );
        // A run of 404s after answers (a redeploy onto a wrong path): the
        // first is its item's own, the next are spared until it opens.
        let b = Breaker::new(20, 0.5);
        for _ in 0..10 {
            record(&b, false);
        }
        let first = b.record(Call::Missing("r0"), Instant::now());
        assert_eq!(first, Turn::Stays { open: false });
        let mut turns = (1..=10).map(|i| b.record(Call::Missing(&format!("r{i}")), Instant::now()));
        assert!(turns.by_ref().take(9).all(|t| t == Turn::Spared));
        assert_eq!(turns.next(), Some(Turn::Opened));
    }
}
