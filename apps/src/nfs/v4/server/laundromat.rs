//! The sweep of the NFSv4.1 state (RFC 8881 §8.3: a client that lets its lease expire loses
//! its state; §10.4.6 and §10.2: a delegation not returned after its recall is revoked), run at
//! the start of every COMPOUND and, so that nothing waits for one, by a thread of its own (the
//! laundromat, as Linux nfsd calls its own).
//!
//! Normal operation: [`Nfs41::sweep`] expires the clients whose lease ran out and revokes the
//! delegations recalled more than a lease ago ([`super::state::State::expire`], which looks at
//! nothing until something may be due), then settles what that left outside the state mutex
//! ([`Nfs41::settle`]: stable-storage records, NLM requests waiting for the locks that went).
//! Without the thread, an NFSv3 write waiting for a delegation whose holder died, or an NLM
//! request waiting for its locks, would wait for the next NFSv4.1 call of any client.
//!
//! Recovery: the thread holds the server weakly and stops when it is gone or when its
//! [`Laundromat`] is dropped (the drop waits for the thread).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Nfs41;

impl Nfs41 {
    /// Expires the clients past their lease and revokes the delegations not returned a lease
    /// after their recall, then [`Nfs41::settle`]s.
    pub fn sweep(&self) {
        let now = self.now_ms();
        self.state().expire(now, self.config().limits.lease_secs);
        self.settle();
    }

    /// Starts the thread that sweeps this server every `period`.
    pub fn start_laundromat(self: &Arc<Self>, period: Duration) -> std::io::Result<Laundromat> {
        let stop = Arc::new(AtomicBool::new(false));
        let (srv, flag): (Weak<Nfs41>, _) = (Arc::downgrade(self), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("nfs4-laundromat".into())
            .spawn(move || {
                // Relaxed: a stop request, seen at the next wake-up at the latest.
                while !flag.load(Ordering::Relaxed) {
                    std::thread::park_timeout(period);
                    match srv.upgrade() {
                        Some(s) if !flag.load(Ordering::Relaxed) => s.sweep(),
                        _ => break,
                    }
                }
            })?;
        Ok(Laundromat {
            stop,
            thread: Some(thread),
        })
    }
}

/// The running sweep thread of a server; dropping it stops the thread.
pub struct Laundromat {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Laundromat {
    fn drop(&mut self) {
        // Relaxed: the unpark below wakes the thread, which reads it then.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
