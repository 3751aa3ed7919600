//! The NFSv4.1 callback path over RPC-over-RDMA (RFC 8167, RFC 8881 §2.10.13): the
//! connections' backchannel handles, and backward calls sent on them.
//!
//! Normal operation: every COMPOUND handler that runs on a server with backchannel credits
//! gets its connection's [`BackChannel`]; [`Backs::note`] keeps one per connection. A callback
//! for a session ([`super::deleg`]) goes to the connection its back channel is bound to: the
//! handle is enabled (the client asked for the back channel in CREATE_SESSION or
//! BIND_CONN_TO_SESSION, so it serves backward calls), the arguments are copied into a
//! registered buffer and sent as a backward call of the client's callback program, version 1,
//! with the credential the client gave for the session (RFC 8881 §18.36.3).
//!
//! Recovery: a connection with no handle (a server without backchannel credits), a closed
//! one, no free argument buffer, arguments larger than the buffer, a call the connection
//! refuses, and a call that fails (no answer in the server's backward timeout, an RPC error,
//! a lost connection) all report "no answer", which marks the session's back channel down.
//! Closed connections' handles are dropped when a new one is noted, so the map holds at most
//! one handle per live connection; a connection whose handle is closed or gone is not
//! [`Backs::alive`], which marks the back channels bound to it down (`reconnect.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rpcrdma_poller::{BackCallOptions, BackChannel, CredBody, Proc};

use super::deleg::Done;

/// The backchannel handles of the connections COMPOUNDs came on.
#[derive(Default)]
pub struct Backs {
    by_conn: Mutex<HashMap<u64, BackChannel>>,
}

impl Backs {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, BackChannel>> {
        match self.by_conn.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Keeps connection `conn`'s handle (once; closed connections' handles go).
    pub fn note(&self, conn: u64, b: &BackChannel) {
        let mut m = self.map();
        if m.contains_key(&conn) {
            return;
        }
        m.retain(|_, v| !v.is_closed());
        m.insert(conn, b.clone());
    }

    /// Whether connection `conn` has a backchannel handle that is not closed.
    pub fn alive(&self, conn: u64) -> bool {
        self.map().get(&conn).is_some_and(|b| !b.is_closed())
    }

    /// Sends `proc_` of `program` version 1 with credential `cred` and `args` on connection
    /// `conn`; `done` learns whether a reply came.
    pub fn call(
        &self,
        conn: u64,
        program: u32,
        proc_: u32,
        cred: &CredBody,
        args: &[u8],
        done: Done,
    ) {
        let Some(bc) = self.map().get(&conn).cloned() else {
            return done(false);
        };
        bc.enable();
        let Some(mut a) = bc.args() else {
            return done(false);
        };
        if a.put(args).is_err() {
            return done(false);
        }
        let cell = Arc::new(Mutex::new(Some(done)));
        let on = Arc::clone(&cell);
        let opts = BackCallOptions {
            credential: Some(*cred),
            ..BackCallOptions::default()
        };
        let sent = bc.call_with(Proc::new(program, 1, proc_), a, opts, move |r| {
            if let Some(d) = on.lock().ok().and_then(|mut g| g.take()) {
                d(r.is_ok());
            }
        });
        if sent.is_err() {
            if let Some(d) = cell.lock().ok().and_then(|mut g| g.take()) {
                d(false);
            }
        }
    }
}
