//! Background threads of a store: the reclaimer (compaction) and the grower (extends the
//! region before clients run out of blocks, so growth is not paid inside an insert).
//!
//! Owns: starting, waking and stopping those threads. Must not touch: what they do (see
//! `compact` and `store`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use super::store::Inner;

/// A store's background thread; stopped (and joined) on drop.
pub(crate) struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Given to a background body: waits up to the interval (or until woken) and says whether to
/// go on.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    interval: Duration,
}

impl Ticker {
    /// Sleeps until the next round; `false` once the store is closing.
    pub(crate) fn next(&self) -> bool {
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        std::thread::park_timeout(self.interval);
        !self.stop.load(Ordering::Acquire)
    }
}

impl Background {
    /// Runs `body(inner, ticker)` on a new thread named `name`.
    pub(crate) fn spawn(
        name: &str,
        inner: Arc<Inner>,
        interval: Duration,
        body: impl FnOnce(&Inner, &Ticker) + Send + 'static,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = Ticker {
            stop: stop.clone(),
            interval,
        };
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&inner, &ticker))
            .ok();
        Background { stop, thread }
    }

    /// The thread, to wake it early.
    pub(crate) fn handle(&self) -> Option<Thread> {
        self.thread.as_ref().map(|t| t.thread().clone())
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}
