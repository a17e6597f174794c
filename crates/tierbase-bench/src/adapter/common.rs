//! What several adapters do alike, written once: the run directory, the emulation set-up of
//! [`StoreInfo`] (noted by tierbase's stores, refused by the baselines that do their own I/O),
//! the durability label of a sync on tmpfs, the value hand-over of a `get`, the bounded scan over
//! a fallible iterator, the background sync thread of the deferred durability levels, and the
//! adapters' shared tests.
//!
//! Must not touch: anything one store does its own way (its options, its notes, its client).

use std::path::Path;

use tierbase::device::DeviceProfile;

use super::StoreInfo;
#[cfg(any(feature = "lmdb", feature = "redb", feature = "rocksdb"))]
use super::StoreOptions;
use crate::error::{BenchError, Result};

/// Creates the store's directory `dir` (and its parents) if missing.
pub(super) fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io("create directory", dir, e))
}

/// Records the emulated profile, if any, in `info`, with a note saying what is charged to it
/// (`charged`: "region reads and persists charged to the profile").
pub(super) fn note_emulation(info: &mut StoreInfo, emulate: Option<&DeviceProfile>, charged: &str) {
    if let Some(p) = emulate {
        info.emulated = Some(p.name.clone());
        info.notes.push(format!("emulated {}: {charged}", p.name));
    }
}

/// Refuses `--emulate` for store `name`, whose engine (`engine`: "LMDB") does its own I/O.
#[cfg(any(feature = "lmdb", feature = "redb", feature = "rocksdb"))]
pub(super) fn refuse_emulation(name: &str, engine: &str, o: &StoreOptions) -> Result<()> {
    match &o.emulate {
        Some(p) => Err(BenchError::unsupported(
            name,
            format!(
                "device emulation (--emulate {}): {engine} does its own I/O; run it on the real \
                 medium",
                p.name
            ),
        )),
        None => Ok(()),
    }
}

/// Whether `medium` (from [`super::file_medium`]) is memory-backed: there a sync reaches
/// memory only.
pub(super) fn on_tmpfs(medium: &str) -> bool {
    medium.starts_with("tmpfs file")
}

/// The durability label of a store whose writes wait for a sync (`synced`: "wal+fsync"): on
/// tmpfs the sync reaches memory only, so the label says the write survives a process crash.
pub(super) fn synced_durability(synced: &str, medium: &str) -> String {
    if on_tmpfs(medium) {
        format!("{synced} on tmpfs (process-crash)")
    } else {
        synced.to_string()
    }
}

/// The note of a baseline that fsyncs on tmpfs.
#[cfg(any(feature = "lmdb", feature = "redb", feature = "rocksdb"))]
pub(super) const TMPFS_FSYNC_NOTE: &str =
    "on tmpfs an fsync reaches memory only: no power-loss durability";

/// Hands a looked-up value to a [`super::Client::get`] caller: moves it into `out` and says
/// whether there was one (`out` is left alone when not).
pub(super) fn found_into(value: Option<Vec<u8>>, out: &mut Vec<u8>) -> bool {
    match value {
        Some(v) => {
            *out = v;
            true
        }
        None => false,
    }
}

/// Visits the first `count` of `entries` (each a record or the error that ended the walk) and
/// returns how many were visited; an entry past `count` is not read.
#[cfg(any(feature = "lmdb", feature = "redb"))]
pub(super) fn visit_first<T>(
    count: usize,
    entries: impl IntoIterator<Item = Result<T>>,
    mut visit: impl FnMut(T),
) -> Result<usize> {
    let mut visited = 0;
    for entry in entries.into_iter().take(count) {
        visit(entry?);
        visited += 1;
    }
    Ok(visited)
}

#[cfg(any(feature = "lmdb", feature = "redb"))]
pub(super) use self::background::{Background, Job};

/// The background thread of the deferred durability levels (`eventual`) of the baselines.
#[cfg(any(feature = "lmdb", feature = "redb"))]
mod background {
    use std::sync::Arc;
    use std::sync::mpsc::{self, RecvTimeoutError, Sender};
    use std::thread::JoinHandle;
    use std::time::Duration;

    use parking_lot::Mutex;

    use crate::error::{BenchError, Result};

    /// What a background thread does, which names it.
    #[derive(Clone, Copy, Debug)]
    pub(in crate::adapter) enum Job {
        /// Syncs the store (thread `<store>-sync`).
        #[cfg(feature = "lmdb")]
        Sync,
        /// Makes the store's commits durable (thread `<store>-flush`).
        #[cfg(feature = "redb")]
        Flush,
    }

    impl Job {
        fn name(self) -> &'static str {
            match self {
                #[cfg(feature = "lmdb")]
                Job::Sync => "sync",
                #[cfg(feature = "redb")]
                Job::Flush => "flush",
            }
        }

        fn spawn_op(self) -> &'static str {
            match self {
                #[cfg(feature = "lmdb")]
                Job::Sync => "spawn sync thread for",
                #[cfg(feature = "redb")]
                Job::Flush => "spawn flush thread for",
            }
        }
    }

    /// A thread that runs a task every interval until stopped, keeping the task's first error
    /// (`E`) for [`Background::stop`].
    #[derive(Debug)]
    pub(in crate::adapter) struct Background<E> {
        stop: Sender<()>,
        thread: JoinHandle<()>,
        error: Arc<Mutex<Option<E>>>,
        /// "the lmdb sync thread", for a panic.
        who: String,
    }

    impl<E: Send + 'static> Background<E> {
        /// Starts the thread `<store>-<job>`, running `task` every `every`.
        pub(in crate::adapter) fn spawn(
            store: &'static str,
            job: Job,
            every: Duration,
            mut task: impl FnMut() -> std::result::Result<(), E> + Send + 'static,
        ) -> Result<Self> {
            let (stop, rx) = mpsc::channel::<()>();
            let error = Arc::new(Mutex::new(None));
            let first_error = Arc::clone(&error);
            let thread = std::thread::Builder::new()
                .name(format!("{store}-{}", job.name()))
                .spawn(move || {
                    while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                        if let Err(e) = task() {
                            first_error.lock().get_or_insert(e);
                        }
                    }
                })
                .map_err(|e| BenchError::io(job.spawn_op(), store, e))?;
            Ok(Background {
                stop,
                thread,
                error,
                who: format!("the {store} {} thread", job.name()),
            })
        }

        /// Stops the thread and waits for it; returns the task's first error, if any.
        pub(in crate::adapter) fn stop(self) -> Result<Option<E>> {
            drop(self.stop);
            self.thread
                .join()
                .map_err(|_| BenchError::WorkerPanicked(self.who))?;
            Ok(self.error.lock().take())
        }
    }
}

/// Tests every adapter runs alike.
#[cfg(test)]
pub(super) mod tests {
    #[cfg(any(feature = "lmdb", feature = "redb"))]
    use std::path::Path;
    #[cfg(any(feature = "lmdb", feature = "redb"))]
    use std::time::Duration;

    #[cfg(any(feature = "lmdb", feature = "redb"))]
    use tierbase::device::Durability;

    use super::super::{Store, StoreOptions};
    use crate::error::Result;

    /// Opens a store with `o`, runs the contract suite on it and closes it.
    pub(in crate::adapter) fn contract_suite_on<S: Store + 'static>(
        o: &StoreOptions,
        open: impl Fn(&StoreOptions) -> Result<S>,
    ) {
        let store = open(o).unwrap();
        crate::contract::run_contract_suite(&store).unwrap_or_else(|e| panic!("{e}"));
        Box::new(store).close().unwrap();
    }

    /// [`contract_suite_on`] at each deferred durability level (eventual every 5 ms, none),
    /// each in a new directory; `closed` then checks that directory.
    #[cfg(any(feature = "lmdb", feature = "redb"))]
    pub(in crate::adapter) fn contract_suite_deferred<S: Store + 'static>(
        open: impl Fn(&StoreOptions) -> Result<S>,
        closed: impl Fn(&Path),
    ) {
        for level in [
            Durability::Eventual(Duration::from_millis(5)),
            Durability::None,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut o = StoreOptions::new(dir.path());
            o.durability = level;
            contract_suite_on(&o, &open);
            closed(dir.path());
        }
    }

    /// The store refuses `--emulate` with the typed "unsupported" error.
    #[cfg(any(feature = "lmdb", feature = "redb"))]
    pub(in crate::adapter) fn emulation_is_refused<S>(open: impl Fn(&StoreOptions) -> Result<S>) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = StoreOptions::new(dir.path());
        o.emulate = tierbase::device::Catalogue::builtin()
            .profiles()
            .first()
            .cloned();
        assert!(o.emulate.is_some());
        match open(&o) {
            Ok(_) => panic!("emulation must be refused"),
            Err(e) => assert!(e.is_unsupported(), "{e}"),
        }
    }
}
