//! One task at a time does a piece of work for every connection that asked for it meanwhile,
//! without holding a runtime thread for those that wait: a lead queue.
//!
//! Owns: the queue of waiting connections, who leads, and how the lead passes on. Must not
//! touch: the work itself (the caller passes it in), commands or sockets. Two users: the
//! group commit ([`crate::commit`]: one store sync for everyone queued) and the write queue
//! of stores with a single writer (one task applies every connection's SETs in turn, so
//! runtime threads do not park on the store's writer lock).
//!
//! Who works: a connection that finds nobody leading leads: it runs the work (in a gathering
//! queue, after yielding to its runtime once, as does one handed the lead), on its runtime
//! thread, for its own job and every job queued by then (at most a set number of them, if
//! the queue has a round limit), answers their connections, and
//! hands the lead to the first connection that queued meanwhile (which then works for
//! everyone queued by then), or ends the run when nobody waits. A waiting connection's task
//! is parked in the runtime, not its thread: the thread serves other connections.
//!
//! Order: a leader takes the whole queue and only then works, so the work covers every job
//! it answers; a connection waits for its answer before it executes its next request.

use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// What a waiting connection is told.
enum Ticket<J, A> {
    /// Its job was done, with this answer (`Err`: the work did not complete).
    Done(Result<A, String>),
    /// Its job was not done yet, and it now leads: here is the job back.
    Lead(J),
}

type Waiter<J, A> = (J, oneshot::Sender<Ticket<J, A>>);

struct Queue<J, A> {
    waiting: VecDeque<Waiter<J, A>>,
    /// A leader is working, or has been handed the lead and will.
    leading: bool,
    stopping: bool,
}

/// Connections waiting for work of one kind; see the module doc.
pub(crate) struct LeadQueue<J, A> {
    queue: Mutex<Queue<J, A>>,
    /// Most queued jobs a leader takes for one round besides its own.
    round: usize,
    /// A task that takes the lead (finding none, or handed it) yields to its runtime once
    /// before it takes the queue ([`LeadQueue::gathering`]).
    gather: bool,
}

/// A queued connection's end of its ticket. Dropped with an unread lead (its connection's
/// task ended meanwhile), it passes the lead on, so the queue never waits for a leader that
/// is gone, and its job is dropped undone. (A job still queued when its connection ends is
/// done by a later leader, unanswered.)
struct Follower<'a, J, A> {
    queue: &'a LeadQueue<J, A>,
    ticket: Option<oneshot::Receiver<Ticket<J, A>>>,
}

impl<J, A> Drop for Follower<'_, J, A> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.ticket.take() {
            // Closed first, so that no lead can arrive after the look.
            rx.close();
            if let Ok(Ticket::Lead(_)) = rx.try_recv() {
                self.queue.pass_lead();
            }
        }
    }
}

/// A leader's round: the connections it works for. Dropped before it answered them (the work
/// panicked), it answers them with an error and passes the lead on, so nobody waits forever.
/// Dropped before it took any (its task was dropped while it yielded, in a gathering queue),
/// it passes the lead on, and its own job is dropped undone.
struct Leader<'a, J, A> {
    queue: &'a LeadQueue<J, A>,
    answer_to: Vec<oneshot::Sender<Ticket<J, A>>>,
}

impl<J, A> Drop for Leader<'_, J, A> {
    fn drop(&mut self) {
        for waiter in self.answer_to.drain(..) {
            let _ = waiter.send(Ticket::Done(Err("the work did not complete".into())));
        }
        self.queue.pass_lead();
    }
}

impl<J, A> std::fmt::Debug for LeadQueue<J, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.queue.lock();
        f.debug_struct("LeadQueue")
            .field("waiting", &q.waiting.len())
            .field("leading", &q.leading)
            .field("stopping", &q.stopping)
            .finish()
    }
}

impl<J, A> Default for LeadQueue<J, A> {
    fn default() -> Self {
        LeadQueue {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                leading: false,
                stopping: false,
            }),
            round: usize::MAX,
            gather: false,
        }
    }
}

impl<J, A> LeadQueue<J, A> {
    /// A queue whose leaders take at most `round` queued jobs each (the rest wait for the
    /// next leader, handed the lead at once), so that a leader's own reply never waits for
    /// more than that much of others' work, however many connections queue.
    pub(crate) fn with_round(round: usize) -> Self {
        LeadQueue {
            round: round.max(1),
            ..LeadQueue::default()
        }
    }

    /// A queue whose leaders (a task that finds no leader, or is handed the lead) first yield
    /// to their runtime once, so that connections already scheduled on the leader's thread run
    /// their requests and queue before the round is taken: one round then covers about what
    /// Redis's event loop covers with one pass (it syncs its AOF once per pass), not just the
    /// jobs that happened to queue before the lead was free.
    pub(crate) fn gathering() -> Self {
        LeadQueue {
            gather: true,
            ..LeadQueue::default()
        }
    }

    /// Gets `job` done: by this task when nobody leads (or the lead is handed to it), else
    /// by the leader of the run it joins. `work` gets the jobs of a round, this task's
    /// first, and returns one answer per job, in order; it is called only by a leader.
    /// `Err` when the work did not complete (it panicked) or the queue is stopped.
    pub(crate) async fn run(
        &self,
        job: J,
        work: impl FnOnce(Vec<J>) -> Vec<Result<A, String>>,
    ) -> Result<A, String> {
        // `Err(job)`: this task leads (the queue's guard is gone before the lead awaits).
        let joined = {
            let mut q = self.queue.lock();
            if q.stopping {
                return Err("the server is shutting down".into());
            }
            if q.leading {
                let (tx, rx) = oneshot::channel();
                q.waiting.push_back((job, tx));
                Ok(rx)
            } else {
                q.leading = true;
                Err(job)
            }
        };
        let mut follower = match joined {
            Ok(rx) => Follower {
                queue: self,
                ticket: Some(rx),
            },
            Err(job) => return self.lead(job, work).await,
        };
        let rx = follower
            .ticket
            .as_mut()
            .expect("a follower holds its ticket");
        let ticket = rx.await;
        follower.ticket = None;
        match ticket {
            Ok(Ticket::Done(answer)) => answer,
            Ok(Ticket::Lead(job)) => self.lead(job, work).await,
            Err(_) => Err("the queue was dropped".into()),
        }
    }

    /// Works for `own` and every job queued now (after one yield, for a gathering queue);
    /// answers their connections.
    async fn lead(
        &self,
        own: J,
        work: impl FnOnce(Vec<J>) -> Vec<Result<A, String>>,
    ) -> Result<A, String> {
        // Built first: a leader dropped while it yields passes the lead on.
        let mut lead = Leader {
            queue: self,
            answer_to: Vec::new(),
        };
        if self.gather {
            tokio::task::yield_now().await;
        }
        let batch: Vec<Waiter<J, A>> = {
            let mut q = self.queue.lock();
            let n = q.waiting.len().min(self.round);
            q.waiting.drain(..n).collect()
        };
        let mut jobs = Vec::with_capacity(batch.len() + 1);
        jobs.push(own);
        lead.answer_to.reserve(batch.len());
        for (job, tx) in batch {
            jobs.push(job);
            lead.answer_to.push(tx);
        }
        let n = jobs.len();
        let mut answers = work(jobs).into_iter();
        let mine = answers
            .next()
            .unwrap_or_else(|| Err("the work gave no answer".into()));
        for waiter in lead.answer_to.drain(..) {
            let answer = answers
                .next()
                .unwrap_or_else(|| Err(format!("the work gave fewer than {n} answers")));
            let _ = waiter.send(Ticket::Done(answer));
        }
        drop(lead); // passes the lead on
        mine
    }

    /// Hands the lead to the first connection still waiting, or ends the run.
    fn pass_lead(&self) {
        let mut q = self.queue.lock();
        while let Some((job, next)) = q.waiting.pop_front() {
            if next.send(Ticket::Lead(job)).is_ok() {
                return;
            }
            // That connection is gone (its job with it): try the next.
        }
        q.leading = false;
    }

    /// Refuses further jobs (the server is stopping; every connection task has ended).
    pub(crate) fn stop(&self) {
        self.queue.lock().stopping = true;
    }

    /// Jobs queued now (tests).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.queue.lock().waiting.len()
    }

    /// Whether a run is going on (tests).
    #[cfg(test)]
    pub(crate) fn leading(&self) -> bool {
        self.queue.lock().leading
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Eight tasks on two runtime threads run a job each through `queue`; the first job's
    /// work holds until the seven others have queued. Checks that every task gets its own
    /// job's answer (its number doubled) and each job is done once; returns the rounds
    /// (each leader's jobs, its own first).
    fn eight_jobs_behind_a_held_leader(queue: Arc<LeadQueue<u64, u64>>) -> Vec<Vec<u64>> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let done: Arc<Mutex<Vec<Vec<u64>>>> = Arc::default();
        let release = Arc::new(AtomicBool::new(false));
        rt.block_on(async {
            let mut tasks = Vec::new();
            for job in 0..8u64 {
                let (queue, done, release) = (queue.clone(), done.clone(), release.clone());
                tasks.push(tokio::spawn(async move {
                    if job > 0 {
                        // The first task leads before any other queues.
                        while !queue.leading() {
                            tokio::task::yield_now().await;
                        }
                    }
                    let answer = queue
                        .run(job, |jobs| {
                            if jobs[0] == 0 {
                                while !release.load(Ordering::SeqCst) {
                                    std::thread::yield_now();
                                }
                            }
                            done.lock().push(jobs.clone());
                            jobs.iter().map(|j| Ok(j * 2)).collect()
                        })
                        .await;
                    (job, answer)
                }));
            }
            while queue.waiting() < 7 {
                std::thread::yield_now();
            }
            release.store(true, Ordering::SeqCst);
            for t in tasks {
                let (job, answer) = t.await.unwrap();
                assert_eq!(answer, Ok(job * 2), "job {job} got another's answer");
            }
        });
        let rounds = done.lock().clone();
        let mut all: Vec<u64> = rounds.concat();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..8).collect::<Vec<_>>(),
            "each job done once: {rounds:?}"
        );
        assert!(!queue.leading());
        rounds
    }

    /// Without a round limit, the first connection handed the lead does the other six
    /// queued jobs in the same round.
    #[test]
    fn a_leader_does_the_queued_jobs_in_one_round_and_each_gets_its_own_answer() {
        let rounds = eight_jobs_behind_a_held_leader(Arc::new(LeadQueue::default()));
        let sizes: Vec<usize> = rounds.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![1, 7], "{rounds:?}");
    }

    /// With a round limit of 3, each leader takes at most three queued jobs besides its
    /// own: the seven queued jobs take two rounds after the first (four jobs, then three).
    #[test]
    fn a_round_limit_bounds_what_one_leader_does() {
        let rounds = eight_jobs_behind_a_held_leader(Arc::new(LeadQueue::with_round(3)));
        let sizes: Vec<usize> = rounds.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![1, 4, 3], "{rounds:?}");
    }

    /// Work that answers too few jobs: the ones left out get an error, not a hang; the lead
    /// is free afterwards. A stopped queue refuses jobs.
    #[test]
    fn missing_answers_are_errors_and_a_stopped_queue_refuses() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let queue: LeadQueue<u64, u64> = LeadQueue::default();
        let answer = rt.block_on(queue.run(1, |_| Vec::new()));
        assert!(answer.is_err());
        assert!(!queue.leading());
        assert_eq!(rt.block_on(queue.run(2, |j| vec![Ok(j[0])])), Ok(2));
        queue.stop();
        assert!(rt.block_on(queue.run(3, |j| vec![Ok(j[0])])).is_err());
    }
}
