//! Worker mode: application callbacks and procedure handlers run on worker threads instead of
//! the reactors.
//!
//! Normal operation: every node (reactor) has one SPSC ring to each worker (jobs) and one back
//! (results); a connection always uses the same worker (`slot % workers`), so its jobs keep
//! their order. A node enqueues jobs in bursts at the end of its poll; a worker dequeues bursts
//! from all its rings, runs the jobs (server handlers write straight into the registered reply
//! buffer; client callbacks get the reply buffer itself) and enqueues handler results back. The
//! node turns results into replies. Idle workers back off (spin, yield, park). Both directions
//! use a [`Doorbell`]: a node rings a worker's bell after enqueueing jobs, a worker rings its
//! node's bell (the reactor's, [`NodeLinks::set_node_bell`]) after enqueueing results; a bell
//! wakes its owner only when the owner armed it to sleep (armed, then one more look at every ring,
//! then parked), so spinning sides pay a fence and a load per burst, no system call. A parked
//! worker sleeps until rung (no timeout); the stop wakes it unconditionally.
//!
//! Recovery (back-pressure, never drop or reorder): when a job ring is full the node keeps the
//! job, and every later one of the node, in an overflow queue sized at creation for every call
//! slot it has, and retries first on the next poll. While anything waits there, server calls keep
//! their slots (no reply, so the client gets no new credit) and clients take no new calls from
//! their submission rings. A worker whose result ring is full waits (yielding) for the node to
//! drain it. At shutdown workers finish every job already in their rings; a job dropped unrun (a
//! ring dropped at process teardown) completes its client callback with an error through
//! [`Callback`]'s drop.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crate::doorbell::Waker;

use crate::doorbell::Doorbell;

use rpcrdma_engine::rpc::{AuthFlavor, OpaqueAuth};
use rpcrdma_mempool::PoolBuf;

use crate::backoff::{Backoff, BackoffConfig};
use crate::call::{Callback, ClientError, Reply};
use crate::program::{CallTransport, DdpItems, Handler, Reject, ReplyBuilder, Request, MAX_DDP};
use crate::ring::{self, Consumer, Producer};
use crate::sched::{RealtimeWake, RtThread};
use crate::session::BackChannel;

/// Jobs moved per ring operation.
pub const BURST: usize = 32;

/// A borrowed byte range handed to a worker. The node guarantees the memory stays valid and
/// unwritten until the job's result comes back (the call's receive/data buffer is held by the
/// connection until its reply is sent, and a connection's memory is released only when no job
/// of it is out).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawSlice {
    ptr: *const u8,
    len: usize,
}

// SAFETY: see the type's documentation: the pointed-to memory is registered memory owned by
// the node for the job's lifetime and read only by the worker meanwhile.
unsafe impl Send for RawSlice {}

impl RawSlice {
    pub(crate) fn new(s: &[u8]) -> RawSlice {
        RawSlice {
            ptr: s.as_ptr(),
            len: s.len(),
        }
    }

    /// # Safety
    /// The memory must be valid and unwritten for `'a` (see the type's documentation).
    unsafe fn get<'a>(self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the caller's promise.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A handler call for a worker.
pub(crate) struct ServeJob {
    /// Names the connection slot, its generation and the call (for the node).
    pub token: u64,
    pub call_slot: u32,
    pub call_gen: u32,
    pub handler: Arc<dyn Handler>,
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_num: u32,
    pub cred_flavor: u32,
    pub cred: RawSlice,
    pub args: RawSlice,
    pub write_caps: [u32; MAX_DDP],
    pub nwrite: u8,
    pub transport: CallTransport,
    pub reply: PoolBuf,
    pub base: u32,
    /// The results end before this offset of `reply` (see `program::reply_window`).
    pub limit: u32,
    pub ddp: DdpItems,
    /// The connection's backchannel handle (server calls).
    pub back: Option<BackChannel>,
}

/// A client completion for a worker.
pub(crate) struct CompleteJob {
    pub cb: Callback,
    pub outcome: Result<Reply, ClientError>,
}

/// Work for a worker.
pub(crate) enum Job {
    Serve(ServeJob),
    Complete(CompleteJob),
}

/// A handler's result, back to the node.
pub(crate) struct Served {
    pub token: u64,
    pub call_slot: u32,
    pub call_gen: u32,
    pub xid: u32,
    pub reply: PoolBuf,
    pub ddp: DdpItems,
    pub result: Result<usize, Reject>,
}

impl ServeJob {
    fn run(mut self) -> Served {
        // SAFETY: the node keeps the call's stream alive and unwritten until `Served` returns.
        let (args, cred) = unsafe { (self.args.get(), self.cred.get()) };
        let nw = (self.nwrite as usize).min(MAX_DDP);
        let req = Request {
            xid: self.xid,
            prog: self.prog,
            vers: self.vers,
            proc_num: self.proc_num,
            cred: OpaqueAuth {
                flavor: AuthFlavor::from_u32(self.cred_flavor),
                body: cred,
            },
            args,
            write_chunks: &self.write_caps[..nw],
            transport: self.transport,
            back: self.back.as_ref(),
        };
        let base = self.base as usize;
        let result = {
            let out = self.reply.get_mut(base..).unwrap_or_default();
            let mut b = ReplyBuilder::new(out, self.base, &mut self.ddp)
                .with_window((self.limit as usize).saturating_sub(base));
            match self.handler.handle(&req, &mut b) {
                Ok(()) => Ok(b.len()),
                Err(r) => Err(r),
            }
        };
        Served {
            token: self.token,
            call_slot: self.call_slot,
            call_gen: self.call_gen,
            xid: self.xid,
            reply: self.reply,
            ddp: self.ddp,
            result,
        }
    }
}

/// A node's reactor doorbell as the workers see it: set by the node on its first poll when its
/// reactor may sleep (empty for a busy-polling reactor, which needs no waking).
type NodeBell = Arc<OnceLock<Arc<Doorbell>>>;

/// A node's side of its links to the workers.
pub(crate) struct NodeLinks {
    jobs: Vec<Producer<Job>>,
    done: Vec<Consumer<Served>>,
    /// Each worker's doorbell (rung after enqueueing jobs for it).
    bells: Vec<Arc<Doorbell>>,
    /// This node's reactor doorbell, shared with the workers.
    node_bell: NodeBell,
    /// Jobs that did not fit their ring, in order (worker index, job).
    overflow: VecDeque<(usize, Job)>,
    overflow_cap: usize,
    touched: u64,
}

impl NodeLinks {
    /// Queues `job` for worker `w` (ring, or overflow when the ring or the overflow is in use).
    /// Returns `false` when the ring was full (back-pressure event).
    pub(crate) fn submit(&mut self, w: usize, job: Job) -> bool {
        let w = w % self.jobs.len().max(1);
        if self.overflow.is_empty() {
            match self.jobs[w].enqueue(job) {
                Ok(()) => {
                    self.touched |= 1 << (w % 64);
                    return true;
                }
                Err(j) => {
                    self.push_overflow(w, j);
                    return false;
                }
            }
        }
        self.push_overflow(w, job);
        false
    }

    fn push_overflow(&mut self, w: usize, job: Job) {
        // Sized at creation for every call slot of the node, so this never grows; if an
        // accounting error ever made it, growing beats dropping a job.
        debug_assert!(self.overflow.len() < self.overflow_cap);
        self.overflow.push_back((w, job));
    }

    /// True while jobs wait in the overflow (back-pressure is on).
    pub(crate) fn congested(&self) -> bool {
        !self.overflow.is_empty()
    }

    /// Moves overflowed jobs into their rings, in order, and wakes the workers that got jobs.
    /// Returns the jobs moved.
    pub(crate) fn flush(&mut self) -> usize {
        let mut moved = 0;
        while let Some((w, job)) = self.overflow.pop_front() {
            match self.jobs[w].enqueue(job) {
                Ok(()) => {
                    self.touched |= 1 << (w % 64);
                    moved += 1;
                }
                Err(j) => {
                    self.overflow.push_front((w, j));
                    break;
                }
            }
        }
        if self.touched != 0 {
            for (i, b) in self.bells.iter().enumerate() {
                if self.touched & (1 << (i % 64)) != 0 {
                    // After the enqueues above (their Release stores): see `Doorbell::ring`.
                    b.ring();
                }
            }
            self.touched = 0;
        }
        moved
    }

    /// Gives the workers this node's reactor doorbell (the node calls it on its reactor thread,
    /// with `PollerCtx::doorbell`); later calls change nothing.
    pub(crate) fn set_node_bell(&self, bell: &Arc<Doorbell>) {
        let _ = self.node_bell.set(Arc::clone(bell));
    }

    /// Takes up to [`BURST`] results from each worker.
    pub(crate) fn results<F: FnMut(Served)>(&mut self, mut f: F) -> usize {
        let mut n = 0;
        for c in self.done.iter_mut() {
            n += c.dequeue_burst_with(BURST, &mut f);
        }
        n
    }

    /// Jobs in the rings now and jobs in the overflow.
    pub(crate) fn occupancy(&self) -> (usize, usize) {
        let used = self.jobs.iter().map(|p| p.used_count()).sum();
        (used, self.overflow.len())
    }
}

/// One worker's side.
struct WorkerSide {
    jobs: Vec<Consumer<Job>>,
    done: Vec<Producer<Served>>,
    /// The nodes' reactor threads: woken unconditionally while a full result ring waits.
    node_threads: Vec<Arc<OnceLock<Waker>>>,
    /// The nodes' reactor doorbells (rung after enqueueing results).
    node_bells: Vec<NodeBell>,
    bell: Arc<Doorbell>,
}

/// The worker threads of an endpoint.
pub(crate) struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    bells: Vec<Arc<Doorbell>>,
}

impl Workers {
    /// Starts `n` workers for `nodes` nodes with rings of `ring_cap` (a power of two); returns
    /// each node's links. `node_threads[i]` is filled by node `i` with its reactor's waker.
    pub(crate) fn start(
        n: usize,
        nodes: usize,
        ring_cap: usize,
        overflow_cap: usize,
        (backoff, realtime): (BackoffConfig, Option<RealtimeWake>),
        node_threads: &[Arc<OnceLock<Waker>>],
        name: &str,
    ) -> Result<(Workers, Vec<NodeLinks>), crate::ring::RingError> {
        let node_bells: Vec<NodeBell> = (0..nodes).map(|_| Arc::new(OnceLock::new())).collect();
        let mut links: Vec<NodeLinks> = node_bells
            .iter()
            .map(|nb| NodeLinks {
                jobs: Vec::with_capacity(n),
                done: Vec::with_capacity(n),
                bells: Vec::with_capacity(n),
                node_bell: Arc::clone(nb),
                overflow: VecDeque::with_capacity(overflow_cap),
                overflow_cap,
                touched: 0,
            })
            .collect();
        let mut sides = Vec::with_capacity(n);
        let mut bells = Vec::with_capacity(n);
        for _ in 0..n {
            let bell = Arc::new(Doorbell::new());
            let mut side = WorkerSide {
                jobs: Vec::with_capacity(nodes),
                done: Vec::with_capacity(nodes),
                node_threads: node_threads.to_vec(),
                node_bells: node_bells.clone(),
                bell: Arc::clone(&bell),
            };
            for l in links.iter_mut() {
                let (jp, jc) = ring::channel::<Job>(ring_cap)?;
                let (dp, dc) = ring::channel::<Served>(ring_cap)?;
                l.jobs.push(jp);
                l.done.push(dc);
                l.bells.push(Arc::clone(&bell));
                side.jobs.push(jc);
                side.done.push(dp);
            }
            bells.push(bell);
            sides.push(side);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::with_capacity(n);
        for (i, side) in sides.into_iter().enumerate() {
            let stop = Arc::clone(&stop);
            let t = std::thread::Builder::new()
                .name(format!("{name}-worker-{i}"))
                .spawn(move || worker_loop(side, stop, backoff, realtime))
                .map_err(|_| crate::ring::RingError::BadCapacity)?;
            threads.push(t);
        }
        Ok((
            Workers {
                stop,
                threads,
                bells,
            },
            links,
        ))
    }

    /// Stops the workers once their rings are empty (stop the reactors first so nothing more
    /// arrives).
    pub(crate) fn stop(&mut self) {
        // Release: pairs with the workers' Acquire loads; they exit once their rings are
        // empty.
        self.stop.store(true, Ordering::Release);
        for b in &self.bells {
            // Unconditional: a worker between its stop check and its park keeps the token.
            b.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}

fn worker_loop(
    mut side: WorkerSide,
    stop: Arc<AtomicBool>,
    backoff: BackoffConfig,
    realtime: Option<RealtimeWake>,
) {
    side.bell.register();
    let mut bo = Backoff::new(backoff);
    // Real-time wake-ups (a parking worker only); the clock is this thread's own.
    let t0 = std::time::Instant::now();
    let clock = || u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let (mut rt, _) = RtThread::start(realtime.filter(|_| backoff.enabled), 0);
    // The bell is armed: this iteration is the re-check before parking.
    let mut armed = false;
    loop {
        let did = run_bursts(&mut side);
        if did > 0 {
            if rt.is_fifo() {
                rt.busy(clock());
            }
            bo.reset();
            if core::mem::take(&mut armed) {
                side.bell.disarm();
            }
            continue;
        }
        // Acquire: pairs with the Release store in `Workers::stop`. The rings were just found
        // empty; jobs a node still enqueues after this are dropped with the rings (client
        // callbacks then run with `Dropped`), which only happens when the endpoint is dropped
        // before its reactors stopped.
        if stop.load(Ordering::Acquire) {
            let left: usize = side.jobs.iter().map(|c| c.used_count()).sum();
            if left == 0 {
                break;
            }
            continue;
        }
        if !bo.is_enabled() {
            core::hint::spin_loop();
            continue;
        }
        if rt.is_fifo() {
            // Real-time: no spinning (see `crate::sched`).
            bo.skip_to_sleep();
        }
        if !armed && bo.sleeps_next() {
            // "About to sleep"; the next iteration's look at every ring is the re-check.
            side.bell.arm();
            armed = true;
            continue;
        }
        match bo.next_action() {
            // Armed, and the re-check (the loop above) found nothing: park until a node rings
            // (or the stop, which wakes unconditionally after its store). `park` disarms.
            crate::backoff::IdleAction::Sleep(_) => {
                rt.sleeping();
                side.bell.park(None);
                if rt.is_on() {
                    rt.woke(clock());
                }
            }
            crate::backoff::IdleAction::Yield => std::thread::yield_now(),
            crate::backoff::IdleAction::Spin => core::hint::spin_loop(),
        }
        if core::mem::take(&mut armed) {
            side.bell.disarm();
        }
    }
}

/// One pass over every job ring: runs up to [`BURST`] jobs from each, enqueues handler results
/// and rings the node's bell after them. Returns the jobs run.
fn run_bursts(side: &mut WorkerSide) -> usize {
    let mut did = 0usize;
    for i in 0..side.jobs.len() {
        let (jobs, done) = (&mut side.jobs[i], &mut side.done[i]);
        let node_thread = &side.node_threads[i];
        let mut results = 0usize;
        let n = jobs.dequeue_burst_with(BURST, |job| match job {
            Job::Complete(c) => c.cb.call(c.outcome),
            Job::Serve(s) => {
                let mut r = s.run();
                loop {
                    match done.enqueue(r) {
                        Ok(()) => break,
                        Err(back) => {
                            r = back;
                            // The node drains results every poll; wake it (whatever its
                            // bell says: rare) and wait.
                            if let Some(t) = node_thread.get() {
                                t.wake();
                            }
                            std::thread::yield_now();
                        }
                    }
                }
                results += 1;
            }
        });
        if results > 0 {
            if let Some(b) = side.node_bells[i].get() {
                // After the enqueues above (their Release stores): see `Doorbell::ring`.
                b.ring();
            }
        }
        did += n;
    }
    did
}
