//! Group commit for replies: connections whose batch wrote wait here, without holding a
//! runtime thread, until one store sync covers their writes.
//!
//! Owns: the sync a group of waiting connections shares; the queue and its lead are
//! [`crate::lead`]'s. Must not touch: commands or sockets. The store's own group sync (`tierbase::device`) already shares one `fdatasync`
//! among threads that sync at once; this shares it among connections, so every connection
//! that wrote while a sync ran shares the next one.
//!
//! Who syncs: a connection that finds no sync running leads: it syncs once, on its runtime
//! thread, for itself and everyone queued, answers them, and hands the lead to the first
//! connection that queued meanwhile (which then syncs for everyone queued by then), or ends
//! the run when nobody waits. No thread sleeps and wakes per round, and at most one runtime
//! thread is in a sync at a time (Redis's event loop syncs its AOF inline, once per pass over
//! the ready connections, with nothing else running).
//!
//! With one runtime thread, nobody can queue while the only thread syncs, so a leader that
//! synced at once synced for itself alone: one sync per write (measured on a disk: 4.3 k
//! durable SETs/s before, 28–30 k after, docs/BENCHMARKS.md Figure 25). There a leader (a
//! connection that finds no sync running, or is handed the lead) first yields to the runtime
//! once, so that the connections already scheduled on the thread run their requests and
//! queue, about as Redis's pass does. With more threads the others queue during the sync, and
//! the yield only delays the leader (measured: throughput 0.80–1.04×, p99 up 1–26 %), so it
//! is not made.
//!
//! Order: a connection queues only after its writes returned; a leader takes the whole queue
//! and only then syncs; so each sync covers every write of every connection it answers.

use tierbase::store::Store;

use crate::lead::LeadQueue;

/// The connections waiting for durability.
pub(crate) struct Committer {
    lead: LeadQueue<(), ()>,
}

impl Committer {
    /// `gather`: a leader yields to its runtime once before it takes the queue (for a runtime
    /// with one thread; see the module doc).
    pub(crate) fn new(gather: bool) -> Self {
        Committer {
            lead: if gather {
                LeadQueue::gathering()
            } else {
                LeadQueue::default()
            },
        }
    }

    /// Waits until every write this connection made so far is durable, syncing `store`
    /// itself when it leads. `Err` carries the sync's failure (the store then refuses
    /// writes).
    pub(crate) async fn durable(&self, store: &dyn Store) -> Result<(), String> {
        self.lead
            .run((), |waits| {
                // One sync for this connection and everyone queued now.
                let synced = store.sync().map_err(|e| e.to_string());
                vec![synced; waits.len()]
            })
            .await
    }

    /// Refuses further waits (the server is stopping; every connection task has ended).
    pub(crate) fn stop(&self) {
        self.lead.stop();
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
    /// the lead, takes the other six and its sync panics. (The seven start once the first
    /// sync holds: a leader yields once before it takes the queue, and would otherwise take
    /// some of them into the first round.)
    #[test]
    fn a_panicking_sync_answers_its_waiters_and_frees_the_lead() {
        for gather in [false, true] {
            panicking_sync_answers_and_frees_the_lead(gather);
        }
    }

    fn panicking_sync_answers_and_frees_the_lead(gather: bool) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let store = Arc::new(PanicsOnce::default());
        let committer = Arc::new(Committer::new(gather));
        rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..8 {
                let (store_, committer) = (store.clone(), committer.clone());
                tasks.push(tokio::spawn(async move {
                    store_.put(b"k", b"v").unwrap();
                    committer.durable(store_.as_ref()).await
                }));
                // The first leads alone: the others start once its sync holds.
                while i == 0 && store.calls.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
            }
            while committer.lead.waiting() < 7 {
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
            assert!(!committer.lead.leading(), "the lead was freed");
            store.put(b"k", b"v").unwrap();
            committer.durable(store.as_ref()).await.unwrap();
        });
        assert!(store.inner.syncs.load(Ordering::SeqCst) >= 1);
        assert!(!committer.lead.leading());
    }

    /// Sixteen tasks on two runtime threads write and wait: each wait returns only after a
    /// sync that covered its write; syncs are shared (fewer than waits); some waits are
    /// abandoned at once (queued or holding the lead), and the queue still drains, with
    /// nobody left leading; once stopped, waits are refused.
    #[test]
    fn every_wait_is_covered_by_a_later_sync_and_the_lead_survives_abandoned_waits() {
        // Gathering leaders are also abandoned while they yield.
        for gather in [false, true] {
            waits_covered_and_lead_survives(gather);
        }
    }

    fn waits_covered_and_lead_survives(gather: bool) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let store = Arc::new(Counting::default());
        let committer = Arc::new(Committer::new(gather));
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
            // A lead lost with an abandoned wait would leave the rest waiting forever.
            let all = async {
                for t in tasks {
                    t.await.unwrap();
                }
            };
            tokio::time::timeout(std::time::Duration::from_secs(60), all)
                .await
                .expect("every wait ended");
        });
        let (syncs, waited) = (
            store.syncs.load(Ordering::SeqCst),
            waits.load(Ordering::SeqCst),
        );
        assert!(waited > 0 && syncs > 0, "{waited} waits, {syncs} syncs");
        assert!(!committer.lead.leading(), "the last run ended");
        assert_eq!(committer.lead.waiting(), 0);
        committer.stop();
        assert!(rt.block_on(committer.durable(store.as_ref())).is_err());
    }

    /// On one runtime thread (a multi-thread runtime with one worker, as `serve --threads 1`
    /// builds), eight connections that write and wait share one sync: the first leader yields
    /// before it takes the queue, so the other seven run their writes and queue first.
    /// (Without the yield each syncs alone: nobody can queue while the only thread syncs.)
    #[test]
    fn one_runtime_thread_gathers_every_ready_connection_into_one_sync() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let store = Arc::new(Counting::default());
        let committer = Arc::new(Committer::new(true));
        let (s, c) = (store.clone(), committer.clone());
        // Spawned from a task on the worker, so all eight are scheduled before any runs.
        rt.block_on(rt.spawn(async move {
            let mut tasks = Vec::new();
            for _ in 0..8 {
                let (store, committer) = (s.clone(), c.clone());
                tasks.push(tokio::spawn(async move {
                    store.put(b"k", b"v").unwrap();
                    committer.durable(store.as_ref()).await.unwrap();
                    assert_eq!(store.synced_writes.load(Ordering::SeqCst), 8);
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        }))
        .unwrap();
        assert_eq!(
            store.syncs.load(Ordering::SeqCst),
            1,
            "one sync for all eight"
        );
        assert!(!committer.lead.leading());
    }

    /// A leader dropped while it yields (its connection's task ended) passes the lead on: the
    /// next wait leads and syncs instead of queueing behind a leader that is gone.
    #[test]
    fn a_leader_dropped_while_it_yields_frees_the_lead() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store = Counting::default();
        let committer = Committer::new(true);
        rt.block_on(async {
            store.put(b"k", b"v").unwrap();
            {
                // Polled once (it takes the lead and yields), then dropped.
                let mut wait = std::pin::pin!(committer.durable(&store));
                let first = std::future::poll_fn(|cx| {
                    std::task::Poll::Ready(wait.as_mut().poll(cx).is_pending())
                })
                .await;
                assert!(first, "the leader yields before it syncs");
                assert!(committer.lead.leading());
            }
            assert_eq!(store.syncs.load(Ordering::SeqCst), 0, "it never synced");
            assert!(!committer.lead.leading(), "it passed the lead on");
            committer.durable(&store).await.unwrap();
        });
        assert_eq!(store.syncs.load(Ordering::SeqCst), 1);
    }
}
