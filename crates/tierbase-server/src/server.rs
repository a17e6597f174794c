//! The network loop: listening, connections, pipelining, limits, durability before replies,
//! and graceful shutdown.
//!
//! Owns: sockets, the tokio runtime, per-connection buffers, the client limit, idle timeouts,
//! and the order "execute a batch → make it durable → reply". Must not touch: command
//! semantics (`command`) or framing details (`resp`).
//!
//! Design (measured in docs/SERVER.md): a multi-threaded tokio runtime, one task per
//! connection. A task parses every complete request in its buffer (a pipeline), executes
//! them in order, and, when any wrote and the store defers its syncs, waits (without holding
//! a worker thread) for the next store sync before sending the batch's replies: one sync, run
//! by the first connection that waits, answers every connection that wrote meanwhile (group
//! commit), and a reply never precedes durability (`commit`). Store calls themselves are
//! synchronous and short.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use tierbase::store::Store;

use crate::command::{self, Flow, Session, SetBatch, SetQueue, Shared, Stats};
use crate::commit::Committer;
use crate::error::{Result, ServerError};
use crate::resp::{Limits, Parsed, Protocol, Reply, Request, parse_request_into};
use crate::stores::ReplyPolicy;

/// How the server listens and what it allows.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (loopback by default).
    pub listen: SocketAddr,
    /// Password clients must give with AUTH (or HELLO … AUTH) before any other command.
    pub requirepass: Option<String>,
    /// Refuse to listen on a non-loopback address without a password (Redis's protected
    /// mode).
    pub protected_mode: bool,
    /// Most connections at once; one more gets `-ERR max number of clients reached`.
    pub max_clients: usize,
    /// Request size limits (bulk length, arguments, inline length).
    pub limits: Limits,
    /// Close a connection idle this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Most bytes all connections' request and reply buffers may take beyond their first
    /// 32 KiB each (Redis's `maxmemory-clients`): a connection whose buffers grow past 1 MiB
    /// while the total is over it is closed.
    pub max_client_memory: usize,
    /// Runtime worker threads.
    pub worker_threads: usize,
    /// Stop on SIGINT and SIGTERM (the command line sets this; embedded servers need not).
    pub handle_signals: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 6380)),
            requirepass: None,
            protected_mode: true,
            max_clients: 10_000,
            limits: Limits::default(),
            idle_timeout: None,
            max_client_memory: 2 << 30,
            worker_threads: std::thread::available_parallelism().map_or(2, usize::from),
            handle_signals: false,
        }
    }
}

impl ServerConfig {
    /// Refuses what the server would refuse at [`Server::bind`], before anything is opened:
    /// a non-loopback address without a password under protected mode, zero limits.
    pub fn validate(&self) -> Result<()> {
        if self.protected_mode && self.requirepass.is_none() && !self.listen.ip().is_loopback() {
            return Err(ServerError::Config(format!(
                "refusing to listen on {} without a password: give --requirepass, or \
                 --protected-mode no to serve everyone who can reach it",
                self.listen
            )));
        }
        if self.max_clients == 0 || self.worker_threads == 0 {
            return Err(ServerError::Config(
                "--max-clients and --threads must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// What the server says when it is ready (for the start log line).
#[derive(Clone, Debug)]
pub struct Ready {
    /// The address it listens on (with the real port when port 0 was asked for).
    pub addr: SocketAddr,
    /// Store name.
    pub store: String,
    /// Medium and path.
    pub medium: String,
    /// Commit level and guarantee.
    pub policy: ReplyPolicy,
}

/// What the server did, when it stopped.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Connections accepted.
    pub connections: u64,
    /// Commands executed.
    pub commands: u64,
    /// Why it stopped.
    pub reason: String,
}

/// Stops a running server from another thread (tests, embedding).
#[derive(Clone, Debug)]
pub struct ShutdownHandle {
    tx: Arc<watch::Sender<Option<String>>>,
}

impl ShutdownHandle {
    /// Asks the server to stop: it stops accepting, finishes the commands it has read,
    /// closes the store cleanly, and `serve` returns.
    pub fn shutdown(&self, reason: &str) {
        self.tx.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason.to_string());
                true
            } else {
                false
            }
        });
    }
}

/// A server with its socket bound, ready to [`Server::serve`].
#[derive(Debug)]
pub struct Server {
    runtime: tokio::runtime::Runtime,
    listener: TcpListener,
    signals: Option<StopSignals>,
    shared: Arc<Shared>,
    shutdown: Arc<watch::Sender<Option<String>>>,
}

impl Server {
    /// Checks the configuration, starts the runtime and binds the socket.
    pub fn bind(store: Box<dyn Store>, policy: ReplyPolicy, config: ServerConfig) -> Result<Self> {
        config.validate()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads)
            .thread_name("tierbase-serve")
            .enable_all()
            .build()
            .map_err(|e| ServerError::io("starting the runtime", e))?;
        let listener = {
            let _enter = runtime.enter();
            listen(config.listen)
                .map_err(|e| ServerError::io(format!("listening on {}", config.listen), e))?
        };
        let port = listener
            .local_addr()
            .map_err(|e| ServerError::io("reading the bound address", e))?
            .port();
        let signals = if config.handle_signals {
            let _enter = runtime.enter();
            Some(
                StopSignals::subscribe()
                    .map_err(|e| ServerError::io("subscribing to SIGINT and SIGTERM", e))?,
            )
        } else {
            None
        };
        let (tx, _rx) = watch::channel(None);
        Ok(Server {
            runtime,
            listener,
            signals,
            shared: Arc::new(Shared {
                // A store that syncs inside its writes shares those syncs among concurrent
                // writers: one task writing for everyone would sync batch by batch.
                set_queue: (store.single_writer() && store.defers_sync())
                    .then(|| SetQueue::with_round(SET_ROUND)),
                store,
                policy,
                config,
                port,
                started: Instant::now(),
                stats: Stats::default(),
            }),
            shutdown: Arc::new(tx),
        })
    }

    /// The bound address and what is served.
    pub fn ready(&self) -> Result<Ready> {
        let addr = self
            .listener
            .local_addr()
            .map_err(|e| ServerError::io("reading the bound address", e))?;
        let desc = self.shared.store.describe();
        Ok(Ready {
            addr,
            store: desc.store,
            medium: desc.medium,
            policy: self.shared.policy.clone(),
        })
    }

    /// A handle that stops the server.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            tx: self.shutdown.clone(),
        }
    }

    /// Serves until SHUTDOWN, a signal (if configured) or a [`ShutdownHandle`]; then
    /// finishes in-flight commands, closes every connection and closes the store cleanly.
    pub fn serve(self) -> Result<Summary> {
        let Server {
            runtime,
            listener,
            signals,
            shared,
            shutdown,
        } = self;
        // Replies to writes wait for a sync only when the store defers them. With one runtime
        // thread, a leader first lets the other scheduled connections queue (module `commit`).
        let one_thread = runtime.metrics().num_workers() == 1;
        let committer = shared
            .policy
            .sync_before_reply
            .then(|| Arc::new(Committer::new(one_thread)));
        let served = runtime.block_on(accept_loop(
            listener,
            signals,
            shared.clone(),
            committer.clone(),
            shutdown,
        ));
        // Every connection task has ended: nobody waits for a commit any more.
        if let Some(c) = &committer {
            c.stop();
        }
        runtime.shutdown_timeout(Duration::from_secs(5));
        let reason = served?;
        let summary = Summary {
            connections: shared.stats.connections_received.get(),
            commands: shared.stats.commands.get(),
            reason,
        };
        match Arc::try_unwrap(shared) {
            Ok(shared) => shared.store.close()?,
            // A task outlived the drain (it cannot, but never skip durability for it).
            Err(shared) => shared.store.sync()?,
        }
        Ok(summary)
    }
}

/// SIGINT and SIGTERM, subscribed to at bind time (before the ready line, so a supervisor's
/// early SIGTERM is a graceful stop too).
#[derive(Debug)]
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn subscribe() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }
}

/// The name of the first stop signal, or never (no signals subscribed).
/// Connections the kernel queues before they are accepted: Redis's `tcp-backlog` default (a
/// burst of new clients otherwise meets a queue of 128, and a dropped SYN costs its client a
/// 1 s retry). The kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 511;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`] and address reuse (a restart binds
/// at once while old connections linger in TIME_WAIT), as `TcpListener::bind` would.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

async fn stop_signal(signals: Option<StopSignals>) -> String {
    let Some(mut s) = signals else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = s.interrupt.recv() => "SIGINT".to_string(),
        _ = s.terminate.recv() => "SIGTERM".to_string(),
    }
}

async fn accept_loop(
    listener: TcpListener,
    signals: Option<StopSignals>,
    shared: Arc<Shared>,
    committer: Option<Arc<Committer>>,
    shutdown: Arc<watch::Sender<Option<String>>>,
) -> Result<String> {
    let mut stop = shutdown.subscribe();
    let mut tasks = tokio::task::JoinSet::new();
    let signals = stop_signal(signals);
    tokio::pin!(signals);
    let reason = loop {
        tokio::select! {
            reason = &mut signals => break reason,
            _ = stop.changed() => break stop.borrow().clone().unwrap_or_default(),
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => a,
                    // Out of file descriptors and the like: back off, keep serving the rest.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                shared.stats.connections_received.incr();
                let clients = shared.stats.clients.fetch_add(1, Ordering::AcqRel) + 1;
                if clients > shared.config.max_clients {
                    shared.stats.clients.fetch_sub(1, Ordering::AcqRel);
                    shared.stats.rejected_connections.incr();
                    tasks.spawn(reject(stream));
                    continue;
                }
                let (shared, stop) = (shared.clone(), shutdown.subscribe());
                let (stop_all, committer) = (shutdown.clone(), committer.clone());
                tasks.spawn(async move {
                    let flow = connection(stream, &shared, committer, stop).await;
                    shared.stats.clients.fetch_sub(1, Ordering::AcqRel);
                    if flow == Flow::Shutdown {
                        stop_all.send_if_modified(|r| {
                            r.get_or_insert_with(|| "SHUTDOWN command".to_string());
                            true
                        });
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    };
    // Tell every connection (a SIGINT did not go through the channel).
    shutdown.send_if_modified(|r| {
        r.get_or_insert_with(|| reason.clone());
        true
    });
    drop(listener);
    // Connections finish what they read and answer it; one whose client stops reading its
    // replies cannot, and must not hold the shutdown (and the store's clean close) forever.
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    Ok(reason)
}

async fn reject(mut stream: TcpStream) {
    let _ = stream
        .write_all(b"-ERR max number of clients reached\r\n")
        .await;
    let _ = stream.shutdown().await;
}

/// How long a graceful shutdown waits for connections to finish before it closes them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Request limits before AUTH (as Redis's): a client without the password cannot make the
/// server buffer more than a small command.
const UNAUTHENTICATED_LIMITS: Limits = Limits {
    max_bulk_len: 16 * 1024,
    max_args: 10,
    max_inline_len: 16 * 1024,
};

/// Initial read buffer; it grows only as far as a request in it needs (bounded by the
/// limits), and shrinks back after a large request.
const READ_CHUNK: usize = 16 * 1024;
/// Most other connections' SET batches the set queue's leader applies in one round before
/// its own replies can go out. 16 batches of `-P 16` SETs take about half a millisecond; the
/// bound matters with many connections (at 50, a limit of 8 changed neither throughput nor
/// p99: docs/BENCHMARKS.md, Figure 19 (d)).
const SET_ROUND: usize = 16;
/// Replies buffered before they are written out mid-batch (a long pipeline of GETs must not
/// build an unbounded reply buffer).
const FLUSH_AT: usize = 64 * 1024;
/// A connection whose buffers hold at most this much beyond their base is never the one
/// closed for [`ServerConfig::max_client_memory`]: the clients that grow are.
const CLIENT_MEMORY_FLOOR: usize = 1 << 20;

/// A connection's share of [`Stats::client_buffer_bytes`]: its buffers' capacity beyond the
/// two [`READ_CHUNK`]s every connection starts with. Given back when the connection ends.
struct BufferCharge<'a> {
    shared: &'a Shared,
    held: usize,
}

impl<'a> BufferCharge<'a> {
    fn new(shared: &'a Shared) -> Self {
        BufferCharge { shared, held: 0 }
    }

    /// Records the buffers' capacities now. False when this connection must be closed: the
    /// server's total is over [`ServerConfig::max_client_memory`] and this connection holds
    /// more than [`CLIENT_MEMORY_FLOOR`].
    fn update(&mut self, input_capacity: usize, output_capacity: usize) -> bool {
        let now = (input_capacity + output_capacity).saturating_sub(2 * READ_CHUNK);
        let total = &self.shared.stats.client_buffer_bytes;
        if now == self.held && now <= CLIENT_MEMORY_FLOOR {
            // Every read of a small client: no write to the shared gauge.
            return true;
        }
        let after = if now >= self.held {
            total.fetch_add(now - self.held, Ordering::Relaxed) + (now - self.held)
        } else {
            total
                .fetch_sub(self.held - now, Ordering::Relaxed)
                .saturating_sub(self.held - now)
        };
        self.held = now;
        now <= CLIENT_MEMORY_FLOOR || after <= self.shared.config.max_client_memory
    }
}

impl Drop for BufferCharge<'_> {
    fn drop(&mut self) {
        let _ = self.update(0, 0);
    }
}

/// Closes a connection whose buffers took the server over its client memory limit, with an
/// error reply: its buffers are given back first, and a client that does not read gets a
/// second to take the reply.
async fn evict(
    stream: &mut TcpStream,
    shared: &Shared,
    protocol: Protocol,
    buffers: (&mut Vec<u8>, &mut Vec<u8>),
    charge: &mut BufferCharge<'_>,
) -> Flow {
    *buffers.0 = Vec::new();
    *buffers.1 = Vec::new();
    let _ = charge.update(0, 0);
    shared.stats.evicted_clients.incr();
    let mut reply = Vec::new();
    Reply::error(format!(
        "ERR client memory limit reached: the connections' buffers hold more than \
         --max-client-memory ({} bytes)",
        shared.config.max_client_memory
    ))
    .encode(protocol, &mut reply);
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&reply)).await;
    let _ = stream.shutdown().await;
    Flow::Close
}

async fn connection(
    mut stream: TcpStream,
    shared: &Arc<Shared>,
    committer: Option<Arc<Committer>>,
    mut stop: watch::Receiver<Option<String>>,
) -> Flow {
    let _ = stream.set_nodelay(true);
    let mut session = Session {
        id: shared.stats.next_client_id.fetch_add(1, Ordering::Relaxed) + 1,
        name: None,
        protocol: Protocol::Resp2,
        authenticated: shared.config.requirepass.is_none(),
        refusing_transaction: false,
    };
    let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut output: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut charge = BufferCharge::new(shared);
    loop {
        // Execute every complete request already read.
        let batch = run_batch(
            shared,
            &mut session,
            &mut input,
            &mut output,
            &mut stream,
            committer.as_deref(),
            &mut charge,
        );
        let (flow, stop_reading) = match batch.await {
            Ok(r) => r,
            Err(()) => return Flow::Close,
        };
        let unparsed = input.len();
        if !output.is_empty() {
            // The replies count before they go out (a large GET's, or MGET's).
            if !charge.update(input.capacity(), output.capacity()) {
                let buffers = (&mut input, &mut output);
                return evict(&mut stream, shared, session.protocol, buffers, &mut charge).await;
            }
            match write_while_reading(&mut stream, &output, &mut input, &mut charge).await {
                Ok(true) => {}
                Ok(false) => {
                    // Mid-reply: no error reply can be framed; the connection just closes.
                    shared.stats.evicted_clients.incr();
                    return Flow::Close;
                }
                Err(_) => return Flow::Close,
            }
            output.clear();
            if output.capacity() > 4 * READ_CHUNK {
                // A large reply's buffer is not kept for the connection's lifetime.
                output.shrink_to(READ_CHUNK);
            }
        }
        // Requests that arrived while the replies went out are executed before waiting for
        // more.
        let arrived = input.len() > unparsed;
        if stop_reading || flow != Flow::Continue {
            let _ = stream.shutdown().await;
            return flow;
        }
        if stop.borrow().is_some() {
            // Shutting down: what was read is done and answered; close.
            let _ = stream.shutdown().await;
            return Flow::Close;
        }
        if arrived {
            continue;
        }
        if input.capacity() > 4 * READ_CHUNK && input.len() < READ_CHUNK {
            input.shrink_to(READ_CHUNK);
        }
        if input.len() >= query_buffer_limit(&shared.config.limits) {
            // One request larger than any the limits allow to complete: refuse it.
            shared.stats.protocol_errors.incr();
            let mut reply = Vec::new();
            Reply::error("ERR Protocol error: query buffer limit reached")
                .encode(session.protocol, &mut reply);
            let _ = stream.write_all(&reply).await;
            let _ = stream.shutdown().await;
            return Flow::Close;
        }
        input.reserve(READ_CHUNK);
        if !charge.update(input.capacity(), output.capacity()) {
            let buffers = (&mut input, &mut output);
            return evict(&mut stream, shared, session.protocol, buffers, &mut charge).await;
        }
        let read = async {
            match shared.config.idle_timeout {
                Some(t) => tokio::time::timeout(t, stream.read_buf(&mut input))
                    .await
                    .unwrap_or(Ok(0)),
                None => stream.read_buf(&mut input).await,
            }
        };
        tokio::select! {
            n = read => match n {
                Ok(0) | Err(_) => return Flow::Close,
                Ok(n) => {
                    shared.stats.net_input_bytes.add(n as u64);
                }
            },
            _ = stop.changed() => {
                let _ = stream.shutdown().await;
                return Flow::Close;
            }
        }
    }
}

/// Writes `output` whole while still reading requests into `input` (up to
/// [`query_buffer_limit`]): a client that sends a long pipeline before it reads any reply
/// (as client libraries' pipelines do) would otherwise fill both directions' socket buffers
/// and wait on the server forever. Beyond the limit the server stops reading (back-pressure).
/// `Ok(false)`: the reads took the server over its client memory limit
/// ([`BufferCharge::update`]), nothing more was written, and the connection is to be closed.
async fn write_while_reading(
    stream: &mut TcpStream,
    output: &[u8],
    input: &mut Vec<u8>,
    charge: &mut BufferCharge<'_>,
) -> std::io::Result<bool> {
    let shared = charge.shared;
    let limit = query_buffer_limit(&shared.config.limits);
    let (mut reader, mut writer) = stream.split();
    let mut written = 0;
    let mut peer_done = false;
    while written < output.len() {
        let rest = output.get(written..).unwrap_or_default();
        tokio::select! {
            n = writer.write(rest) => match n? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => written += n,
            },
            n = reader.read_buf(input), if !peer_done && input.len() < limit => match n? {
                // Half-closed: the requests are all in; the replies still go out.
                0 => peer_done = true,
                n => {
                    shared.stats.net_input_bytes.add(n as u64);
                    if !charge.update(input.capacity(), output.len()) {
                        return Ok(false);
                    }
                }
            },
        }
    }
    shared.stats.net_output_bytes.add(output.len() as u64);
    Ok(true)
}

/// Most unparsed request bytes a connection buffers while its replies cannot be sent: one
/// largest request plus a pipeline's worth (Redis's `client-query-buffer-limit` is 1 GiB).
fn query_buffer_limit(limits: &Limits) -> usize {
    limits.max_bulk_len.saturating_add(64 * READ_CHUNK)
}

/// How a stretch of pipelined requests ended.
struct Stretch {
    flow: Flow,
    wrote: bool,
    /// The reply buffer filled up before the input ran out.
    more: bool,
    /// A protocol error: reply, then close.
    broken: bool,
    /// SETs to be applied through [`Shared::set_queue`] before anything after them runs:
    /// their replies come next.
    queued: Option<SetBatch>,
}

/// Executes complete requests from `input[*consumed..]` until the input runs out, a command
/// ends the connection, the replies reach [`FLUSH_AT`], or SETs are handed to the set queue.
/// Consecutive plain SETs are held back and applied as one store batch
/// ([`command::execute_plain_sets`]): one writer-lock round and one log append for a
/// pipeline's SETs instead of one each. Every other command first applies the SETs before
/// it, so replies and effects keep the requests' order. With a set queue, the SETs are
/// returned in [`Stretch::queued`] instead (the request after them not consumed yet), for
/// the caller to apply and answer before it executes further.
fn execute_stretch(
    shared: &Shared,
    session: &mut Session,
    input: &[u8],
    consumed: &mut usize,
    output: &mut Vec<u8>,
) -> Stretch {
    let mut stretch = Stretch {
        flow: Flow::Continue,
        wrote: false,
        more: false,
        broken: false,
        queued: None,
    };
    let mut sets = PendingSets::default();
    // Plain GETs held back to be read as one batch (their keys borrowed from `input`). At most
    // one of `sets` and `gets` holds anything: each is applied before the other takes a
    // request, so replies keep the requests' order.
    let mut gets = GatheredGets::new();
    // A request's arguments, borrowed from `input` (reused: nothing is allocated per request).
    let mut args: Vec<&[u8]> = Vec::with_capacity(8);
    loop {
        let rest = input.get(*consumed..).unwrap_or_default();
        if rest.is_empty() {
            apply_gets(shared, session, &mut gets, output);
            sets.apply(shared, session, output, &mut stretch);
            return stretch;
        }
        let limits = if session.authenticated {
            shared.config.limits
        } else {
            UNAUTHENTICATED_LIMITS
        };
        let inline: Request;
        let inline_args: Vec<&[u8]>;
        // `borrowed`: the arguments are slices of `input` (an inline command's are copies).
        let (request, used, borrowed): (&[&[u8]], usize, bool) =
            match parse_request_into(rest, &limits, &mut args) {
                Ok(Some(Parsed::Borrowed { consumed: used })) => (&args, used, true),
                Ok(Some(Parsed::Owned(req))) => {
                    inline = req;
                    inline_args = inline.args.iter().map(Vec::as_slice).collect();
                    (&inline_args, inline.consumed, false)
                }
                Ok(None) => {
                    apply_gets(shared, session, &mut gets, output);
                    sets.apply(shared, session, output, &mut stretch);
                    return stretch;
                }
                Err(e) => {
                    apply_gets(shared, session, &mut gets, output);
                    if sets.apply(shared, session, output, &mut stretch) {
                        return stretch; // the error is met again after the SETs
                    }
                    shared.stats.protocol_errors.incr();
                    Reply::error(format!("ERR {e}")).encode(session.protocol, output);
                    stretch.flow = Flow::Close;
                    stretch.broken = true;
                    return stretch;
                }
            };
        if request.is_empty() {
            *consumed += used;
            continue;
        }
        if borrowed && command::is_plain_get(session, request) {
            if sets.apply(shared, session, output, &mut stretch) {
                return stretch; // this request is parsed again after the SETs
            }
            *consumed += used;
            gets.push(args[1]); // `request` is `args` here; its slices borrow `input`
            if gets.len() >= MAX_GATHERED_GETS {
                apply_gets(shared, session, &mut gets, output);
                if output.len() >= FLUSH_AT {
                    stretch.more = true;
                    return stretch;
                }
            }
            continue;
        }
        apply_gets(shared, session, &mut gets, output);
        if command::is_plain_set(session, request) {
            *consumed += used;
            if sets.push(request[1], request[2]) {
                if sets.apply(shared, session, output, &mut stretch) {
                    return stretch;
                }
                if output.len() >= FLUSH_AT {
                    stretch.more = true;
                    return stretch;
                }
            }
            continue;
        }
        if sets.apply(shared, session, output, &mut stretch) {
            return stretch; // this request is parsed again after the SETs
        }
        *consumed += used;
        let outcome = command::execute(shared, session, request);
        stretch.wrote |= outcome.wrote;
        if let Some(reply) = outcome.reply {
            reply.encode(session.protocol, output);
        }
        if outcome.flow != Flow::Continue {
            stretch.flow = outcome.flow;
            return stretch;
        }
        if output.len() >= FLUSH_AT {
            stretch.more = true;
            return stretch;
        }
    }
}

/// Most plain GETs of a pipeline read as one batch ([`command::execute_plain_gets`]).
const MAX_GATHERED_GETS: usize = 32;

/// The keys of plain GETs held back, borrowed from the input (on the stack: nothing is
/// allocated per stretch).
type GatheredGets<'a> = smallvec::SmallVec<[&'a [u8]; MAX_GATHERED_GETS]>;

/// Reads the plain GETs held back (if any) as one batch and appends their replies.
fn apply_gets(
    shared: &Shared,
    session: &mut Session,
    gets: &mut GatheredGets<'_>,
    output: &mut Vec<u8>,
) {
    match gets.len() {
        0 => {}
        1 => {
            let outcome = command::execute(shared, session, &[b"GET".as_slice(), gets[0]]);
            if let Some(reply) = outcome.reply {
                reply.encode(session.protocol, output);
            }
        }
        _ => command::execute_plain_gets(shared, session, gets, output),
    }
    gets.clear();
}

/// Plain SETs held back to be applied as one batch: at most [`PendingSets::MAX_SETS`] of them
/// and about [`PendingSets::MAX_BYTES`] of keys and values, so a batch stays far below what a
/// store refuses in one piece (the B+-tree's log frame and half its pool).
#[derive(Default)]
struct PendingSets {
    sets: SetBatch,
}

impl PendingSets {
    const MAX_SETS: usize = 256;
    const MAX_BYTES: usize = 256 << 10;
    /// Fewer SETs than this are applied by the connection itself even with a set queue: a
    /// lone SET holds the writer lock too briefly for threads to collide often (a B+-tree
    /// makes it beside other lone SETs when it fits its leaf), and a round
    /// through the queue cost unpipelined SETs 10–15 % (docs/BENCHMARKS.md, Figure 19 (b)).
    const QUEUE_FROM: usize = 2;

    /// Holds back one SET; true when the batch is full and must be applied now.
    fn push(&mut self, key: &[u8], value: &[u8]) -> bool {
        self.sets.push(key, value);
        self.sets.len() >= Self::MAX_SETS || self.sets.bytes() >= Self::MAX_BYTES
    }

    /// Applies the SETs held back (if any) and appends their replies; or, with a set queue,
    /// moves them to [`Stretch::queued`] and returns true: the stretch must end here.
    fn apply(
        &mut self,
        shared: &Shared,
        session: &Session,
        output: &mut Vec<u8>,
        stretch: &mut Stretch,
    ) -> bool {
        if self.sets.is_empty() {
            return false;
        }
        if shared.set_queue.is_some() && self.sets.len() >= Self::QUEUE_FROM {
            stretch.queued = Some(std::mem::take(&mut self.sets));
            return true;
        }
        for reply in command::execute_plain_sets(shared, &self.sets) {
            reply.encode(session.protocol, output);
        }
        stretch.wrote = true;
        self.sets.clear();
        false
    }
}

/// Parses and executes every complete request in `input`, appending replies to `output`;
/// replies to writes are made durable (one store sync) before they can leave. Returns the
/// flow and whether the connection must close after replying. `Err` when the peer is gone.
async fn run_batch(
    shared: &Arc<Shared>,
    session: &mut Session,
    input: &mut Vec<u8>,
    output: &mut Vec<u8>,
    stream: &mut TcpStream,
    committer: Option<&Committer>,
    charge: &mut BufferCharge<'_>,
) -> std::result::Result<(Flow, bool), ()> {
    let mut consumed = 0;
    // Replies from here on are to requests not yet covered by a sync, if `wrote`.
    let mut replies_from = output.len();
    let mut wrote = false;
    let result = loop {
        let mut stretch = execute_stretch(shared, session, input, &mut consumed, output);
        let mut going_on = false;
        if let Some(sets) = stretch.queued.take()
            && let Some(queue) = &shared.set_queue
        {
            apply_queued(shared, queue, session, sets, output).await;
            stretch.wrote = true;
            // The requests after the SETs are executed before the replies go out.
            going_on = stretch.flow == Flow::Continue;
        }
        wrote |= stretch.wrote;
        if going_on && output.len() < FLUSH_AT {
            continue;
        }
        if wrote && let Some(committer) = committer {
            let synced = committer.durable(shared.store.as_ref()).await;
            shared.stats.syncs_before_reply.incr();
            if let Err(e) = synced {
                // Nothing since the last sync is acknowledged: its replies become the error.
                output.truncate(replies_from);
                Reply::error(format!("ERR write not durable: {e}"))
                    .encode(session.protocol, output);
                break (Flow::Close, true);
            }
        }
        wrote = false;
        if !going_on && (!stretch.more || stretch.flow != Flow::Continue) {
            break (stretch.flow, stretch.broken);
        }
        // A full reply buffer mid-pipeline: send it, then go on.
        if !charge.update(input.capacity(), output.capacity()) {
            evict(stream, shared, session.protocol, (input, output), charge).await;
            return Err(());
        }
        match write_while_reading(stream, output, input, charge).await {
            Ok(true) => {}
            Ok(false) => {
                // Mid-reply: no error reply can be framed; the connection just closes.
                shared.stats.evicted_clients.incr();
                return Err(());
            }
            Err(_) => return Err(()),
        }
        output.clear();
        replies_from = 0;
    };
    input.drain(..consumed.min(input.len()));
    Ok(result)
}

/// Applies a connection's SETs through the set queue (by this task, or by the one leading)
/// and appends their replies.
async fn apply_queued(
    shared: &Shared,
    queue: &SetQueue,
    session: &Session,
    sets: SetBatch,
    output: &mut Vec<u8>,
) {
    let count = sets.len();
    let replies = queue
        .run(sets, |batches| {
            shared
                .stats
                .set_batches_for_others
                .add(batches.len() as u64 - 1);
            batches
                .iter()
                .map(|sets| Ok(command::execute_plain_sets(shared, sets)))
                .collect()
        })
        .await;
    match replies {
        Ok(replies) => {
            for reply in replies {
                reply.encode(session.protocol, output);
            }
        }
        Err(e) => {
            // The leader's work panicked: whether these SETs were applied is unknown.
            let reply = Reply::error(format!("ERR write may not have been applied: {e}"));
            for _ in 0..count {
                reply.encode(session.protocol, output);
            }
        }
    }
}
