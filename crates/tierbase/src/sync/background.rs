//! Background threads of a store (reclaimers, growers, flushers): starting, waking early, and
//! stopping them.
//!
//! Owns: the thread life cycle. Must not touch: what the threads do — each store hands in its
//! own body.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

/// A background thread; stopped (and joined) on [`Background::stop`] or drop.
#[derive(Debug)]
pub struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Given to a background body: waits up to the interval (or until woken) and says whether to
/// go on.
#[derive(Debug)]
pub struct Ticker {
    stop: Arc<AtomicBool>,
    interval: Duration,
}

impl Ticker {
    /// Sleeps until the next round; `false` once the owner is stopping.
    pub fn next(&self) -> bool {
        if self.stopping() {
            return false;
        }
        std::thread::park_timeout(self.interval);
        !self.stopping()
    }

    /// Whether the owner asked the thread to stop (for long bodies to check between steps).
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

impl Background {
    /// Runs `body(&context, ticker)` on a new thread named `name`. Fails only if the OS
    /// refuses a thread.
    pub fn spawn<T: Send + 'static>(
        name: &str,
        context: T,
        interval: Duration,
        body: impl FnOnce(&T, &Ticker) + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = Ticker {
            stop: stop.clone(),
            interval,
        };
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&context, &ticker))?;
        Ok(Background {
            stop,
            thread: Some(thread),
        })
    }

    /// The thread, to wake it early with `unpark`.
    pub fn handle(&self) -> Option<Thread> {
        self.thread.as_ref().map(|t| t.thread().clone())
    }

    /// Stops the thread and waits for it.
    pub fn stop(&mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn runs_until_stopped_and_wakes_early() {
        let rounds = Arc::new(AtomicU64::new(0));
        let mut bg =
            Background::spawn("test", rounds.clone(), Duration::from_secs(3600), |r, t| {
                while t.next() {
                    r.fetch_add(1, Ordering::AcqRel);
                }
            })
            .unwrap();
        // Wake it until it has counted one round (an hour-long interval would never end).
        while rounds.load(Ordering::Acquire) == 0 {
            bg.handle().unwrap().unpark();
            std::thread::yield_now();
        }
        bg.stop();
        let n = rounds.load(Ordering::Acquire);
        assert!(n >= 1);
        assert!(bg.handle().is_none());
    }
}
