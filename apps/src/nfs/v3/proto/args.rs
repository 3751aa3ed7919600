//! NFSv3 call arguments (RFC 1813 `*3args`): [`decode_args`] for the server, [`encode_args`]
//! and [`encode_write_head`] for our client.
//!
//! Normal operation: one decoded [`Args3`] per call, borrowing names and WRITE data from the
//! call's argument octets. Recovery: malformed arguments are a [`DecodeError`] (the server
//! answers GARBAGE_ARGS); octets after the arguments are ignored, as Linux nfsd ignores them.
//! The encoder writes whatever it is given (no name checks), so tests can build bad calls.

use super::{
    get_fh3, get_filename3, get_ftype3, get_nfspath3, get_sattr3, get_stable_how, get_time3,
    get_verf, proc3, put_fh3, put_sattr3, put_time3, DecodeError,
};
use crate::nfs::types::{CreateHow, Fh, Ftype3, Sattr3, StableHow, Time3};
use rpcrdma_engine::xdr::{pad4, XdrError, XdrReader, XdrWriter};

/// Decoded arguments of one NFSv3 call.
///
/// MKNOD: `ftype` outside 1..=7 does not decode (GARBAGE_ARGS, as Linux nfsd). REG, DIR and
/// LNK decode (valid XDR, nothing follows; `attr` and `rdev` are then default) and the handler
/// answers NFS3ERR_BADTYPE. `attr` is on the wire for CHR, BLK, SOCK and FIFO, `rdev` for CHR
/// and BLK only (RFC 1813 3.3.11 `mknoddata3`); the others read as default / `(0, 0)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Args3<'a> {
    Null,
    Getattr {
        fh: Fh,
    },
    Setattr {
        fh: Fh,
        attr: Sattr3,
        guard: Option<Time3>,
    },
    Lookup {
        dir: Fh,
        name: &'a [u8],
    },
    Access {
        fh: Fh,
        access: u32,
    },
    Readlink {
        fh: Fh,
    },
    Read {
        fh: Fh,
        offset: u64,
        count: u32,
    },
    /// `count` equals `data.len()` in every decoded WRITE.
    Write {
        fh: Fh,
        offset: u64,
        count: u32,
        stable: StableHow,
        data: &'a [u8],
    },
    Create {
        dir: Fh,
        name: &'a [u8],
        how: CreateHow,
    },
    Mkdir {
        dir: Fh,
        name: &'a [u8],
        attr: Sattr3,
    },
    Symlink {
        dir: Fh,
        name: &'a [u8],
        attr: Sattr3,
        target: &'a [u8],
    },
    Mknod {
        dir: Fh,
        name: &'a [u8],
        ftype: Ftype3,
        attr: Sattr3,
        rdev: (u32, u32),
    },
    Remove {
        dir: Fh,
        name: &'a [u8],
    },
    Rmdir {
        dir: Fh,
        name: &'a [u8],
    },
    Rename {
        from_dir: Fh,
        from_name: &'a [u8],
        to_dir: Fh,
        to_name: &'a [u8],
    },
    Link {
        fh: Fh,
        dir: Fh,
        name: &'a [u8],
    },
    Readdir {
        dir: Fh,
        cookie: u64,
        verf: [u8; 8],
        count: u32,
    },
    Readdirplus {
        dir: Fh,
        cookie: u64,
        verf: [u8; 8],
        dircount: u32,
        maxcount: u32,
    },
    Fsstat {
        fh: Fh,
    },
    Fsinfo {
        fh: Fh,
    },
    Pathconf {
        fh: Fh,
    },
    Commit {
        fh: Fh,
        offset: u64,
        count: u32,
    },
}

impl Args3<'_> {
    /// The procedure number these arguments belong to.
    pub fn proc_num(&self) -> u32 {
        match self {
            Args3::Null => proc3::NULL,
            Args3::Getattr { .. } => proc3::GETATTR,
            Args3::Setattr { .. } => proc3::SETATTR,
            Args3::Lookup { .. } => proc3::LOOKUP,
            Args3::Access { .. } => proc3::ACCESS,
            Args3::Readlink { .. } => proc3::READLINK,
            Args3::Read { .. } => proc3::READ,
            Args3::Write { .. } => proc3::WRITE,
            Args3::Create { .. } => proc3::CREATE,
            Args3::Mkdir { .. } => proc3::MKDIR,
            Args3::Symlink { .. } => proc3::SYMLINK,
            Args3::Mknod { .. } => proc3::MKNOD,
            Args3::Remove { .. } => proc3::REMOVE,
            Args3::Rmdir { .. } => proc3::RMDIR,
            Args3::Rename { .. } => proc3::RENAME,
            Args3::Link { .. } => proc3::LINK,
            Args3::Readdir { .. } => proc3::READDIR,
            Args3::Readdirplus { .. } => proc3::READDIRPLUS,
            Args3::Fsstat { .. } => proc3::FSSTAT,
            Args3::Fsinfo { .. } => proc3::FSINFO,
            Args3::Pathconf { .. } => proc3::PATHCONF,
            Args3::Commit { .. } => proc3::COMMIT,
        }
    }
}

/// Decodes the arguments of procedure `proc_num` (the octets after the RPC call header).
/// NULL ignores its arguments; an unknown procedure is [`DecodeError::UnknownProc`].
pub fn decode_args(proc_num: u32, args: &[u8]) -> Result<Args3<'_>, DecodeError> {
    let r = &mut XdrReader::new(args);
    Ok(match proc_num {
        proc3::NULL => Args3::Null,
        proc3::GETATTR => Args3::Getattr { fh: get_fh3(r)? },
        proc3::SETATTR => Args3::Setattr {
            fh: get_fh3(r)?,
            attr: get_sattr3(r)?,
            guard: if r.get_bool()? {
                Some(get_time3(r)?)
            } else {
                None
            },
        },
        proc3::LOOKUP => Args3::Lookup {
            dir: get_fh3(r)?,
            name: get_filename3(r)?,
        },
        proc3::ACCESS => Args3::Access {
            fh: get_fh3(r)?,
            access: r.get_u32()?,
        },
        proc3::READLINK => Args3::Readlink { fh: get_fh3(r)? },
        proc3::READ => Args3::Read {
            fh: get_fh3(r)?,
            offset: r.get_u64()?,
            count: r.get_u32()?,
        },
        proc3::WRITE => decode_write(r)?,
        proc3::CREATE => Args3::Create {
            dir: get_fh3(r)?,
            name: get_filename3(r)?,
            how: get_createhow3(r)?,
        },
        proc3::MKDIR => Args3::Mkdir {
            dir: get_fh3(r)?,
            name: get_filename3(r)?,
            attr: get_sattr3(r)?,
        },
        proc3::SYMLINK => Args3::Symlink {
            dir: get_fh3(r)?,
            name: get_filename3(r)?,
            attr: get_sattr3(r)?,
            target: get_nfspath3(r)?,
        },
        proc3::MKNOD => decode_mknod(r)?,
        p => decode_args_rest(p, r)?,
    })
}

/// Procedures REMOVE (12) and up.
fn decode_args_rest<'a>(p: u32, r: &mut XdrReader<'a>) -> Result<Args3<'a>, DecodeError> {
    Ok(match p {
        proc3::REMOVE => Args3::Remove {
            dir: get_fh3(r)?,
            name: get_filename3(r)?,
        },
        proc3::RMDIR => Args3::Rmdir {
            dir: get_fh3(r)?,
            name: get_filename3(r)?,
        },
        proc3::RENAME => Args3::Rename {
            from_dir: get_fh3(r)?,
            from_name: get_filename3(r)?,
            to_dir: get_fh3(r)?,
            to_name: get_filename3(r)?,
        },
        proc3::LINK => Args3::Link {
            fh: get_fh3(r)?,
            dir: get_fh3(r)?,
            name: get_filename3(r)?,
        },
        proc3::READDIR => Args3::Readdir {
            dir: get_fh3(r)?,
            cookie: r.get_u64()?,
            verf: get_verf(r)?,
            count: r.get_u32()?,
        },
        proc3::READDIRPLUS => Args3::Readdirplus {
            dir: get_fh3(r)?,
            cookie: r.get_u64()?,
            verf: get_verf(r)?,
            dircount: r.get_u32()?,
            maxcount: r.get_u32()?,
        },
        proc3::FSSTAT => Args3::Fsstat { fh: get_fh3(r)? },
        proc3::FSINFO => Args3::Fsinfo { fh: get_fh3(r)? },
        proc3::PATHCONF => Args3::Pathconf { fh: get_fh3(r)? },
        proc3::COMMIT => Args3::Commit {
            fh: get_fh3(r)?,
            offset: r.get_u64()?,
            count: r.get_u32()?,
        },
        p => return Err(DecodeError::UnknownProc(p)),
    })
}

/// WRITE3args: `count` must equal the data's length (Linux nfsd: GARBAGE_ARGS otherwise).
fn decode_write<'a>(r: &mut XdrReader<'a>) -> Result<Args3<'a>, DecodeError> {
    let fh = get_fh3(r)?;
    let offset = r.get_u64()?;
    let count = r.get_u32()?;
    let stable = get_stable_how(r)?;
    // The data may end the stream without its XDR pad: a WRITE whose data came in a Read
    // chunk is reassembled without one (RFC 8166 section 3.4.6, XDR roundup), so the pad is
    // skipped only when present.
    let len = r.get_u32()?;
    let data = r.take(len as usize)?;
    r.skip(pad4(data.len()).min(r.remaining()))?;
    if data.len() != count as usize {
        return Err(DecodeError::BadValue {
            what: "WRITE3args count",
            value: count,
        });
    }
    Ok(Args3::Write {
        fh,
        offset,
        count,
        stable,
        data,
    })
}

fn get_createhow3(r: &mut XdrReader<'_>) -> Result<CreateHow, DecodeError> {
    match r.get_u32()? {
        0 => Ok(CreateHow::Unchecked(get_sattr3(r)?)),
        1 => Ok(CreateHow::Guarded(get_sattr3(r)?)),
        2 => Ok(CreateHow::Exclusive(get_verf(r)?)),
        v => Err(DecodeError::BadValue {
            what: "createmode3",
            value: v,
        }),
    }
}

/// MKNOD3args (`mknoddata3` switches on the type: RFC 1813 3.3.11).
fn decode_mknod<'a>(r: &mut XdrReader<'a>) -> Result<Args3<'a>, DecodeError> {
    let dir = get_fh3(r)?;
    let name = get_filename3(r)?;
    let ftype = get_ftype3(r)?;
    let (attr, rdev) = match ftype {
        Ftype3::Chr | Ftype3::Blk => (get_sattr3(r)?, (r.get_u32()?, r.get_u32()?)),
        Ftype3::Sock | Ftype3::Fifo => (get_sattr3(r)?, (0, 0)),
        Ftype3::Reg | Ftype3::Dir | Ftype3::Lnk => (Sattr3::default(), (0, 0)),
    };
    Ok(Args3::Mknod {
        dir,
        name,
        ftype,
        attr,
        rdev,
    })
}

fn put_diropargs(w: &mut XdrWriter<'_>, dir: &Fh, name: &[u8]) -> Result<(), XdrError> {
    put_fh3(w, dir)?;
    w.put_opaque(name)
}

/// Encodes `a` as its procedure's `*3args` (client side). Names are written as given.
pub fn encode_args(w: &mut XdrWriter<'_>, a: &Args3<'_>) -> Result<(), XdrError> {
    match a {
        Args3::Null => Ok(()),
        Args3::Getattr { fh }
        | Args3::Readlink { fh }
        | Args3::Fsstat { fh }
        | Args3::Fsinfo { fh }
        | Args3::Pathconf { fh } => put_fh3(w, fh),
        Args3::Setattr { fh, attr, guard } => {
            put_fh3(w, fh)?;
            put_sattr3(w, attr)?;
            w.put_bool(guard.is_some())?;
            guard.as_ref().map_or(Ok(()), |t| put_time3(w, t))
        }
        Args3::Lookup { dir, name } | Args3::Remove { dir, name } | Args3::Rmdir { dir, name } => {
            put_diropargs(w, dir, name)
        }
        Args3::Access { fh, access } => {
            put_fh3(w, fh)?;
            w.put_u32(*access)
        }
        Args3::Read { fh, offset, count } | Args3::Commit { fh, offset, count } => {
            put_fh3(w, fh)?;
            w.put_u64(*offset)?;
            w.put_u32(*count)
        }
        Args3::Write {
            fh,
            offset,
            count,
            stable,
            data,
        } => {
            put_fh3(w, fh)?;
            w.put_u64(*offset)?;
            w.put_u32(*count)?;
            w.put_u32(*stable as u32)?;
            w.put_opaque(data)
        }
        _ => encode_args_dir(w, a),
    }
}

/// The directory-changing and directory-reading procedures.
fn encode_args_dir(w: &mut XdrWriter<'_>, a: &Args3<'_>) -> Result<(), XdrError> {
    match a {
        Args3::Create { dir, name, how } => {
            put_diropargs(w, dir, name)?;
            match how {
                CreateHow::Unchecked(s) => {
                    w.put_u32(0)?;
                    put_sattr3(w, s)
                }
                CreateHow::Guarded(s) => {
                    w.put_u32(1)?;
                    put_sattr3(w, s)
                }
                // NFSv3 has no EXCLUSIVE4_1: its verifier alone.
                CreateHow::Exclusive(v) | CreateHow::Exclusive41(v, _) => {
                    w.put_u32(2)?;
                    w.put_fixed_opaque(v)
                }
            }
        }
        Args3::Mkdir { dir, name, attr } => {
            put_diropargs(w, dir, name)?;
            put_sattr3(w, attr)
        }
        Args3::Symlink {
            dir,
            name,
            attr,
            target,
        } => {
            put_diropargs(w, dir, name)?;
            put_sattr3(w, attr)?;
            w.put_opaque(target)
        }
        Args3::Mknod {
            dir,
            name,
            ftype,
            attr,
            rdev,
        } => {
            put_diropargs(w, dir, name)?;
            w.put_u32(*ftype as u32)?;
            match ftype {
                Ftype3::Chr | Ftype3::Blk => {
                    put_sattr3(w, attr)?;
                    w.put_u32(rdev.0)?;
                    w.put_u32(rdev.1)
                }
                Ftype3::Sock | Ftype3::Fifo => put_sattr3(w, attr),
                Ftype3::Reg | Ftype3::Dir | Ftype3::Lnk => Ok(()),
            }
        }
        Args3::Rename {
            from_dir,
            from_name,
            to_dir,
            to_name,
        } => {
            put_diropargs(w, from_dir, from_name)?;
            put_diropargs(w, to_dir, to_name)
        }
        Args3::Link { fh, dir, name } => {
            put_fh3(w, fh)?;
            put_diropargs(w, dir, name)
        }
        _ => encode_args_readdir(w, a),
    }
}

fn encode_args_readdir(w: &mut XdrWriter<'_>, a: &Args3<'_>) -> Result<(), XdrError> {
    match a {
        Args3::Readdir {
            dir,
            cookie,
            verf,
            count,
        } => {
            put_fh3(w, dir)?;
            w.put_u64(*cookie)?;
            w.put_fixed_opaque(verf)?;
            w.put_u32(*count)
        }
        Args3::Readdirplus {
            dir,
            cookie,
            verf,
            dircount,
            maxcount,
        } => {
            put_fh3(w, dir)?;
            w.put_u64(*cookie)?;
            w.put_fixed_opaque(verf)?;
            w.put_u32(*dircount)?;
            w.put_u32(*maxcount)
        }
        // Every other variant is encoded by `encode_args` / `encode_args_dir`.
        _ => Ok(()),
    }
}

/// Client side, DDP WRITE: WRITE3args up to and including the data's length word; the data
/// then follows as a DDP item (Read chunk), with no pad.
pub fn encode_write_head(
    w: &mut XdrWriter<'_>,
    fh: &Fh,
    offset: u64,
    count: u32,
    stable: StableHow,
    data_len: u32,
) -> Result<(), XdrError> {
    put_fh3(w, fh)?;
    w.put_u64(offset)?;
    w.put_u32(count)?;
    w.put_u32(stable as u32)?;
    w.put_u32(data_len)
}
