//! Group commit for file syncs: concurrent writers that each need "everything I wrote is
//! durable" share one `fdatasync` instead of queueing for one each.
//!
//! Owns: the leader/follower protocol. Must not touch: what is synced (the caller passes the
//! sync call).
//!
//! Protocol: a writer takes a ticket *after* its writes. If a sync that started after its
//! ticket was taken has completed, it is done; else, if no sync runs, it becomes the leader:
//! it notes the newest ticket handed out, syncs once, and publishes that ticket as synced for
//! everyone waiting; else it waits for the running sync and checks again. A failed sync is
//! sticky (as an fsync error must be: the kernel may already have dropped the dirty pages), so
//! every later caller gets the error too.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

#[derive(Debug, Default)]
struct State {
    synced: u64,
    running: bool,
    failed: Option<String>,
}

/// Shared state of one file's group commit.
#[derive(Debug, Default)]
pub(crate) struct GroupSync {
    tickets: AtomicU64,
    state: Mutex<State>,
    done: Condvar,
}

impl GroupSync {
    /// Fails the group as a failed sync would (sticky): for a write or sync the caller made
    /// outside [`GroupSync::sync`] that failed, after which no later sync may report the file
    /// durable (the lost write, or the kernel's dropped pages, would be missing from it).
    pub(crate) fn fail(&self, reason: String) {
        let mut st = self.state.lock();
        if st.failed.is_none() {
            st.failed = Some(reason);
        }
        self.done.notify_all();
    }

    /// The sticky error, if the group has failed.
    pub(crate) fn failed(&self) -> Option<String> {
        self.state.lock().failed.clone()
    }

    /// Makes every write the caller finished before this call durable, with `sync` (run by at
    /// most one caller at a time). Returns how many syncs this caller ran (0 or 1), or the
    /// sticky error text.
    pub(crate) fn sync(
        &self,
        sync: impl Fn() -> std::io::Result<()>,
    ) -> std::result::Result<u64, String> {
        let mine = self.tickets.fetch_add(1, Ordering::AcqRel) + 1;
        let mut st = self.state.lock();
        loop {
            if let Some(e) = &st.failed {
                return Err(e.clone());
            }
            if st.synced >= mine {
                return Ok(0);
            }
            if st.running {
                self.done.wait(&mut st);
                continue;
            }
            st.running = true;
            let target = self.tickets.load(Ordering::Acquire);
            drop(st);
            let result = sync();
            st = self.state.lock();
            st.running = false;
            match result {
                Ok(()) => st.synced = st.synced.max(target),
                Err(e) => st.failed = Some(e.to_string()),
            }
            self.done.notify_all();
            if let Some(e) = &st.failed {
                return Err(e.clone());
            }
            return Ok(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn concurrent_callers_share_syncs_and_each_is_covered() {
        let g = GroupSync::default();
        // `written` is what callers wrote; a sync "persists" it into `durable`.
        let written = AtomicU64::new(0);
        let durable = AtomicU64::new(0);
        let syncs = AtomicU64::new(0);
        let in_sync = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let me = written.fetch_add(1, Ordering::AcqRel) + 1;
                        g.sync(|| {
                            assert!(!in_sync.swap(true, Ordering::AcqRel), "two leaders");
                            durable.fetch_max(written.load(Ordering::Acquire), Ordering::AcqRel);
                            syncs.fetch_add(1, Ordering::AcqRel);
                            in_sync.store(false, Ordering::Release);
                            Ok(())
                        })
                        .unwrap();
                        // What this caller wrote before asking is durable now.
                        assert!(durable.load(Ordering::Acquire) >= me);
                    }
                });
            }
        });
        assert!(syncs.load(Ordering::Acquire) <= 1600);
    }

    #[test]
    fn a_failed_sync_is_sticky() {
        let g = GroupSync::default();
        assert!(g.sync(|| Err(std::io::Error::other("EIO"))).is_err());
        assert_eq!(g.sync(|| Ok(())), Err("EIO".to_string()));
        let g = GroupSync::default();
        g.fail("a write failed".into());
        g.fail("later".into());
        assert_eq!(g.sync(|| Ok(())), Err("a write failed".to_string()));
    }
}
