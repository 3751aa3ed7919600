//! Directory listings on the wire: [`DirWriter`] streams READDIR3resok / READDIRPLUS3resok
//! entries as the store produces them, within the client's size limits;
//! [`decode_readdir_res`] reads a listing back (client side).
//!
//! Normal operation: the handler begins the reply, the store calls back once per entry and
//! [`DirWriter::push`] either appends the whole entry or, when it would pass a limit, writes
//! nothing and returns `false` (the store stops; the next call resumes at that entry's
//! predecessor's cookie). Recovery: limits smaller than the empty reply are an error from
//! [`DirWriter::begin`] (the handler answers TOOSMALL); the writer never writes past its
//! buffer or the client's limit. The decoder's entry count is bounded by the input length.

use super::{
    get_post_op_attr, get_post_op_fh3, get_verf, put_fh3, put_post_op_attr, DecodeError,
    NAME_WIRE_MAX,
};
use crate::nfs::types::{DirEntry, Fattr3, Fh, Nfsstat3};
use rpcrdma_engine::xdr::{roundup4, XdrError, XdrReader, XdrWriter};

/// Octets of a `post_op_attr` holding attributes (discriminant + `fattr3`).
const POST_OP_ATTR_SOME: usize = 4 + 84;
/// The list's end: `value_follows = FALSE` and `eof`.
const TAIL: usize = 8;

/// Streams a READDIR3resok or READDIRPLUS3resok into an [`XdrWriter`].
#[derive(Debug)]
pub struct DirWriter<'w, 'b> {
    w: &'w mut XdrWriter<'b>,
    plus: bool,
    start: usize,
    limit: usize,
    dircount: usize,
    dir_used: usize,
    n: usize,
}

impl<'w, 'b> DirWriter<'w, 'b> {
    /// Starts READDIR3resok (`plus = false`) or READDIRPLUS3resok (`plus = true`): status OK,
    /// directory attributes, cookie verifier.
    ///
    /// Limits count every octet from the status word to the final `eof` word, and are clamped
    /// to the writer's free space. READDIR has one limit, `count`: pass it as both `dircount`
    /// and `maxcount` (the larger of the two is used). READDIRPLUS: the whole within
    /// `maxcount`, and each entry's fileid, name and cookie octets (RFC 1813 3.3.17) summed
    /// within `dircount`. Errors with [`XdrError::NoSpace`] (writing nothing) when even the
    /// empty listing would not fit.
    pub fn begin(
        w: &'w mut XdrWriter<'b>,
        plus: bool,
        dir_attr: Option<&Fattr3>,
        verf: [u8; 8],
        dircount: u32,
        maxcount: u32,
    ) -> Result<Self, XdrError> {
        let limit = if plus {
            maxcount
        } else {
            dircount.max(maxcount)
        };
        let start = w.position();
        let limit = (limit as usize).min(w.remaining());
        let attr_len = if dir_attr.is_some() {
            POST_OP_ATTR_SOME
        } else {
            4
        };
        let empty = 4 + attr_len + 8 + TAIL;
        if empty > limit {
            return Err(XdrError::NoSpace {
                needed: start.saturating_add(empty),
                capacity: start + limit,
            });
        }
        w.put_u32(Nfsstat3::OK.0)?;
        put_post_op_attr(w, dir_attr)?;
        w.put_fixed_opaque(&verf)?;
        Ok(DirWriter {
            w,
            plus,
            start,
            limit,
            dircount: dircount as usize,
            dir_used: 0,
            n: 0,
        })
    }

    /// Octets `e` takes on the wire (with its `value_follows` word), and its dircount share.
    fn sizes(&self, e: &DirEntry<'_>) -> (usize, usize) {
        let dir_part = 8 + 4 + roundup4(e.name.len()) + 8;
        let mut total = 4 + dir_part;
        if self.plus {
            total += match &e.plus {
                Some((fh, _)) => POST_OP_ATTR_SOME + 4 + 4 + roundup4(fh.as_bytes().len()),
                None => 4 + 4,
            };
        }
        (total, dir_part)
    }

    /// Appends one entry when it fits every limit (the whole reply including the final two
    /// words within the limit; READDIRPLUS also the dircount share); returns `false` and
    /// writes nothing otherwise. A plus entry with `plus: None` goes out with `post_op_attr`
    /// and `post_op_fh3` FALSE; on READDIR, `plus` is ignored.
    pub fn push(&mut self, e: &DirEntry<'_>) -> bool {
        let (total, dir_part) = self.sizes(e);
        let used = self.w.position() - self.start;
        if used.saturating_add(total).saturating_add(TAIL) > self.limit {
            return false;
        }
        if self.plus && self.dir_used.saturating_add(dir_part) > self.dircount {
            return false;
        }
        if self.write_entry(e).is_err() {
            // Unreachable: the limit is within the writer's free space.
            return false;
        }
        self.dir_used += dir_part;
        self.n += 1;
        true
    }

    fn write_entry(&mut self, e: &DirEntry<'_>) -> Result<(), XdrError> {
        let w = &mut *self.w;
        w.put_bool(true)?;
        w.put_u64(e.fileid)?;
        w.put_opaque(e.name)?;
        w.put_u64(e.cookie)?;
        if self.plus {
            match &e.plus {
                Some((fh, attr)) => {
                    put_post_op_attr(w, Some(attr))?;
                    w.put_bool(true)?;
                    put_fh3(w, fh)?;
                }
                None => {
                    w.put_bool(false)?;
                    w.put_bool(false)?;
                }
            }
        }
        Ok(())
    }

    /// Entries pushed so far.
    pub fn entries(&self) -> usize {
        self.n
    }

    /// Ends the list (`value_follows` FALSE, `eof`). Always fits (reserved by `begin`).
    pub fn finish(self, eof: bool) -> Result<(), XdrError> {
        self.w.put_bool(false)?;
        self.w.put_bool(eof)
    }
}

/// One decoded directory entry (client side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedDirEntry {
    /// File id.
    pub fileid: u64,
    /// Name.
    pub name: Vec<u8>,
    /// Cookie resuming after this entry.
    pub cookie: u64,
    /// Attributes (READDIRPLUS, when sent).
    pub attr: Option<Fattr3>,
    /// Handle (READDIRPLUS, when sent).
    pub fh: Option<Fh>,
}

/// A decoded READDIR3res / READDIRPLUS3res (client side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirRes {
    /// Status; on failure only `dir_attr` is meaningful.
    pub status: Nfsstat3,
    /// Directory attributes.
    pub dir_attr: Option<Fattr3>,
    /// Cookie verifier (zero on failure).
    pub verf: [u8; 8],
    /// Entries in order.
    pub entries: Vec<OwnedDirEntry>,
    /// True when the listing reached the end.
    pub eof: bool,
}

/// Decodes READDIR3res (`plus = false`) or READDIRPLUS3res (`plus = true`). The entry count
/// is bounded by the input (each entry takes at least 24 octets); names are bounded by
/// [`NAME_WIRE_MAX`] but not otherwise checked.
pub fn decode_readdir_res(res: &[u8], plus: bool) -> Result<ReaddirRes, DecodeError> {
    let r = &mut XdrReader::new(res);
    let status = Nfsstat3(r.get_u32()?);
    let dir_attr = get_post_op_attr(r)?;
    let mut out = ReaddirRes {
        status,
        dir_attr,
        verf: [0; 8],
        entries: Vec::new(),
        eof: false,
    };
    if status != Nfsstat3::OK {
        return Ok(out);
    }
    out.verf = get_verf(r)?;
    while r.get_optional()? {
        let fileid = r.get_u64()?;
        let name = r.get_opaque(NAME_WIRE_MAX)?.to_vec();
        let cookie = r.get_u64()?;
        let (attr, fh) = if plus {
            (get_post_op_attr(r)?, get_post_op_fh3(r)?)
        } else {
            (None, None)
        };
        out.entries.push(OwnedDirEntry {
            fileid,
            name,
            cookie,
            attr,
            fh,
        });
    }
    out.eof = r.get_bool()?;
    Ok(out)
}
