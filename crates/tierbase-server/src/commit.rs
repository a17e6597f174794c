//! Group commit for replies: connections whose batch wrote wait here, without holding a
//! runtime thread, until one store sync covers their writes.
//!
//! Owns: the queue of waiting connections and who syncs for them. Must not touch: commands
//! or sockets. The store's own group sync (`tierbase::device`) already shares one `fdatasync`
//! among threads that sync at once; this shares it among connections, so every connection
//! that wrote while a sync ran shares the next one.
//!
//! Who syncs: a connection that finds no sync running leads: it syncs once, on its runtime
//! thread, for itself and everyone queued, answers them, and hands the lead to the first
//! connection that queued meanwhile (which then syncs for everyone queued by then), or ends
//! the run when nobody waits. No thread sleeps and wakes per round, and at most one runtime
//! thread is in a sync at a time (Redis's event loop syncs its AOF inline, with nothing else
//! running).
//!
//! Order: a connection queues only after its writes returned; a leader takes the whole queue
//! and only then syncs; so each sync covers every write of every connection it answers.

use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use tierbase::store::Store;

/// What a waiting connection is told.
#[derive(Debug)]
enum Ticket {
    /// A sync that covers its writes ended, with this result.
    Done(Result<(), String>),
    /// Its writes are not covered yet, and it now leads: it syncs for everyone queued.
    Lead,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<oneshot::Sender<Ticket>>,
    /// A leader is syncing, or has been handed the lead and will.
    leading: bool,
    stopping: bool,
}

/// The connections waiting for durability.
#[derive(Debug, Default)]
pub(crate) struct Committer {
    queue: Mutex<Queue>,
}

/// A queued connection's end of its ticket. Dropped with an unread lead (its connection's
/// task ended meanwhile), it passes the lead on, so the queue never waits for a leader that
/// is gone.
struct Follower<'a> {
    committer: &'a Committer,
    ticket: Option<oneshot::Receiver<Ticket>>,
}

impl Drop for Follower<'_> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.ticket.take() {
            // Closed first, so that no lead can arrive after the look.
            rx.close();
            if let Ok(Ticket::Lead) = rx.try_recv() {
                self.committer.pass_lead();
            }
        }
    }
}

/// A leader's round: the connections it syncs for. Dropped before it answered them (the sync
/// panicked), it answers them with an error and passes the lead on, so nobody waits forever.
struct Leader<'a> {
    committer: &'a Committer,
    batch: VecDeque<oneshot::Sender<Ticket>>,
}

impl Leader<'_> {
    fn answer(&mut self, result: &Result<(), String>) {
        for waiter in self.batch.drain(..) {
            let _ = waiter.send(Ticket::Done(result.clone()));
        }
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        if !self.batch.is_empty() {
            self.answer(&Err("the sync did not complete".into()));
        }
        self.committer.pass_lead();
    }
}

impl Committer {
    pub(crate) fn new() -> Self {
        Committer::default()
    }

    /// Waits until every write this connection made so far is durable, syncing `store`
    /// itself when it leads. `Err` carries the sync's failure (the store then refuses
    /// writes).
    pub(crate) async fn durable(&self, store: &dyn Store) -> Result<(), String> {
        let mut follower = {
            let mut q = self.queue.lock();
            if q.stopping {
                return Err("the server is shutting down".into());
            }
            if q.leading {
                let (tx, rx) = oneshot::channel();
                q.waiting.push_back(tx);
                Some(Follower {
                    committer: self,
                    ticket: Some(rx),
                })
            } else {
                q.leading = true;
                None
            }
        };
        if let Some(f) = &mut follower {
            let rx = f.ticket.as_mut().expect("a follower holds its ticket");
            let ticket = rx.await;
            f.ticket = None;
            match ticket {
                Ok(Ticket::Done(result)) => return result,
                Ok(Ticket::Lead) => {}
                Err(_) => return Err("the commit queue was dropped".into()),
            }
        }
        // Leading: one sync for this connection and everyone queued now.
        let mut lead = Leader {
            committer: self,
            batch: std::mem::take(&mut self.queue.lock().waiting),
        };
        let result = store.sync().map_err(|e| e.to_string());
        lead.answer(&result);
        result
    }

    /// Hands the lead to the first connection still waiting, or ends the run.
    fn pass_lead(&self) {
        let mut q = self.queue.lock();
        while let Some(next) = q.waiting.pop_front() {
            if next.send(Ticket::Lead).is_ok() {
                return;
            }
            // That connection is gone: try the next.
        }
        q.leading = false;
    }

    /// Refuses further waits (the server is stopping; every connection task has ended).
    pub(crate) fn stop(&self) {
        self.queue.lock().stopping = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tierbase::store::{Change, StoreDescription};

    /// A store whose sync counts, and records the most writes any sync covered.
    #[derive(Debug, Default)]
    struct Counting {
        writes: AtomicU64,
        synced_writes: AtomicU64,
        syncs: AtomicU64,
    }

    impl Store for Counting {
        fn describe(&self) -> StoreDescription {
            StoreDescription {
                store: "counting".into(),
                medium: "memory".into(),
                guarantee: "nothing".into(),
                commit: "immediate".into(),
                ordered: false,
            }
        }
        fn get(&self, _: &[u8]) -> tierbase::Result<Option<Vec<u8>>> {
            Ok(None)
        }
        fn put(&self, _: &[u8], _: &[u8]) -> tierbase::Result<bool> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(true)
        }
        fn delete(&self, _: &[u8]) -> tierbase::Result<bool> {
            Ok(false)
        }
        fn modify(
            &self,
            _: &[u8],
            _: &mut dyn FnMut(Option<&[u8]>) -> Change,
        ) -> tierbase::Result<()> {
            Ok(())
        }
        fn len(&self) -> u64 {
            0
        }
        fn scan(&self, _: u64, _: usize, _: &mut Vec<Vec<u8>>) -> tierbase::Result<u64> {
            Ok(0)
        }
        fn defers_sync(&self) -> bool {
            true
        }
        fn sync(&self) -> tierbase::Result<()> {
            self.syncs.fetch_add(1, Ordering::SeqCst);
            self.synced_writes
                .fetch_max(self.writes.load(Ordering::SeqCst), Ordering::SeqCst);
            Ok(())
        }
        fn metrics(&self) -> Vec<(String, String)> {
            Vec::new()
        }
        fn close(self: Box<Self>) -> tierbase::Result<()> {
            Ok(())
        }
    }

    /// A store whose first sync waits for `release`, and whose second sync panics.
    #[derive(Debug, Default)]
    struct PanicsOnce {
        inner: Counting,
        calls: AtomicU64,
        release: std::sync::atomic::AtomicBool,
    }

    impl Store for PanicsOnce {
        fn describe(&self) -> StoreDescription {
            self.inner.describe()
        }
        fn get(&self, k: &[u8]) -> tierbase::Result<Option<Vec<u8>>> {
            self.inner.get(k)
        }
        fn put(&self, k: &[u8], v: &[u8]) -> tierbase::Result<bool> {
            self.inner.put(k, v)
        }
        fn delete(&self, k: &[u8]) -> tierbase::Result<bool> {
            self.inner.delete(k)
        }
        fn modify(
            &self,
            k: &[u8],
            d: &mut dyn FnMut(Option<&[u8]>) -> Change,
        ) -> tierbase::Result<()> {
            self.inner.modify(k, d)
        }
        fn len(&self) -> u64 {
            0
        }
        fn scan(&self, c: u64, n: usize, out: &mut Vec<Vec<u8>>) -> tierbase::Result<u64> {
            self.inner.scan(c, n, out)
        }
        fn defers_sync(&self) -> bool {
            true
        }
        fn sync(&self) -> tierbase::Result<()> {
            match self.calls.fetch_add(1, Ordering::SeqCst) {
                0 => {
                    while !self.release.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                }
                1 => panic!("injected: sync panics"),
                _ => {}
            }
            self.inner.sync()
        }
        fn metrics(&self) -> Vec<(String, String)> {
            Vec::new()
        }
        fn close(self: Box<Self>) -> tierbase::Result<()> {
            Ok(())
        }
    }

    /// A leader whose sync panics answers the connections it led with an error and passes
    /// the lead on: nobody waits forever, and later waits are synced normally. The first
    /// sync holds until seven connections have queued behind it; the first of them is handed
    /// the lead, takes the other six and its sync panics.
    #[test]
    fn a_panicking_sync_answers_its_waiters_and_frees_the_lead() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let store = Arc::new(PanicsOnce::default());
        let committer = Arc::new(Committer::new());
        rt.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..8 {
                let (store, committer) = (store.clone(), committer.clone());
                tasks.push(tokio::spawn(async move {
                    store.put(b"k", b"v").unwrap();
                    committer.durable(store.as_ref()).await
                }));
            }
            while committer.queue.lock().waiting.len() < 7 {
                std::thread::yield_now();
            }
            store.release.store(true, Ordering::SeqCst);
            let (mut panicked, mut refused) = (0, 0);
            for t in tasks {
                match t.await {
                    Err(e) if e.is_panic() => panicked += 1,
                    Err(e) => panic!("{e}"),
                    Ok(Err(_)) => refused += 1,
                    Ok(Ok(())) => {}
                }
            }
            assert_eq!(panicked, 1, "only the leader whose sync panicked");
            assert_eq!(
                refused, 6,
                "the connections it led are told their sync failed"
            );
            assert!(!committer.queue.lock().leading, "the lead was freed");
            store.put(b"k", b"v").unwrap();
            committer.durable(store.as_ref()).await.unwrap();
        });
        assert!(store.inner.syncs.load(Ordering::SeqCst) >= 1);
        assert!(!committer.queue.lock().leading);
    }

    /// Sixteen tasks on two runtime threads write and wait: each wait returns only after a
    /// sync that covered its write; syncs are shared (fewer than waits); some waits are
    /// abandoned at once (queued or holding the lead), and the queue still drains, with
    /// nobody left leading; once stopped, waits are refused.
    #[test]
    fn every_wait_is_covered_by_a_later_sync_and_the_lead_survives_abandoned_waits() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let store = Arc::new(Counting::default());
        let committer = Arc::new(Committer::new());
        let waits = Arc::new(AtomicU64::new(0));
        rt.block_on(async {
            let mut tasks = Vec::new();
            for t in 0..16u64 {
                let (store, committer, waits) = (store.clone(), committer.clone(), waits.clone());
                tasks.push(tokio::spawn(async move {
                    for i in 0..300u64 {
                        store.put(b"k", b"v").unwrap();
                        let mine = store.writes.load(Ordering::SeqCst);
                        if (t + i) % 7 == 0 {
                            let _ = tokio::time::timeout(
                                std::time::Duration::ZERO,
                                committer.durable(store.as_ref()),
                            )
                            .await;
                            continue;
                        }
                        committer.durable(store.as_ref()).await.unwrap();
                        assert!(
                            store.synced_writes.load(Ordering::SeqCst) >= mine,
                            "a wait returned before a sync covered write {mine}"
                        );
                        waits.fetch_add(1, Ordering::SeqCst);
                        if i % 3 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let (syncs, waited) = (
            store.syncs.load(Ordering::SeqCst),
            waits.load(Ordering::SeqCst),
        );
        assert!(waited > 0 && syncs > 0, "{waited} waits, {syncs} syncs");
        {
            let q = committer.queue.lock();
            assert!(!q.leading, "the last run ended");
            assert!(q.waiting.is_empty());
        }
        committer.stop();
        assert!(rt.block_on(committer.durable(store.as_ref())).is_err());
    }
}
