//! A linearizability checker for histories of single-key registers (a key-value store seen one
//! key at a time).
//!
//! Record every call of a concurrent test with a [`Recorder`] (one per thread, all sharing one
//! [`Clock`]), gather the operations into one history and [`check`] it. Each key is checked on
//! its own — linearizability is compositional — against the sequential model of a key: absent
//! or holding one value ([`Op`] says what each call does to it and returns).
//!
//! The search is Wing and Gong's, with Lowe's memoisation (as in Knossos and Porcupine):
//! repeatedly linearize one of the *minimal* pending operations (invoked before every other
//! remaining operation responded) whose return value fits the model, backtrack when none does,
//! and never revisit a (set of linearized operations, model state) pair. That makes it
//! polynomial in practice: thousands of operations per key take milliseconds. A step budget
//! ([`CheckOptions::max_steps`]) turns a pathological search into [`Outcome::Undecided`]
//! rather than a hang.
//!
//! A write whose outcome is unknown (it failed, or a crash cut it short) is recorded as
//! *indeterminate* ([`Recorder::indeterminate`]): it may take effect at any point after its
//! invocation, or never.
//!
//! Owns, besides the checker, what every store's linearizability test runs the same way: the
//! rounds ([`run_rounds`]: `TIERBASE_LIN_ROUNDS`, one test at a time, a seed per round),
//! joining the worker threads ([`join`]), the final read of every key
//! ([`Recorder::record_gets`]), and the recorded calls of any [`Store`] ([`put_op`],
//! [`delete_op`], [`get_op`], [`modify_once`], [`modify_op`]). The workloads — keys, values,
//! the mix of calls, the threads beside the workers — stay with each store's test.
//!
//! ```
//! use tierbase::testing::linearizability::{Clock, Op, check};
//!
//! let clock = Clock::new();
//! let mut rec = clock.recorder(0);
//! rec.record(b"k", || Op::Put { value: b"a".to_vec(), was_new: true });
//! rec.record(b"k", || Op::Get { value: Some(b"a".to_vec()) });
//! rec.record(b"k", || Op::Delete { existed: true });
//! // A stale read: the key was deleted before this get started.
//! rec.record(b"k", || Op::Get { value: Some(b"a".to_vec()) });
//! let outcome = check(&rec.into_operations());
//! assert!(!outcome.is_linearizable());
//! println!("{outcome}"); // the key, the longest linearizable prefix and the stuck operations
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread::ScopedJoinHandle;

use crate::store::{Change, Store};

/// What one call did to a key, with what it returned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Insert-or-replace.
    Put {
        /// The value written.
        value: Vec<u8>,
        /// Returned: whether the key was absent before.
        was_new: bool,
    },
    /// Replace only if present; writes nothing if the key is absent.
    Update {
        /// The value written (if the key was present).
        value: Vec<u8>,
        /// Returned: whether the key was present.
        existed: bool,
    },
    /// Remove.
    Delete {
        /// Returned: whether the key was present.
        existed: bool,
    },
    /// Read.
    Get {
        /// Returned: the value read, `None` if the key was absent.
        value: Option<Vec<u8>>,
    },
}

impl Op {
    /// Whether this is a write (everything but [`Op::Get`]).
    pub fn is_write(&self) -> bool {
        !matches!(self, Op::Get { .. })
    }
}

/// One recorded call: key, thread, invocation and response times, and what it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The key.
    pub key: Vec<u8>,
    /// The calling thread (for reports only).
    pub thread: usize,
    /// [`Clock`] time taken just before the call.
    pub invoke: u64,
    /// [`Clock`] time taken just after the call returned. Ignored for indeterminate
    /// operations. Must not be before `invoke`.
    pub respond: u64,
    /// What the call did and returned.
    pub op: Op,
    /// The call's outcome is unknown (it returned an error, or a crash interrupted it): it may
    /// take effect at any point after `invoke`, or never, and its return value is ignored.
    /// Only writes can be indeterminate; an indeterminate [`Op::Get`] is ignored.
    pub indeterminate: bool,
}

impl Operation {
    /// A completed call.
    pub fn new(key: &[u8], thread: usize, invoke: u64, respond: u64, op: Op) -> Self {
        Operation {
            key: key.to_vec(),
            thread,
            invoke,
            respond,
            op,
            indeterminate: false,
        }
    }

    /// A call whose outcome is unknown (see [`Operation::indeterminate`]); the return value in
    /// `op` is ignored.
    pub fn new_indeterminate(key: &[u8], thread: usize, invoke: u64, op: Op) -> Self {
        Operation {
            key: key.to_vec(),
            thread,
            invoke,
            respond: u64::MAX,
            op,
            indeterminate: true,
        }
    }
}

/// The shared monotonic clock of a recorded run: every [`Clock::tick`] returns a new, larger
/// time. A call that responded (ticked) before another was invoked (ticked) therefore really
/// returned before the other started, which is all the checker relies on.
#[derive(Debug, Default)]
pub struct Clock {
    now: AtomicU64,
}

impl Clock {
    /// A clock at time 0.
    pub const fn new() -> Self {
        Clock {
            now: AtomicU64::new(0),
        }
    }

    /// The next time (strictly larger than every earlier tick, from any thread).
    pub fn tick(&self) -> u64 {
        self.now.fetch_add(1, Ordering::SeqCst)
    }

    /// A recorder for one thread's calls.
    pub fn recorder(&self, thread: usize) -> Recorder<'_> {
        Recorder {
            clock: self,
            thread,
            ops: Vec::new(),
        }
    }
}

/// Records one thread's calls against a shared [`Clock`].
#[derive(Debug)]
pub struct Recorder<'c> {
    clock: &'c Clock,
    thread: usize,
    ops: Vec<Operation>,
}

/// A call in progress (its invocation time taken), from [`Recorder::invoke`]. Drop it to record
/// nothing (a call that failed without effect).
#[derive(Debug)]
pub struct Call {
    key: Vec<u8>,
    invoke: u64,
}

impl Recorder<'_> {
    /// The thread this recorder records.
    pub fn thread(&self) -> usize {
        self.thread
    }

    /// Runs `call` (which performs the store call and describes it) between two clock ticks
    /// and records it.
    pub fn record(&mut self, key: &[u8], call: impl FnOnce() -> Op) {
        let started = self.invoke(key);
        let op = call();
        self.respond(started, op);
    }

    /// Takes the invocation time of a call on `key`; call just before the store call.
    pub fn invoke(&self, key: &[u8]) -> Call {
        Call {
            key: key.to_vec(),
            invoke: self.clock.tick(),
        }
    }

    /// Takes the response time of `call` and records it as `op`; call just after the store
    /// call returned.
    pub fn respond(&mut self, call: Call, op: Op) {
        let respond = self.clock.tick();
        self.ops.push(Operation {
            key: call.key,
            thread: self.thread,
            invoke: call.invoke,
            respond,
            op,
            indeterminate: false,
        });
    }

    /// Records `call` as an indeterminate write (its outcome is unknown; the return value in
    /// `op` is ignored).
    pub fn indeterminate(&mut self, call: Call, op: Op) {
        self.ops.push(Operation::new_indeterminate(
            &call.key,
            self.thread,
            call.invoke,
            op,
        ));
    }

    /// Records a `get` of each key in turn, `get` doing the store call: a round's final read
    /// of every key, after its workers joined.
    pub fn record_gets<'k>(
        &mut self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        mut get: impl FnMut(&[u8]) -> Option<Vec<u8>>,
    ) {
        for k in keys {
            self.record(k, || Op::Get { value: get(k) });
        }
    }

    /// What was recorded so far.
    pub fn operations(&self) -> &[Operation] {
        &self.ops
    }

    /// The recorded operations.
    pub fn into_operations(self) -> Vec<Operation> {
        self.ops
    }
}

/// How to check.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Keys present before the history started, with their values; every other key starts
    /// absent.
    pub initial: HashMap<Vec<u8>, Vec<u8>>,
    /// Search steps allowed per key before giving up with [`Outcome::Undecided`].
    pub max_steps: u64,
    /// How many operations of the longest linearizable prefix a violation report shows.
    pub context: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            initial: HashMap::new(),
            max_steps: 20_000_000,
            context: 8,
        }
    }
}

/// The verdict on a history.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Every key's operations have a linearization.
    Linearizable {
        /// Keys checked.
        keys: usize,
        /// Operations checked (indeterminate reads excluded).
        operations: usize,
        /// Search steps taken, all keys together.
        steps: u64,
    },
    /// Some key's operations have none; the first such key in key order.
    NotLinearizable(Box<Violation>),
    /// No violation found, but the search of some key ran out of steps.
    Undecided {
        /// The first key whose search ran out.
        key: Vec<u8>,
        /// Its operations.
        operations: usize,
        /// The budget it exhausted.
        steps: u64,
    },
}

impl Outcome {
    /// Whether the history is linearizable.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Outcome::Linearizable { .. })
    }

    /// The violation, if the history is not linearizable.
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            Outcome::NotLinearizable(v) => Some(v),
            _ => None,
        }
    }
}

/// Where the search for a linearization of one key's operations got stuck.
///
/// Reported at the deepest point the search reached: the longest prefix it could linearize
/// (ending in `prefix_tail`), the key's value after it (`state`), and the operations that could
/// go next — all invoked before `stuck` responded — none of which fits `state` or leads on to a
/// complete linearization. The window `prefix_tail` + `frontier` is where to look for the bug.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The key.
    pub key: Vec<u8>,
    /// Operations on the key.
    pub operations: usize,
    /// Operations in the longest linearizable prefix found.
    pub linearized: usize,
    /// The key's value after that prefix (`None`: absent).
    pub state: Option<Vec<u8>>,
    /// The last operations of that prefix (at most [`CheckOptions::context`]), in
    /// linearization order.
    pub prefix_tail: Vec<Operation>,
    /// The pending operation that responds first: it, or something invoked before it
    /// responded, must go next.
    pub stuck: Operation,
    /// Every operation not in the prefix that was invoked before `stuck` responded (`stuck`
    /// included), by invocation time.
    pub frontier: Vec<Operation>,
}

/// Checks `history` with the default [`CheckOptions`] (every key absent at the start).
pub fn check(history: &[Operation]) -> Outcome {
    check_with(history, &CheckOptions::default())
}

/// Checks `history`, key by key.
///
/// # Panics
/// If a completed operation responded before it was invoked (a recording bug).
pub fn check_with(history: &[Operation], opts: &CheckOptions) -> Outcome {
    let mut by_key: BTreeMap<&[u8], Vec<&Operation>> = BTreeMap::new();
    for op in history {
        if op.indeterminate && !op.op.is_write() {
            continue;
        }
        assert!(
            op.indeterminate || op.respond >= op.invoke,
            "operation responds before it is invoked: {}",
            OperationDisplay(op)
        );
        by_key.entry(&op.key).or_default().push(op);
    }
    let (mut operations, mut steps) = (0, 0);
    let mut undecided = None;
    for (key, mut ops) in by_key {
        ops.sort_by_key(|o| (o.invoke, o.respond));
        let initial = opts.initial.get(key).map(Vec::as_slice);
        operations += ops.len();
        match KeySearch::new(&ops, initial).run(opts.max_steps, opts.context) {
            KeyOutcome::Linearizable { steps: s } => steps += s,
            KeyOutcome::Violation(v) => return Outcome::NotLinearizable(v),
            KeyOutcome::Undecided => {
                undecided.get_or_insert(Outcome::Undecided {
                    key: key.to_vec(),
                    operations: ops.len(),
                    steps: opts.max_steps,
                });
            }
        }
    }
    undecided.unwrap_or(Outcome::Linearizable {
        keys: history
            .iter()
            .map(|o| o.key.as_slice())
            .collect::<HashSet<_>>()
            .len(),
        operations,
        steps,
    })
}

// ----- running a store's rounds ---------------------------------------------------------------

/// The rounds of a test: `TIERBASE_LIN_ROUNDS` if it is set to a number, else `default`.
pub fn rounds(default: u64) -> u64 {
    std::env::var("TIERBASE_LIN_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

/// Runs a test's rounds — [`rounds`]`(default_rounds)` of them — calling `round(r, seed)` with
/// `seed = first_seed + r`; the round checks its history (the first violation fails the test).
/// One test of the process at a time, so that the worker threads of one are not starved by
/// another's (the races need the threads to really run side by side). Returns the number of
/// rounds run.
pub fn run_rounds(default_rounds: u64, first_seed: u64, mut round: impl FnMut(u64, u64)) -> u64 {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let rounds = rounds(default_rounds);
    for r in 0..rounds {
        round(r, first_seed + r);
    }
    rounds
}

/// A worker thread's result, its panic re-raised in the caller (so that the test fails with
/// the worker's message).
pub fn join<T>(worker: ScopedJoinHandle<'_, T>) -> T {
    worker
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// `store.put(key, value)` as the operation it was (panics if the call fails).
pub fn put_op<S: Store + ?Sized>(store: &S, key: &[u8], value: Vec<u8>) -> Op {
    let was_new = store
        .put(key, &value)
        .unwrap_or_else(|e| panic!("put: {e}"));
    Op::Put { value, was_new }
}

/// `store.delete(key)` as the operation it was (panics if the call fails).
pub fn delete_op<S: Store + ?Sized>(store: &S, key: &[u8]) -> Op {
    Op::Delete {
        existed: store.delete(key).unwrap_or_else(|e| panic!("delete: {e}")),
    }
}

/// `store.get(key)` as the operation it was (panics if the call fails).
pub fn get_op<S: Store + ?Sized>(store: &S, key: &[u8]) -> Op {
    Op::Get {
        value: store.get(key).unwrap_or_else(|e| panic!("get: {e}")),
    }
}

/// [`Store::modify`] with `decide`, which must be called exactly once; returns the value it
/// saw (panics if the call fails).
pub fn modify_once<S: Store + ?Sized>(
    store: &S,
    key: &[u8],
    mut decide: impl FnMut(Option<&[u8]>) -> Change,
) -> Option<Vec<u8>> {
    let mut seen = None;
    let mut calls = 0;
    store
        .modify(key, &mut |cur| {
            calls += 1;
            seen = cur.map(<[u8]>::to_vec);
            decide(cur)
        })
        .unwrap_or_else(|e| panic!("modify: {e}"));
    assert_eq!(calls, 1, "modify must call its closure exactly once");
    seen
}

/// A [`Store::modify`] that decides on the key's presence only: one exact operation of the
/// model ([`modify_op`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Put the value if the key is present (`SET XX`): [`Op::Update`].
    SetIfPresent(Vec<u8>),
    /// Put the value whatever the key holds: [`Op::Put`].
    Put(Vec<u8>),
    /// Delete the key if it is present: [`Op::Delete`].
    DeleteIfPresent,
}

/// A [`modify_once`] making `decision`, as the operation it was (what the closure saw says
/// `existed` or `was_new`).
pub fn modify_op<S: Store + ?Sized>(store: &S, key: &[u8], decision: Decision) -> Op {
    match decision {
        Decision::SetIfPresent(value) => {
            let seen = modify_once(store, key, |cur| match cur {
                Some(_) => Change::Put(value.clone()),
                None => Change::Keep,
            });
            Op::Update {
                value,
                existed: seen.is_some(),
            }
        }
        Decision::Put(value) => {
            let seen = modify_once(store, key, |_| Change::Put(value.clone()));
            Op::Put {
                value,
                was_new: seen.is_none(),
            }
        }
        Decision::DeleteIfPresent => {
            let seen = modify_once(store, key, |cur| match cur {
                Some(_) => Change::Delete,
                None => Change::Keep,
            });
            Op::Delete {
                existed: seen.is_some(),
            }
        }
    }
}

// ----- the search ---------------------------------------------------------------------------

/// Model state: an interned value id, or `ABSENT`.
const ABSENT: u32 = u32::MAX;
/// End of the event list.
const NIL: usize = usize::MAX;
/// The event list's head sentinel.
const HEAD: usize = 0;

/// An operation with its values interned.
#[derive(Clone, Copy, Debug)]
enum Step {
    Put { value: u32, was_new: bool },
    Update { value: u32, existed: bool },
    Delete { existed: bool },
    Get { value: u32 },
}

/// The sequential model: the state after applying `step` to `state`, or `None` if the
/// operation's return value does not fit `state` (indeterminate writes always fit).
fn apply(state: u32, step: Step, indeterminate: bool) -> Option<u32> {
    let present = state != ABSENT;
    let fits = |returned: bool| indeterminate || returned == present;
    match step {
        Step::Put { value, was_new } => fits(!was_new).then_some(value),
        Step::Update { value, existed } => {
            fits(existed).then_some(if present { value } else { state })
        }
        Step::Delete { existed } => fits(existed).then_some(ABSENT),
        Step::Get { value } => (value == state).then_some(state),
    }
}

/// A node of the doubly linked event list (call and return events in time order).
#[derive(Clone, Copy, Debug)]
struct Node {
    prev: usize,
    next: usize,
    op: usize,
    is_call: bool,
    /// For a call: its return node, if the operation is determinate.
    ret: Option<usize>,
}

/// The deepest point the search reached before backtracking.
#[derive(Debug)]
struct Best {
    depth: usize,
    stuck: usize,
    state: u32,
    bits: Vec<u64>,
    tail: Vec<usize>,
}

enum KeyOutcome {
    Linearizable { steps: u64 },
    Violation(Box<Violation>),
    Undecided,
}

/// The memo key: the linearized set, without its leading all-ones words and trailing zero
/// words (operations are numbered by invocation, so the set is mostly a dense prefix), and
/// the model state.
#[derive(PartialEq, Eq, Hash)]
struct Memo {
    state: u32,
    skipped: u32,
    words: Box<[u64]>,
}

fn memo(bits: &[u64], state: u32) -> Memo {
    let lo = bits
        .iter()
        .position(|&w| w != u64::MAX)
        .unwrap_or(bits.len());
    let hi = bits
        .iter()
        .rposition(|&w| w != 0)
        .map_or(lo, |i| (i + 1).max(lo));
    Memo {
        state,
        skipped: lo as u32,
        words: bits.get(lo..hi).unwrap_or_default().into(),
    }
}

struct KeySearch<'h> {
    ops: &'h [&'h Operation],
    steps: Vec<Step>,
    values: Vec<&'h [u8]>,
    initial: u32,
    nodes: Vec<Node>,
}

impl<'h> KeySearch<'h> {
    fn new(ops: &'h [&'h Operation], initial: Option<&'h [u8]>) -> Self {
        let mut ids: HashMap<&[u8], u32> = HashMap::new();
        let mut values = Vec::new();
        let mut intern = |v: &'h [u8]| {
            *ids.entry(v).or_insert_with(|| {
                values.push(v);
                (values.len() - 1) as u32
            })
        };
        let initial = initial.map_or(ABSENT, &mut intern);
        let steps = ops
            .iter()
            .map(|o| match &o.op {
                Op::Put { value, was_new } => Step::Put {
                    value: intern(value),
                    was_new: *was_new,
                },
                Op::Update { value, existed } => Step::Update {
                    value: intern(value),
                    existed: *existed,
                },
                Op::Delete { existed } => Step::Delete { existed: *existed },
                Op::Get { value } => Step::Get {
                    value: value.as_deref().map_or(ABSENT, &mut intern),
                },
            })
            .collect();
        // Events in time order; at equal times calls come first (the operations overlap).
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * ops.len());
        for (i, o) in ops.iter().enumerate() {
            events.push((o.invoke, false, i));
            if !o.indeterminate {
                events.push((o.respond, true, i));
            }
        }
        events.sort_unstable();
        let mut nodes = Vec::with_capacity(events.len() + 1);
        nodes.push(Node {
            prev: NIL,
            next: if events.is_empty() { NIL } else { 1 },
            op: usize::MAX,
            is_call: false,
            ret: None,
        });
        let mut ret_node = vec![None; ops.len()];
        for (n, &(_, is_return, op)) in events.iter().enumerate() {
            let id = n + 1;
            nodes.push(Node {
                prev: id - 1,
                next: if id == events.len() { NIL } else { id + 1 },
                op,
                is_call: !is_return,
                ret: None,
            });
            if is_return {
                ret_node[op] = Some(id);
            }
        }
        for node in nodes.iter_mut().skip(1) {
            if node.is_call {
                node.ret = ret_node[node.op];
            }
        }
        KeySearch {
            ops,
            steps,
            values,
            initial,
            nodes,
        }
    }

    fn unlink(&mut self, n: usize) {
        let Node { prev, next, .. } = self.nodes[n];
        self.nodes[prev].next = next;
        if next != NIL {
            self.nodes[next].prev = prev;
        }
    }

    fn relink(&mut self, n: usize) {
        let Node { prev, next, .. } = self.nodes[n];
        self.nodes[prev].next = n;
        if next != NIL {
            self.nodes[next].prev = n;
        }
    }

    /// Removes an operation (its call node `call` and its return node) from the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        if let Some(r) = self.nodes[call].ret {
            self.unlink(r);
        }
    }

    /// Undoes the last [`KeySearch::lift`] (dancing links: in reverse order).
    fn unlift(&mut self, call: usize) {
        if let Some(r) = self.nodes[call].ret {
            self.relink(r);
        }
        self.relink(call);
    }

    fn run(mut self, max_steps: u64, context: usize) -> KeyOutcome {
        let n = self.ops.len();
        let mut bits = vec![0u64; n.div_ceil(64)];
        let mut remaining = self.ops.iter().filter(|o| !o.indeterminate).count();
        let mut state = self.initial;
        let mut stack: Vec<(usize, u32)> = Vec::new();
        let mut seen: HashSet<Memo> = HashSet::new();
        let mut best: Option<Best> = None;
        let mut steps = 0u64;
        let mut entry = self.nodes[HEAD].next;
        loop {
            if remaining == 0 {
                return KeyOutcome::Linearizable { steps };
            }
            steps += 1;
            if steps > max_steps {
                return KeyOutcome::Undecided;
            }
            if entry != NIL && self.nodes[entry].is_call {
                let op = self.nodes[entry].op;
                if let Some(next) = apply(state, self.steps[op], self.ops[op].indeterminate) {
                    bits[op / 64] |= 1 << (op % 64);
                    if seen.insert(memo(&bits, next)) {
                        stack.push((entry, state));
                        state = next;
                        self.lift(entry);
                        remaining -= usize::from(!self.ops[op].indeterminate);
                        entry = self.nodes[HEAD].next;
                        continue;
                    }
                    bits[op / 64] &= !(1 << (op % 64));
                }
                entry = self.nodes[entry].next;
                continue;
            }
            // A return event (or the end): the operation responding here was not linearized in
            // time, so undo the last choice.
            if entry != NIL && best.as_ref().is_none_or(|b| stack.len() > b.depth) {
                let from = stack.len().saturating_sub(context);
                best = Some(Best {
                    depth: stack.len(),
                    stuck: self.nodes[entry].op,
                    state,
                    bits: bits.clone(),
                    tail: stack
                        .get(from..)
                        .unwrap_or_default()
                        .iter()
                        .map(|&(c, _)| self.nodes[c].op)
                        .collect(),
                });
            }
            let Some((call, previous)) = stack.pop() else {
                return KeyOutcome::Violation(Box::new(self.violation(best)));
            };
            let op = self.nodes[call].op;
            state = previous;
            bits[op / 64] &= !(1 << (op % 64));
            self.unlift(call);
            remaining += usize::from(!self.ops[op].indeterminate);
            entry = self.nodes[call].next;
        }
    }

    fn violation(&self, best: Option<Best>) -> Violation {
        let ops = self.ops;
        // The search only gives up at a return event, so `best` is set; the fallback keeps
        // this total.
        let best = best.unwrap_or_else(|| Best {
            depth: 0,
            stuck: ops.iter().position(|o| !o.indeterminate).unwrap_or(0),
            state: self.initial,
            bits: vec![0; ops.len().div_ceil(64)],
            tail: Vec::new(),
        });
        let stuck = ops[best.stuck];
        let linearized = |i: usize| best.bits[i / 64] & (1 << (i % 64)) != 0;
        let frontier = (0..ops.len())
            .filter(|&i| !linearized(i) && (ops[i].invoke <= stuck.respond || i == best.stuck))
            .map(|i| ops[i].clone())
            .collect();
        Violation {
            key: stuck.key.clone(),
            operations: ops.len(),
            linearized: best.depth,
            state: (best.state != ABSENT).then(|| self.values[best.state as usize].to_vec()),
            prefix_tail: best.tail.iter().map(|&i| ops[i].clone()).collect(),
            stuck: stuck.clone(),
            frontier,
        }
    }
}

// ----- reports ------------------------------------------------------------------------------

/// Shows bytes as an escaped string, cut after 24 bytes.
struct Bytes<'a>(&'a [u8]);

impl fmt::Display for Bytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 24;
        let b = self.0;
        match b.get(..SHOWN) {
            Some(head) if b.len() > SHOWN => {
                write!(f, "\"{}\"…({} bytes)", head.escape_ascii(), b.len())
            }
            _ => write!(f, "\"{}\"", b.escape_ascii()),
        }
    }
}

/// Shows a key's state: its value, or `absent`.
struct State<'a>(Option<&'a [u8]>);

impl fmt::Display for State<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{}", Bytes(v)),
            None => f.write_str("absent"),
        }
    }
}

/// Shows an operation on one line: thread, interval, call and result.
struct OperationDisplay<'a>(&'a Operation);

impl fmt::Display for OperationDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.0;
        let respond = if o.indeterminate {
            "?".to_string()
        } else {
            o.respond.to_string()
        };
        write!(f, "t{:<3} [{:>9} ..{:>9}]  ", o.thread, o.invoke, respond)?;
        let yes_no = |b: bool, yes: &'static str, no: &'static str| {
            if o.indeterminate {
                "? (indeterminate)"
            } else if b {
                yes
            } else {
                no
            }
        };
        match &o.op {
            Op::Put { value, was_new } => write!(
                f,
                "put {} -> {}",
                Bytes(value),
                yes_no(*was_new, "new", "replaced")
            ),
            Op::Update { value, existed } => write!(
                f,
                "update {} -> {}",
                Bytes(value),
                yes_no(*existed, "existed", "absent")
            ),
            Op::Delete { existed } => {
                write!(f, "delete -> {}", yes_no(*existed, "existed", "absent"))
            }
            Op::Get { value } => write!(f, "get -> {}", State(value.as_deref())),
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", OperationDisplay(self))
    }
}

/// Whether `o` could go next on a key in `state` (its return value fits).
fn fits(o: &Operation, state: Option<&[u8]>) -> bool {
    let present = state.is_some();
    let ok = |returned: bool| o.indeterminate || returned == present;
    match &o.op {
        Op::Put { was_new, .. } => ok(!was_new),
        Op::Update { existed, .. } | Op::Delete { existed } => ok(*existed),
        Op::Get { value } => value.as_deref() == state,
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_FRONTIER: usize = 32;
        let state = self.state.as_deref();
        writeln!(
            f,
            "key {} ({} operations): no linearization exists.",
            Bytes(&self.key),
            self.operations
        )?;
        writeln!(
            f,
            "The longest linearizable prefix has {} operations and leaves the key {}{}.",
            self.linearized,
            if state.is_some() { "holding " } else { "" },
            State(state)
        )?;
        if !self.prefix_tail.is_empty() {
            writeln!(
                f,
                "Its last {} operations, in linearization order:",
                self.prefix_tail.len()
            )?;
            for o in &self.prefix_tail {
                writeln!(f, "    {o}")?;
            }
        } else if self.linearized == 0 {
            writeln!(
                f,
                "(Nothing could be linearized: the key starts {}.)",
                State(state)
            )?;
        }
        let respond = self.stuck.respond;
        writeln!(
            f,
            "None of these can go next (each was invoked by t={respond}, when the first of them \
             responded):"
        )?;
        for o in self.frontier.iter().take(MAX_FRONTIER) {
            let why = if fits(o, state) {
                "fits, but every continuation fails"
            } else {
                "does not fit"
            };
            let mark = if *o == self.stuck {
                "  <- responds first"
            } else {
                ""
            };
            writeln!(f, "    {o}   [{why}]{mark}")?;
        }
        if self.frontier.len() > MAX_FRONTIER {
            writeln!(f, "    … and {} more", self.frontier.len() - MAX_FRONTIER)?;
        }
        let from = self
            .prefix_tail
            .iter()
            .chain(&self.frontier)
            .map(|o| o.invoke)
            .min()
            .unwrap_or(self.stuck.invoke);
        write!(f, "Window: t={from}..={respond}.")
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Linearizable {
                keys,
                operations,
                steps,
            } => write!(
                f,
                "linearizable: {operations} operations on {keys} keys ({steps} search steps)"
            ),
            Outcome::NotLinearizable(v) => write!(f, "not linearizable: {v}"),
            Outcome::Undecided {
                key,
                operations,
                steps,
            } => write!(
                f,
                "undecided: the search of key {} ({operations} operations) ran out of its \
                 {steps} steps",
                Bytes(key)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(t: usize, invoke: u64, respond: u64, v: &str, was_new: bool) -> Operation {
        let op = Op::Put {
            value: v.as_bytes().to_vec(),
            was_new,
        };
        Operation::new(b"k", t, invoke, respond, op)
    }

    fn update(t: usize, invoke: u64, respond: u64, v: &str, existed: bool) -> Operation {
        let op = Op::Update {
            value: v.as_bytes().to_vec(),
            existed,
        };
        Operation::new(b"k", t, invoke, respond, op)
    }

    fn delete(t: usize, invoke: u64, respond: u64, existed: bool) -> Operation {
        Operation::new(b"k", t, invoke, respond, Op::Delete { existed })
    }

    fn get(t: usize, invoke: u64, respond: u64, v: Option<&str>) -> Operation {
        let op = Op::Get {
            value: v.map(|v| v.as_bytes().to_vec()),
        };
        Operation::new(b"k", t, invoke, respond, op)
    }

    fn indeterminate_put(t: usize, invoke: u64, v: &str) -> Operation {
        let op = Op::Put {
            value: v.as_bytes().to_vec(),
            was_new: false,
        };
        Operation::new_indeterminate(b"k", t, invoke, op)
    }

    #[track_caller]
    fn accepts(h: &[Operation]) {
        let outcome = check(h);
        assert!(outcome.is_linearizable(), "{outcome}");
    }

    #[track_caller]
    fn rejects(h: &[Operation]) -> Box<Violation> {
        match check(h) {
            Outcome::NotLinearizable(v) => v,
            other => panic!("expected a violation, got {other}"),
        }
    }

    #[test]
    fn accepts_an_empty_and_a_sequential_history() {
        accepts(&[]);
        accepts(&[
            get(0, 0, 1, None),
            update(0, 2, 3, "u", false),
            get(0, 4, 5, None),
            delete(0, 6, 7, false),
            put(0, 8, 9, "a", true),
            get(1, 10, 11, Some("a")),
            put(1, 12, 13, "b", false),
            update(0, 14, 15, "c", true),
            get(1, 16, 17, Some("c")),
            delete(0, 18, 19, true),
            get(0, 20, 21, None),
            put(1, 22, 23, "d", true),
        ]);
    }

    #[test]
    fn accepts_overlapping_operations_in_either_order() {
        // Two overlapping puts: whichever returned "new" went first, so the later read must
        // see the other one's value.
        for (a_new, seen) in [(true, "b"), (false, "a")] {
            accepts(&[
                put(0, 0, 10, "a", a_new),
                put(1, 1, 11, "b", !a_new),
                get(2, 12, 13, Some(seen)),
            ]);
            let v = rejects(&[
                put(0, 0, 10, "a", a_new),
                put(1, 1, 11, "b", !a_new),
                get(2, 12, 13, Some(if seen == "a" { "b" } else { "a" })),
            ]);
            assert_eq!(
                v.stuck.op,
                Op::Get {
                    value: Some(if seen == "a" {
                        b"b".to_vec()
                    } else {
                        b"a".to_vec()
                    })
                }
            );
        }
        // A read overlapping a write may see either state.
        for seen in [None, Some("a")] {
            accepts(&[
                put(0, 0, 10, "a", true),
                get(1, 5, 6, seen),
                get(1, 11, 12, Some("a")),
            ]);
        }
        // A delete and a put racing: both orders are fine if the results agree.
        accepts(&[
            put(0, 0, 1, "a", true),
            delete(1, 2, 10, true),
            put(2, 3, 11, "b", false),
            get(0, 12, 13, None),
        ]);
        accepts(&[
            put(0, 0, 1, "a", true),
            delete(1, 2, 10, true),
            put(2, 3, 11, "b", true),
            get(0, 12, 13, Some("b")),
        ]);
        // Equal timestamps count as overlapping.
        accepts(&[put(0, 0, 5, "a", true), get(1, 5, 6, None)]);
    }

    #[test]
    fn rejects_a_second_new_put() {
        let v = rejects(&[put(0, 0, 1, "a", true), put(1, 2, 3, "b", true)]);
        assert_eq!(v.linearized, 1);
        assert_eq!(v.state.as_deref(), Some(&b"a"[..]));
        assert_eq!(v.stuck.thread, 1);
    }

    #[test]
    fn rejects_a_read_of_a_deleted_value() {
        // The delete said it removed the key; a get started after it returned sees the value.
        let v = rejects(&[
            put(0, 0, 1, "a", true),
            delete(1, 2, 5, true),
            put(2, 3, 9, "b", false),
            get(0, 6, 7, Some("a")),
        ]);
        assert_eq!(v.key, b"k");
        let shown = Outcome::NotLinearizable(v).to_string();
        assert!(shown.contains("key \"k\""), "{shown}");
        assert!(shown.contains("get -> \"a\""), "{shown}");
    }

    #[test]
    fn rejects_two_deletes_of_one_put() {
        rejects(&[
            put(0, 0, 1, "a", true),
            delete(1, 2, 10, true),
            delete(2, 3, 11, true),
        ]);
        rejects(&[
            put(0, 0, 1, "a", true),
            delete(1, 2, 3, true),
            delete(2, 4, 5, true),
        ]);
        // With a put between them it is fine.
        accepts(&[
            put(0, 0, 1, "a", true),
            delete(1, 2, 10, true),
            put(0, 3, 4, "b", true),
            delete(2, 5, 11, true),
        ]);
    }

    #[test]
    fn rejects_a_stale_read() {
        let v = rejects(&[
            put(0, 0, 1, "a", true),
            put(1, 2, 3, "b", false),
            get(2, 4, 5, Some("a")),
        ]);
        assert_eq!(v.linearized, 2);
        assert_eq!(v.state.as_deref(), Some(&b"b"[..]));
        assert_eq!(v.prefix_tail.len(), 2);
        assert_eq!(v.frontier, vec![get(2, 4, 5, Some("a"))]);
        // A value never written.
        rejects(&[put(0, 0, 1, "a", true), get(1, 2, 3, Some("z"))]);
        // An update that said the key was absent must not have written.
        rejects(&[update(0, 0, 1, "u", false), get(0, 2, 3, Some("u"))]);
        accepts(&[update(0, 0, 1, "u", false), get(0, 2, 3, None)]);
    }

    #[test]
    fn indeterminate_writes_happen_after_their_invocation_or_never() {
        // Took effect (even long after it "returned").
        accepts(&[
            indeterminate_put(0, 0, "x"),
            get(1, 5, 6, None),
            get(1, 7, 8, Some("x")),
        ]);
        // Never took effect.
        accepts(&[indeterminate_put(0, 0, "x"), get(1, 5, 6, None)]);
        // Its return value is ignored either way.
        accepts(&[
            put(1, 0, 1, "a", true),
            indeterminate_put(0, 2, "x"),
            get(1, 5, 6, Some("x")),
        ]);
        // Not before its invocation.
        rejects(&[get(1, 0, 1, Some("x")), indeterminate_put(0, 2, "x")]);
        // Not undone once seen.
        rejects(&[
            indeterminate_put(0, 0, "x"),
            get(1, 5, 6, Some("x")),
            get(1, 7, 8, None),
        ]);
        // An indeterminate delete may or may not have removed the key.
        let idel = |t, at| Operation::new_indeterminate(b"k", t, at, Op::Delete { existed: true });
        accepts(&[put(0, 0, 1, "a", true), idel(1, 2), get(0, 3, 4, Some("a"))]);
        accepts(&[put(0, 0, 1, "a", true), idel(1, 2), get(0, 3, 4, None)]);
        // Indeterminate reads say nothing and are ignored.
        let iget = Operation::new_indeterminate(
            b"k",
            1,
            0,
            Op::Get {
                value: Some(b"z".to_vec()),
            },
        );
        accepts(&[iget]);
    }

    #[test]
    fn keys_are_checked_independently_from_their_initial_values() {
        let mut other = get(1, 0, 1, Some("x"));
        other.key = b"other".to_vec();
        let h = [other, delete(0, 0, 1, true), get(0, 2, 3, None)];
        assert!(!check(&h).is_linearizable());
        let opts = CheckOptions {
            initial: [
                (b"k".to_vec(), b"v".to_vec()),
                (b"other".to_vec(), b"x".to_vec()),
            ]
            .into_iter()
            .collect(),
            ..CheckOptions::default()
        };
        let outcome = check_with(&h, &opts);
        assert!(outcome.is_linearizable(), "{outcome}");
        assert!(matches!(
            outcome,
            Outcome::Linearizable {
                keys: 2,
                operations: 3,
                ..
            }
        ));
    }

    #[test]
    fn a_small_budget_is_undecided_not_a_hang() {
        let h: Vec<Operation> = (0..50).map(|i| put(i, 0, 100, "a", i == 0)).collect();
        let opts = CheckOptions {
            max_steps: 10,
            ..CheckOptions::default()
        };
        let outcome = check_with(&h, &opts);
        assert!(matches!(outcome, Outcome::Undecided { .. }), "{outcome}");
        assert!(check(&h).is_linearizable());
    }

    #[test]
    fn recorder_takes_increasing_times() {
        let clock = Clock::new();
        let mut a = clock.recorder(0);
        let mut b = clock.recorder(1);
        a.record(b"k", || Op::Put {
            value: b"a".to_vec(),
            was_new: true,
        });
        let call = b.invoke(b"k");
        a.record(b"k", || Op::Get {
            value: Some(b"a".to_vec()),
        });
        b.respond(call, Op::Delete { existed: true });
        let lost = b.invoke(b"k");
        b.indeterminate(
            lost,
            Op::Put {
                value: b"x".to_vec(),
                was_new: true,
            },
        );
        let mut h = a.into_operations();
        h.extend(b.into_operations());
        assert_eq!(h.len(), 4);
        assert!(h.iter().all(|o| o.indeterminate || o.invoke < o.respond));
        assert!(h[0].respond < h[2].invoke);
        assert!(h[2].invoke < h[1].invoke && h[1].respond < h[2].respond);
        assert!(h[3].indeterminate);
        assert!(check(&h).is_linearizable());
    }

    /// A deterministic random generator (splitmix64).
    fn splitmix(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    /// Whether `ops` (one key, starting absent) has a linearization, by trying every order:
    /// the definition, for comparison with the search.
    fn brute_force(ops: &[Operation], done: &mut [bool], state: Option<&[u8]>) -> bool {
        let pending = |done: &[bool], i: usize| !done[i] && !ops[i].indeterminate;
        if !(0..ops.len()).any(|i| pending(done, i)) {
            return true;
        }
        for i in 0..ops.len() {
            let blocked =
                (0..ops.len()).any(|j| pending(done, j) && ops[j].respond < ops[i].invoke);
            if done[i] || blocked {
                continue;
            }
            if !fits(&ops[i], state) {
                continue;
            }
            let next = match &ops[i].op {
                Op::Put { value, .. } => Some(value.as_slice()),
                Op::Update { value, .. } => state.map(|_| value.as_slice()),
                Op::Delete { .. } => None,
                Op::Get { .. } => state,
            };
            done[i] = true;
            let found = brute_force(ops, done, next);
            done[i] = false;
            if found {
                return true;
            }
        }
        false
    }

    #[test]
    fn agrees_with_trying_every_order() {
        let mut rnd = splitmix(7);
        let (mut yes, mut no) = (0, 0);
        for _ in 0..4000 {
            let n = 1 + (rnd() % 7) as usize;
            let values = ["a", "b", "c"];
            let h: Vec<Operation> = (0..n)
                .map(|i| {
                    let invoke = rnd() % 12;
                    let respond = invoke + rnd() % 6;
                    let v = values[(rnd() % 3) as usize].as_bytes().to_vec();
                    let flag = rnd().is_multiple_of(2);
                    let op = match rnd() % 4 {
                        0 => Op::Put {
                            value: v,
                            was_new: flag,
                        },
                        1 => Op::Update {
                            value: v,
                            existed: flag,
                        },
                        2 => Op::Delete { existed: flag },
                        _ => Op::Get {
                            value: flag.then_some(v),
                        },
                    };
                    let mut o = Operation::new(b"k", i % 3, invoke, respond, op);
                    if o.op.is_write() && rnd().is_multiple_of(5) {
                        o = Operation::new_indeterminate(b"k", o.thread, invoke, o.op);
                    }
                    o
                })
                .collect();
            let searched = check(&h);
            let relevant: Vec<Operation> = h
                .iter()
                .filter(|o| !o.indeterminate || o.op.is_write())
                .cloned()
                .collect();
            let expected = brute_force(&relevant, &mut vec![false; relevant.len()], None);
            assert_eq!(searched.is_linearizable(), expected, "{h:#?}\n{searched}");
            if expected {
                yes += 1;
            } else {
                no += 1;
            }
        }
        // Both verdicts were exercised.
        assert!(yes > 300 && no > 300, "{yes} linearizable, {no} not");
    }

    /// A random history of `n` operations by `threads` threads on one key that is linearizable
    /// by construction: each operation takes effect at a random point inside its interval.
    fn random_history(seed: u64, n: usize, threads: usize) -> Vec<Operation> {
        let mut rnd = splitmix(seed);
        // Each thread issues calls back to back; times are in units of 1/4 tick so that
        // effect points fall strictly inside intervals.
        let mut next_free = vec![0u64; threads];
        let mut pending: Vec<(u64, usize, u64, u64)> = Vec::new(); // (effect, thread, inv, resp)
        for i in 0..n {
            let t = i % threads;
            let invoke = next_free[t] + rnd() % 8;
            let respond = invoke + 2 + rnd() % 40;
            next_free[t] = respond + 1;
            let effect = invoke + 1 + rnd() % (respond - invoke - 1);
            pending.push((effect * 4 + t as u64 % 4, t, invoke * 4, respond * 4));
        }
        pending.sort_unstable();
        let mut state: Option<Vec<u8>> = None;
        let mut h = Vec::new();
        for (i, &(_, t, invoke, respond)) in pending.iter().enumerate() {
            let value = format!("{t}.{i}").into_bytes();
            let op = match rnd() % 10 {
                0..=2 => Op::Put {
                    was_new: state.replace(value.clone()).is_none(),
                    value,
                },
                3 => {
                    let existed = state.is_some();
                    if existed {
                        state = Some(value.clone());
                    }
                    Op::Update { value, existed }
                }
                4 => Op::Delete {
                    existed: state.take().is_some(),
                },
                _ => Op::Get {
                    value: state.clone(),
                },
            };
            h.push(Operation::new(b"k", t, invoke, respond, op));
        }
        h
    }

    #[test]
    fn thousands_of_operations_per_key_are_quick() {
        for seed in 0..3 {
            let h = random_history(seed, 5000, 4);
            let outcome = check(&h);
            assert!(outcome.is_linearizable(), "seed {seed}: {outcome}");
            // A read of a value never written cannot be linearized.
            let mut bad = h.clone();
            let g = bad
                .iter()
                .rposition(|o| matches!(o.op, Op::Get { .. }))
                .unwrap_or(0);
            bad[g].op = Op::Get {
                value: Some(b"never written".to_vec()),
            };
            let v = check(&bad);
            let v = v.violation().unwrap_or_else(|| panic!("seed {seed}: {v}"));
            assert!(v.frontier.contains(&bad[g]), "{v}");
        }
    }
}
