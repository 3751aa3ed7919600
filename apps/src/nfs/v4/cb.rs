//! The NFSv4.1 callback program (RFC 8881 §20) as a client serves it on its RFC 8167
//! backchannel: CB_COMPOUND with CB_SEQUENCE and CB_RECALL, the client's backchannel slot
//! table and its reply cache.
//!
//! Normal operation: the server calls the program the client named in CREATE_SESSION
//! (`csa_cb_program`), version 1 ([`VERSION`]). CB_NULL is answered by the RPC dispatch. Every
//! CB_COMPOUND of minor version 1 starts with CB_SEQUENCE; [`CbServer::serve`] checks it
//! against the session's slot table (the session id, a slot below `ca_maxrequests`, a sequence
//! id one above the slot's last), answers it with the same session, sequence and slot and the
//! table's highest slot, then runs the other operations in order: CB_RECALL goes to the
//! caller's recall function, whose status is returned. The reply is cached per slot, so a
//! retransmission (same sequence id) gets the same octets again without running anything.
//!
//! Recovery: a header that does not decode is an error for the RPC layer (GARBAGE_ARGS); a
//! minor version other than 1 is answered NFS4ERR_MINOR_VERS_MISMATCH with no results; a bad
//! CB_SEQUENCE (another session, a slot out of range, a sequence id out of order, not first)
//! ends the COMPOUND with NFS4ERR_BADSESSION, NFS4ERR_BADSLOT, NFS4ERR_SEQ_MISORDERED or
//! NFS4ERR_SEQUENCE_POS without touching the slot; a first operation other than CB_SEQUENCE
//! gets NFS4ERR_OP_NOT_IN_SESSION; an operation this client does not implement ends the
//! COMPOUND with NFS4ERR_NOTSUPP (a known callback operation) or CB_ILLEGAL /
//! NFS4ERR_OP_ILLEGAL (an unknown number). Nothing panics on wire input.

use rpcrdma_engine::xdr::XdrReader;

use crate::nfs::v4::{
    get_stateid, Nfs4Error, SessionId, StateId, NFS4ERR_BADSESSION, NFS4ERR_BADSLOT,
    NFS4ERR_MINOR_VERS_MISMATCH, NFS4ERR_NOTSUPP, NFS4ERR_OP_ILLEGAL, NFS4ERR_OP_NOT_IN_SESSION,
    NFS4ERR_RETRY_UNCACHED_REP, NFS4ERR_SEQUENCE_POS, NFS4ERR_SEQ_MISORDERED, NFS4_OK,
};

/// The callback program's version (what Linux and the RFC's XDR use).
pub const VERSION: u32 = 1;
/// CB_NULL.
pub const PROC_NULL: u32 = 0;
/// CB_COMPOUND.
pub const PROC_COMPOUND: u32 = 1;

/// Callback operation numbers (RFC 8881 §20).
pub mod op {
    /// CB_GETATTR (the lowest callback operation number).
    pub const GETATTR: u32 = 3;
    /// CB_RECALL.
    pub const RECALL: u32 = 4;
    /// CB_SEQUENCE.
    pub const SEQUENCE: u32 = 11;
    /// CB_OFFLOAD (the highest of RFC 7862).
    pub const OFFLOAD: u32 = 15;
    /// CB_ILLEGAL.
    pub const ILLEGAL: u32 = 10044;
}

/// Most operations decoded from one CB_COMPOUND.
const MAX_OPS: u32 = 64;

/// CB_SEQUENCE4args.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbSequence {
    /// `csa_sessionid`.
    pub session: SessionId,
    /// `csa_sequenceid`.
    pub sequence: u32,
    /// `csa_slotid`.
    pub slot: u32,
    /// `csa_highest_slotid`.
    pub highest_slot: u32,
    /// `csa_cachethis`.
    pub cache_this: bool,
    /// Number of `referring_call_list4` entries.
    pub referring_lists: u32,
}

/// CB_RECALL4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbRecall {
    /// The delegation stateid.
    pub stateid: StateId,
    /// `truncate`.
    pub truncate: bool,
    /// The file handle.
    pub fh: Vec<u8>,
}

/// One decoded callback operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbOp {
    /// CB_SEQUENCE.
    Sequence(CbSequence),
    /// CB_RECALL.
    Recall(CbRecall),
    /// An operation this codec does not decode (its arguments, and every operation after
    /// it, are not read).
    Unknown(u32),
}

impl CbOp {
    /// The operation number.
    pub fn number(&self) -> u32 {
        match self {
            CbOp::Sequence(_) => op::SEQUENCE,
            CbOp::Recall(_) => op::RECALL,
            CbOp::Unknown(n) => *n,
        }
    }
}

/// CB_COMPOUND4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbCompound {
    /// `tag`.
    pub tag: Vec<u8>,
    /// `minorversion`.
    pub minor: u32,
    /// `callback_ident` (minor version 0 only; ignored in 1).
    pub ident: u32,
    /// The operations, up to the first one not decoded.
    pub ops: Vec<CbOp>,
}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put_opaque(b: &mut Vec<u8>, d: &[u8]) {
    put_u32(b, d.len() as u32);
    b.extend_from_slice(d);
    b.resize(b.len() + (4 - d.len() % 4) % 4, 0);
}

/// Decodes CB_COMPOUND4args.
pub fn decode_cb_compound(args: &[u8]) -> Result<CbCompound, Nfs4Error> {
    let mut r = XdrReader::new(args);
    let tag = r.get_opaque(1024)?.to_vec();
    let minor = r.get_u32()?;
    let ident = r.get_u32()?;
    let n = r.get_count(MAX_OPS)?;
    let mut ops = Vec::with_capacity(n as usize);
    for _ in 0..n {
        match r.get_u32()? {
            op::SEQUENCE => {
                let mut session = [0u8; 16];
                session.copy_from_slice(r.get_fixed_opaque(16)?);
                let sequence = r.get_u32()?;
                let slot = r.get_u32()?;
                let highest_slot = r.get_u32()?;
                let cache_this = r.get_bool()?;
                let referring_lists = r.get_count(MAX_OPS)?;
                for _ in 0..referring_lists {
                    r.get_fixed_opaque(16)?;
                    let calls = r.get_count(1024)?;
                    for _ in 0..calls {
                        r.get_u32()?;
                        r.get_u32()?;
                    }
                }
                ops.push(CbOp::Sequence(CbSequence {
                    session,
                    sequence,
                    slot,
                    highest_slot,
                    cache_this,
                    referring_lists,
                }));
            }
            op::RECALL => {
                let stateid = get_stateid(&mut r)?;
                let truncate = r.get_bool()?;
                let fh = r.get_opaque(128)?.to_vec();
                ops.push(CbOp::Recall(CbRecall {
                    stateid,
                    truncate,
                    fh,
                }));
            }
            other => {
                ops.push(CbOp::Unknown(other));
                return Ok(CbCompound {
                    tag,
                    minor,
                    ident,
                    ops,
                });
            }
        }
    }
    if !r.rest().is_empty() {
        return Err(Nfs4Error::Bad("octets after the last callback operation"));
    }
    Ok(CbCompound {
        tag,
        minor,
        ident,
        ops,
    })
}

/// Encodes CB_COMPOUND4args (what a server sends; for tests and tools). [`CbOp::Unknown`]
/// is encoded as its number alone.
pub fn encode_cb_compound(tag: &[u8], minor: u32, ident: u32, ops: &[CbOp]) -> Vec<u8> {
    let mut b = Vec::with_capacity(128);
    put_opaque(&mut b, tag);
    put_u32(&mut b, minor);
    put_u32(&mut b, ident);
    put_u32(&mut b, ops.len() as u32);
    for o in ops {
        put_u32(&mut b, o.number());
        match o {
            CbOp::Sequence(s) => {
                b.extend_from_slice(&s.session);
                put_u32(&mut b, s.sequence);
                put_u32(&mut b, s.slot);
                put_u32(&mut b, s.highest_slot);
                put_u32(&mut b, u32::from(s.cache_this));
                put_u32(&mut b, 0); // no referring call lists
            }
            CbOp::Recall(rc) => {
                b.extend_from_slice(&rc.stateid);
                put_u32(&mut b, u32::from(rc.truncate));
                put_opaque(&mut b, &rc.fh);
            }
            CbOp::Unknown(_) => {}
        }
    }
    b
}

/// How one CB_COMPOUND was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbServed {
    /// The COMPOUND's status (that of the last operation answered).
    pub status: u32,
    /// The operation numbers received (up to the first one not decoded).
    pub ops: Vec<u32>,
    /// The CB_SEQUENCE, when the COMPOUND started with one.
    pub sequence: Option<CbSequence>,
    /// The CB_SEQUENCE's status.
    pub sequence_status: Option<u32>,
    /// Each CB_RECALL run and the status it was answered with.
    pub recalls: Vec<(CbRecall, u32)>,
    /// The reply is the slot's cached one (a retransmission).
    pub replay: bool,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    /// The last sequence id accepted (0: none yet, the first must be 1).
    seq: u32,
    /// The reply to it.
    cached: Option<Vec<u8>>,
}

/// The client's side of a session's backchannel: its slot table (`ca_maxrequests` of the
/// CREATE_SESSION backchannel attributes) and reply cache.
#[derive(Debug, Clone)]
pub struct CbServer {
    session: SessionId,
    slots: Vec<Slot>,
}

impl CbServer {
    /// The backchannel of `session` with `slots` slots (at least 1).
    pub fn new(session: SessionId, slots: u32) -> CbServer {
        CbServer {
            session,
            slots: vec![Slot::default(); slots.max(1) as usize],
        }
    }

    /// The last sequence id accepted on `slot`.
    pub fn slot_sequence(&self, slot: u32) -> Option<u32> {
        self.slots.get(slot as usize).map(|s| s.seq)
    }

    fn check(&self, s: &CbSequence) -> Result<bool, u32> {
        if s.session != self.session {
            return Err(NFS4ERR_BADSESSION);
        }
        let Some(slot) = self.slots.get(s.slot as usize) else {
            return Err(NFS4ERR_BADSLOT);
        };
        if s.sequence == slot.seq.wrapping_add(1) {
            Ok(false)
        } else if s.sequence == slot.seq && slot.seq != 0 {
            Ok(true)
        } else {
            Err(NFS4ERR_SEQ_MISORDERED)
        }
    }

    /// Serves one CB_COMPOUND (`args`: the RPC call's arguments): returns the encoded
    /// CB_COMPOUND4res and what happened. `recall` runs for each CB_RECALL and returns its
    /// status. An `Err` means the arguments did not decode (GARBAGE_ARGS).
    pub fn serve(
        &mut self,
        args: &[u8],
        recall: &mut dyn FnMut(&CbRecall) -> u32,
    ) -> Result<(Vec<u8>, CbServed), Nfs4Error> {
        let c = decode_cb_compound(args)?;
        let mut served = CbServed {
            status: NFS4_OK,
            ops: c.ops.iter().map(CbOp::number).collect(),
            sequence: None,
            sequence_status: None,
            recalls: Vec::new(),
            replay: false,
        };
        // (operation, status, CB_SEQUENCE result body)
        let mut results: Vec<(u32, u32, Option<CbSequence>)> = Vec::new();
        let mut accepted_slot = None;
        if c.minor != 1 {
            served.status = NFS4ERR_MINOR_VERS_MISMATCH;
        } else {
            for (i, o) in c.ops.iter().enumerate() {
                let (opnum, status, body) = match o {
                    CbOp::Sequence(s) if i == 0 => {
                        served.sequence = Some(*s);
                        match self.check(s) {
                            Ok(true) => {
                                served.replay = true;
                                served.sequence_status = Some(NFS4_OK);
                                if let Some(r) = &self.slots[s.slot as usize].cached {
                                    return Ok((r.clone(), served));
                                }
                                (op::SEQUENCE, NFS4ERR_RETRY_UNCACHED_REP, None)
                            }
                            Ok(false) => {
                                accepted_slot = Some((s.slot, s.sequence));
                                (op::SEQUENCE, NFS4_OK, Some(*s))
                            }
                            Err(e) => (op::SEQUENCE, e, None),
                        }
                    }
                    CbOp::Sequence(_) => (op::SEQUENCE, NFS4ERR_SEQUENCE_POS, None),
                    _ if i == 0 => (o.number(), NFS4ERR_OP_NOT_IN_SESSION, None),
                    CbOp::Recall(rc) => {
                        let st = recall(rc);
                        served.recalls.push((rc.clone(), st));
                        (op::RECALL, st, None)
                    }
                    CbOp::Unknown(n) if (op::GETATTR..=op::OFFLOAD).contains(n) => {
                        (*n, NFS4ERR_NOTSUPP, None)
                    }
                    CbOp::Unknown(_) => (op::ILLEGAL, NFS4ERR_OP_ILLEGAL, None),
                };
                if opnum == op::SEQUENCE && i == 0 {
                    served.sequence_status = Some(status);
                }
                results.push((opnum, status, body));
                served.status = status;
                if status != NFS4_OK {
                    break;
                }
            }
        }
        let highest = self.slots.len() as u32 - 1;
        let mut b = Vec::with_capacity(64 + 32 * results.len());
        put_u32(&mut b, served.status);
        put_opaque(&mut b, &c.tag);
        put_u32(&mut b, results.len() as u32);
        for (opnum, status, body) in &results {
            put_u32(&mut b, *opnum);
            put_u32(&mut b, *status);
            if let Some(s) = body {
                b.extend_from_slice(&s.session);
                put_u32(&mut b, s.sequence);
                put_u32(&mut b, s.slot);
                put_u32(&mut b, highest); // csr_highest_slotid
                put_u32(&mut b, highest); // csr_target_highest_slotid
            }
        }
        if let Some((slot, seq)) = accepted_slot {
            let s = &mut self.slots[slot as usize];
            s.seq = seq;
            s.cached = Some(b.clone());
        }
        Ok((b, served))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: SessionId = [7; 16];

    fn seq(sequence: u32, slot: u32) -> CbOp {
        CbOp::Sequence(CbSequence {
            session: SESSION,
            sequence,
            slot,
            highest_slot: 0,
            cache_this: false,
            referring_lists: 0,
        })
    }

    fn recall(k: u8) -> CbOp {
        CbOp::Recall(CbRecall {
            stateid: [k; 16],
            truncate: false,
            fh: vec![k; 5],
        })
    }

    /// One result: operation, status, CB_SEQUENCE body words.
    type Res = (u32, u32, Vec<u32>);

    /// (status, tag, results)
    fn decode_res(b: &[u8]) -> (u32, Vec<u8>, Vec<Res>) {
        let mut r = XdrReader::new(b);
        let status = r.get_u32().unwrap();
        let tag = r.get_opaque(1024).unwrap().to_vec();
        let n = r.get_u32().unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            let o = r.get_u32().unwrap();
            let st = r.get_u32().unwrap();
            let mut body = Vec::new();
            if o == op::SEQUENCE && st == NFS4_OK {
                assert_eq!(r.get_fixed_opaque(16).unwrap(), &SESSION);
                for _ in 0..4 {
                    body.push(r.get_u32().unwrap());
                }
            }
            out.push((o, st, body));
        }
        assert!(r.rest().is_empty(), "octets after the results");
        (status, tag, out)
    }

    #[test]
    fn accepts_cb_sequence_and_recall_in_order() {
        let mut srv = CbServer::new(SESSION, 2);
        let mut seen = Vec::new();
        let args = encode_cb_compound(b"t", 1, 0, &[seq(1, 0), recall(3)]);
        let (res, served) = srv
            .serve(&args, &mut |r| {
                seen.push(r.stateid);
                NFS4_OK
            })
            .unwrap();
        assert_eq!(seen, vec![[3u8; 16]]);
        assert_eq!(served.ops, vec![op::SEQUENCE, op::RECALL]);
        assert_eq!(served.sequence_status, Some(NFS4_OK));
        assert!(!served.replay);
        let (status, tag, ops) = decode_res(&res);
        assert_eq!((status, tag), (NFS4_OK, b"t".to_vec()));
        // sequence 1, slot 0, highest and target slot 1 (two slots).
        assert_eq!(ops[0], (op::SEQUENCE, NFS4_OK, vec![1, 0, 1, 1]));
        assert_eq!(ops[1], (op::RECALL, NFS4_OK, vec![]));
        assert_eq!(srv.slot_sequence(0), Some(1));
        // The next call on slot 1 starts at 1 too; slot 0 goes on at 2.
        let args = encode_cb_compound(b"", 1, 0, &[seq(1, 1), recall(4)]);
        assert_eq!(
            srv.serve(&args, &mut |_| NFS4_OK).unwrap().1.status,
            NFS4_OK
        );
        let args = encode_cb_compound(b"", 1, 0, &[seq(2, 0)]);
        assert_eq!(
            srv.serve(&args, &mut |_| NFS4_OK).unwrap().1.status,
            NFS4_OK
        );
    }

    #[test]
    fn accepts_retransmission_with_the_cached_reply() {
        let mut srv = CbServer::new(SESSION, 1);
        let args = encode_cb_compound(b"x", 1, 0, &[seq(1, 0), recall(1)]);
        let mut runs = 0;
        let (first, _) = srv
            .serve(&args, &mut |_| {
                runs += 1;
                NFS4_OK
            })
            .unwrap();
        let (again, served) = srv
            .serve(&args, &mut |_| {
                runs += 1;
                NFS4_OK
            })
            .unwrap();
        assert_eq!(runs, 1, "a retransmission runs nothing");
        assert!(served.replay);
        assert_eq!(first, again);
    }

    #[test]
    fn rejects_bad_cb_sequence_without_touching_the_slot() {
        let mut srv = CbServer::new(SESSION, 1);
        let cases: [(CbOp, u32); 4] = [
            (seq(2, 0), NFS4ERR_SEQ_MISORDERED),
            (seq(0, 0), NFS4ERR_SEQ_MISORDERED),
            (seq(1, 1), NFS4ERR_BADSLOT),
            (
                CbOp::Sequence(CbSequence {
                    session: [8; 16],
                    sequence: 1,
                    slot: 0,
                    highest_slot: 0,
                    cache_this: false,
                    referring_lists: 0,
                }),
                NFS4ERR_BADSESSION,
            ),
        ];
        for (s, want) in cases {
            let args = encode_cb_compound(b"", 1, 0, &[s.clone(), recall(1)]);
            let mut ran = false;
            let (res, served) = srv
                .serve(&args, &mut |_| {
                    ran = true;
                    NFS4_OK
                })
                .unwrap();
            assert!(!ran, "{s:?}: nothing runs after a failed CB_SEQUENCE");
            assert_eq!(served.status, want, "{s:?}");
            let (_, _, ops) = decode_res(&res);
            assert_eq!(ops, vec![(op::SEQUENCE, want, vec![])]);
            assert_eq!(srv.slot_sequence(0), Some(0));
        }
        // Without CB_SEQUENCE first, or with it second.
        let args = encode_cb_compound(b"", 1, 0, &[recall(1)]);
        let r = srv.serve(&args, &mut |_| NFS4_OK).unwrap().1;
        assert_eq!(r.status, NFS4ERR_OP_NOT_IN_SESSION);
        assert!(r.recalls.is_empty());
        let args = encode_cb_compound(b"", 1, 0, &[seq(1, 0), seq(2, 0)]);
        let r = srv.serve(&args, &mut |_| NFS4_OK).unwrap().1;
        assert_eq!(r.status, NFS4ERR_SEQUENCE_POS);
        // Minor version 0 in a session's backchannel: no results at all.
        let args = encode_cb_compound(b"", 0, 0, &[seq(2, 0)]);
        let (res, r) = srv.serve(&args, &mut |_| NFS4_OK).unwrap();
        assert_eq!(r.status, NFS4ERR_MINOR_VERS_MISMATCH);
        assert!(decode_res(&res).2.is_empty());
    }

    #[test]
    fn rejects_unknown_operations_after_cb_sequence() {
        let mut srv = CbServer::new(SESSION, 1);
        let args = encode_cb_compound(b"", 1, 0, &[seq(1, 0), CbOp::Unknown(8), recall(1)]);
        let (res, r) = srv.serve(&args, &mut |_| NFS4_OK).unwrap();
        assert_eq!(r.status, NFS4ERR_NOTSUPP);
        assert_eq!(decode_res(&res).2[1], (8, NFS4ERR_NOTSUPP, vec![]));
        let args = encode_cb_compound(b"", 1, 0, &[seq(2, 0), CbOp::Unknown(99)]);
        let (res, r) = srv.serve(&args, &mut |_| NFS4_OK).unwrap();
        assert_eq!(r.status, NFS4ERR_OP_ILLEGAL);
        assert_eq!(
            decode_res(&res).2[1],
            (op::ILLEGAL, NFS4ERR_OP_ILLEGAL, vec![])
        );
    }

    #[test]
    fn rejects_truncated_arguments_without_panicking() {
        let args = encode_cb_compound(b"tag", 1, 0, &[seq(1, 0), recall(9)]);
        let mut srv = CbServer::new(SESSION, 1);
        for cut in 0..args.len() {
            assert!(
                srv.serve(&args[..cut], &mut |_| NFS4_OK).is_err(),
                "cut {cut}"
            );
        }
        let mut long = args.clone();
        long.extend_from_slice(&[0; 4]);
        assert!(decode_cb_compound(&long).is_err());
        assert!(decode_cb_compound(&args).is_ok());
    }
}
