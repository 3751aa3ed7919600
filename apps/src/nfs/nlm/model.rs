//! A reference model of the NLM lock table, octet by octet, and a checker that runs a
//! sequence of requests through both and compares them after every step: the `nlm_locks`
//! fuzz target and `cargo test` (random sequences) drive [`check`].
//!
//! Normal operation: the model keeps, for each of two files and each of 33 cells (octets 0
//! to 31 and one cell standing for 32 to the largest offset), which owners hold it and how;
//! waiting requests in arrival order. The rules are POSIX's and XNFS's, written plainly: a
//! request conflicts with another owner's lock on any cell it covers when either is
//! exclusive; a lock or unlock rewrites the owner's cells; whenever locks go, the waiting
//! requests are tried in order, each given its lock when nothing is in its way, from the head
//! again after each grant. After each step the table's locks must be exactly the model's
//! maximal runs of one owner and type (ranges split and merged as POSIX does), its queue the
//! model's queue, its grants the model's, its TEST holder a conflicting run, and no request
//! may wait that nothing holds up. Recovery: the first difference is
//! returned as an error naming the step.
//!
//! Not modelled: which deadlocks are found (the table follows one chain, as Linux does): a
//! NLM4_DEADLCK answer must only come with a cycle in the model's waits-for graph.

use std::net::{IpAddr, Ipv4Addr};

use super::locks::{Grant, GrantArgs, HeldLock, HostKey, Limits, LockTable, Want, OFFSET_MAX};
use super::proto::Stat;

/// Cells per file: octets 0..=31 and one for 32..=[`OFFSET_MAX`].
const CELLS: usize = 33;
const FILES: [&[u8]; 2] = [b"f0", b"f1"];

type Owner = (u8, i32);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Waiter {
    owner: Owner,
    s: usize,
    e: usize,
    excl: bool,
}

#[derive(Debug, Default, Clone)]
struct Model {
    cells: [Vec<Vec<(Owner, bool)>>; 2],
    waiters: [Vec<Waiter>; 2],
}

fn host_key(h: u8) -> HostKey {
    let (a, name): (u8, &[u8]) = match h % 3 {
        0 => (1, b"a"),
        1 => (1, b"b"),
        _ => (2, b"a"),
    };
    HostKey {
        addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, a)),
        name: name.to_vec(),
    }
}

/// The cells of octets `start..=end`.
fn cells_of(start: u64, end: u64) -> (usize, usize) {
    (start as usize, end.min(32) as usize)
}

impl Model {
    fn new() -> Model {
        Model {
            cells: [vec![Vec::new(); CELLS], vec![Vec::new(); CELLS]],
            waiters: [Vec::new(), Vec::new()],
        }
    }

    fn blockers(&self, f: usize, o: Owner, s: usize, e: usize, excl: bool) -> Vec<Owner> {
        let mut v = Vec::new();
        for c in &self.cells[f][s..=e] {
            for &(o2, t) in c {
                if o2 != o && (t || excl) && !v.contains(&o2) {
                    v.push(o2);
                }
            }
        }
        v
    }

    fn set(&mut self, f: usize, o: Owner, s: usize, e: usize, kind: Option<bool>) {
        for c in &mut self.cells[f][s..=e] {
            c.retain(|&(o2, _)| o2 != o);
            if let Some(t) = kind {
                c.push((o, t));
            }
        }
    }

    /// The waiting requests of `f` that nothing holds up get their locks, in order.
    fn wake(&mut self, f: usize, grants: &mut Vec<(usize, Waiter)>) {
        let mut i = 0;
        while i < self.waiters[f].len() {
            let w = self.waiters[f][i].clone();
            if !self.blockers(f, w.owner, w.s, w.e, w.excl).is_empty() {
                i += 1;
                continue;
            }
            self.set(f, w.owner, w.s, w.e, Some(w.excl));
            self.waiters[f].remove(i);
            grants.push((f, w));
            i = 0;
        }
    }

    /// True when `o`, waiting for `blockers`, closes a cycle of waits.
    fn cycle(&self, o: Owner, blockers: Vec<Owner>) -> bool {
        let mut seen: Vec<Owner> = Vec::new();
        let mut todo = blockers;
        while let Some(x) = todo.pop() {
            if x == o {
                return true;
            }
            if seen.contains(&x) {
                continue;
            }
            seen.push(x);
            for f in 0..2 {
                for w in self.waiters[f].iter().filter(|w| w.owner == x) {
                    todo.extend(self.blockers(f, x, w.s, w.e, w.excl));
                }
            }
        }
        false
    }

    /// The maximal runs of one owner and type, as the table must hold them.
    fn runs(&self, f: usize) -> Vec<HeldLock> {
        let mut out = Vec::new();
        let mut owners: Vec<Owner> = Vec::new();
        for c in &self.cells[f] {
            for &(o, _) in c {
                if !owners.contains(&o) {
                    owners.push(o);
                }
            }
        }
        for o in owners {
            let kind = |c: usize| self.cells[f][c].iter().find(|x| x.0 == o).map(|x| x.1);
            let mut c = 0;
            while c < CELLS {
                let Some(t) = kind(c) else {
                    c += 1;
                    continue;
                };
                let start = c;
                while c + 1 < CELLS && kind(c + 1) == Some(t) {
                    c += 1;
                }
                out.push(HeldLock {
                    host: host_key(o.0),
                    svid: o.1,
                    start: start as u64,
                    end: if c == 32 { OFFSET_MAX } else { c as u64 },
                    exclusive: t,
                });
                c += 1;
            }
        }
        out
    }
}

fn key(h: &HeldLock) -> (Vec<u8>, IpAddr, i32, u64, u64, bool) {
    (
        h.host.name.clone(),
        h.host.addr,
        h.svid,
        h.start,
        h.end,
        h.exclusive,
    )
}

fn grant_args(o: Owner, w: &Want) -> GrantArgs {
    GrantArgs {
        cookie: Vec::new(),
        caller: host_key(o.0).name,
        fh: Vec::new(),
        oh: Vec::new(),
        svid: o.1,
        offset: w.start,
        len: if w.end == OFFSET_MAX {
            0
        } else {
            w.end - w.start + 1
        },
        exclusive: w.exclusive,
    }
}

/// Compares the table's grants with the model's, file by file in order.
fn same_grants(t: &[Grant], m: &[(usize, Waiter)]) -> Result<(), String> {
    for (f, file) in FILES.iter().enumerate() {
        let a: Vec<(HostKey, i32, u64, bool)> = t
            .iter()
            .filter(|g| g.file == *file)
            .map(|g| (g.host.clone(), g.args.svid, g.args.offset, g.args.exclusive))
            .collect();
        let b: Vec<(HostKey, i32, u64, bool)> = m
            .iter()
            .filter(|(mf, _)| *mf == f)
            .map(|(_, w)| (host_key(w.owner.0), w.owner.1, w.s as u64, w.excl))
            .collect();
        if a != b {
            return Err(format!("grants on file {f}: table {a:?}, model {b:?}"));
        }
    }
    Ok(())
}

fn same_state(t: &LockTable, m: &Model) -> Result<(), String> {
    for (f, file) in FILES.iter().enumerate() {
        if let Some(w) = m.waiters[f]
            .iter()
            .find(|w| m.blockers(f, w.owner, w.s, w.e, w.excl).is_empty())
        {
            return Err(format!("{w:?} waits on file {f} with nothing in its way"));
        }
        let mut a: Vec<_> = t.held(file).iter().map(key).collect();
        let mut b: Vec<_> = m.runs(f).iter().map(key).collect();
        a.sort();
        b.sort();
        if a != b {
            return Err(format!("locks on file {f}: table {a:?}, model {b:?}"));
        }
        let qa: Vec<(HostKey, i32, u64, bool)> = t
            .waiters(file)
            .into_iter()
            .map(|(h, w)| (h, w.svid, w.start, w.exclusive))
            .collect();
        let qb: Vec<(HostKey, i32, u64, bool)> = m.waiters[f]
            .iter()
            .map(|w| (host_key(w.owner.0), w.owner.1, w.s as u64, w.excl))
            .collect();
        if qa != qb {
            return Err(format!("queue of file {f}: table {qa:?}, model {qb:?}"));
        }
    }
    Ok(())
}

/// One step of the input: 4 octets (kind, who and which file, offset, length).
struct Step {
    kind: u8,
    owner: Owner,
    f: usize,
    want: Want,
}

fn step(b: &[u8]) -> Step {
    let who = b[1];
    let offset = u64::from(b[2] % 32);
    let len = match u64::from(b[3] % 9) {
        0 => 0,
        n => n.min(32 - offset),
    };
    let owner = (who % 3, i32::from((who >> 2) % 3));
    let excl = who & 0x20 != 0;
    let want = Want::of(owner.1, offset, len, excl).unwrap_or(Want {
        svid: owner.1,
        start: 0,
        end: 0,
        exclusive: excl,
    });
    Step {
        kind: b[0] % 6,
        owner,
        f: usize::from(who & 0x10 != 0),
        want,
    }
}

/// Runs the requests `input` describes (4 octets each) through a [`LockTable`] and the model,
/// comparing them after each; the first difference is the error.
pub fn check(input: &[u8]) -> Result<(), String> {
    let limits = Limits {
        hosts: 64,
        hosts_per_addr: 64,
        locks_per_host: 1 << 16,
        waiters_per_host: 1 << 16,
        shares_per_host: 64,
    };
    let mut t = LockTable::new(limits);
    let mut m = Model::new();
    for (i, b) in input.chunks_exact(4).enumerate() {
        let st = step(b);
        apply(&mut t, &mut m, &st).map_err(|e| format!("step {i} ({:?}): {e}", b))?;
        same_state(&t, &m).map_err(|e| format!("after step {i} ({b:?}): {e}"))?;
    }
    Ok(())
}

fn apply(t: &mut LockTable, m: &mut Model, st: &Step) -> Result<(), String> {
    let (o, f, w) = (st.owner, st.f, st.want);
    let (s, e) = cells_of(w.start, w.end);
    let host = host_key(o.0);
    let file = FILES[f];
    let mut tg = Vec::new();
    let mut mg = Vec::new();
    match st.kind {
        0 | 1 => {
            let block = st.kind == 1;
            let got = t.lock(&host, file, w, block, || grant_args(o, &w), &mut tg);
            let blockers = m.blockers(f, o, s, e, w.exclusive);
            let same = Waiter {
                owner: o,
                s,
                e,
                excl: w.exclusive,
            };
            match (blockers.is_empty(), block, got) {
                (true, _, Stat::GRANTED) => {
                    m.set(f, o, s, e, Some(w.exclusive));
                    m.waiters[f].retain(|x| *x != same);
                    m.wake(f, &mut mg);
                }
                (false, false, Stat::DENIED) => {}
                (false, true, Stat::BLOCKED) => {
                    if !m.waiters[f].contains(&same) {
                        m.waiters[f].push(same);
                    }
                }
                (false, true, Stat::DEADLCK) => {
                    if !m.cycle(o, blockers) {
                        return Err("NLM4_DEADLCK without a cycle of waits".into());
                    }
                }
                (free, _, got) => return Err(format!("LOCK answered {got:?}; model free: {free}")),
            }
        }
        2 => {
            let got = t.unlock(&host, file, &w, &mut tg);
            if got != Stat::GRANTED {
                return Err(format!("UNLOCK answered {got:?}"));
            }
            m.set(f, o, s, e, None);
            m.wake(f, &mut mg);
        }
        3 => {
            t.cancel(&host, file, &w);
            m.waiters[f]
                .retain(|x| !(x.owner == o && x.s == s && x.e == e && x.excl == w.exclusive));
        }
        4 => {
            let got = t.test(&host, file, &w);
            let blockers = m.blockers(f, o, s, e, w.exclusive);
            match got {
                None if blockers.is_empty() => {}
                Some(h) => {
                    let runs = m.runs(f);
                    let end = if h.len == 0 {
                        OFFSET_MAX
                    } else {
                        h.offset + h.len - 1
                    };
                    let found = runs.iter().any(|r| {
                        blockers
                            .iter()
                            .any(|b| host_key(b.0) == r.host && b.1 == r.svid)
                            && r.svid == h.svid
                            && r.start == h.offset
                            && r.end == end
                            && r.exclusive == h.exclusive
                            && r.start <= w.end
                            && w.start <= r.end
                            && (r.exclusive || w.exclusive)
                    });
                    if !found {
                        return Err(format!("TEST holder {h:?} is no conflicting run"));
                    }
                }
                None => return Err("TEST found nothing in the way".into()),
            }
        }
        _ => {
            t.free_host(&host, &mut tg);
            for f in 0..2 {
                let had = m.cells[f].iter().any(|c| c.iter().any(|x| x.0 .0 == o.0));
                for c in &mut m.cells[f] {
                    c.retain(|x| x.0 .0 != o.0);
                }
                m.waiters[f].retain(|x| x.owner.0 != o.0);
                if had {
                    m.wake(f, &mut mg);
                }
            }
        }
    }
    same_grants(&tg, &mg)
}

#[cfg(test)]
mod tests {
    /// A small deterministic generator (xorshift64*).
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }

    #[test]
    fn accepts_random_request_sequences_as_the_model_answers_them() {
        for seed in 0..400u64 {
            let input = bytes(seed, 4 * 120);
            if let Err(e) = super::check(&input) {
                panic!("seed {seed}: {e}");
            }
        }
    }
}
