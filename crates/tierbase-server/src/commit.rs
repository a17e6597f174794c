//! Group commit for replies: connections whose batch wrote wait here, without holding a
//! runtime thread, until one store sync covers their writes.
//!
//! Owns: the commit thread and its queue of waiting connections. Must not touch: commands or
//! sockets. The store's own group sync (`tierbase::device`) already shares one `fdatasync`
//! among threads that sync at once; this puts the waiting outside the runtime, so a
//! connection waiting for the disk costs no worker thread and every connection that wrote
//! while a sync ran shares the next one.
//!
//! Order: a connection enqueues only after its writes returned; the thread takes the whole
//! queue and only then syncs; so each sync covers every write of every connection it
//! answers.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use tierbase::store::Store;

type Waiter = oneshot::Sender<Result<(), String>>;

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<Waiter>,
    stopping: bool,
}

/// The commit thread's handle.
#[derive(Debug)]
pub(crate) struct Committer {
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Committer {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Committer {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        })
    }

    /// Waits until every write this connection made so far is durable. `Err` carries the
    /// sync's failure (the store then refuses writes).
    pub(crate) async fn durable(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        {
            let mut q = self.queue.lock();
            if q.stopping {
                return Err("the server is shutting down".into());
            }
            q.waiting.push(tx);
        }
        self.wake.notify_one();
        rx.await
            .unwrap_or_else(|_| Err("the commit thread stopped".into()))
    }

    /// The commit thread: sync once per round for everyone queued, until [`Committer::stop`]
    /// (it answers whoever is still queued first). Returns the number of syncs.
    pub(crate) fn run(&self, store: &dyn Store) -> u64 {
        let mut syncs = 0;
        loop {
            let batch = {
                let mut q = self.queue.lock();
                while q.waiting.is_empty() && !q.stopping {
                    self.wake.wait(&mut q);
                }
                if q.waiting.is_empty() {
                    return syncs;
                }
                std::mem::take(&mut q.waiting)
            };
            let result = store.sync().map_err(|e| e.to_string());
            syncs += 1;
            for waiter in batch {
                let _ = waiter.send(result.clone());
            }
        }
    }

    /// Ends [`Committer::run`] once the queue is empty.
    pub(crate) fn stop(&self) {
        self.queue.lock().stopping = true;
        self.wake.notify_all();
    }
}
