#!/usr/bin/env python3
"""Writes the checked-in seed corpora of every fuzz target (fuzz/seeds/<target>/<name>).

Each seed is built here from the wire layouts the specs give (RFC 8166 XDR for Version One,
the Version Two draft -02 XDR, RFC 5531 for ONC RPC, RFC 8797 for the private data, RFC 1813
for NFSv3 arguments, RFC 8881 for NFSv4.1 operations, RFC 5044 / RFC 6581 / RFC 5041 / RFC 5040 for the iWARP wire layer), one
comment per field, so a reader can check a seed against the RFC without the engine. `scripts/fuzz.sh` copies them into fuzz/corpus/<target>/ before a run.
Rerun after changing a layout: `python3 fuzz/seeds/make.py` (deterministic output).
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def w(*words):
    """Big-endian 32-bit XDR words."""
    return b"".join(struct.pack(">I", x & 0xFFFFFFFF) for x in words)


def hyper(x):
    return struct.pack(">Q", x)


def opaque(b):
    """XDR variable-length opaque: length, bytes, pad to 4 (pad octets zero)."""
    return w(len(b)) + b + b"\0" * (-len(b) % 4)


# --- ONC RPC (RFC 5531) ------------------------------------------------------------------
CALL, REPLY = 0, 1
AUTH_NONE, AUTH_SYS = 0, 1


def auth_sys_body(uid=0, gid=0, gids=(), machine=b"client"):
    return w(0x5EED) + opaque(machine) + w(uid, gid, len(gids), *gids)


def rpc_call(xid, prog=100003, vers=3, proc=0, args=b"", cred=None):
    cred = cred if cred is not None else w(AUTH_NONE, 0)
    return w(xid, CALL, 2, prog, vers, proc) + cred + w(AUTH_NONE, 0) + args


def rpc_reply_ok(xid, results=b""):
    # MSG_ACCEPTED, verifier AUTH_NONE, SUCCESS.
    return w(xid, REPLY, 0, AUTH_NONE, 0, 0) + results


def rpc_reply_denied_mismatch(xid):
    return w(xid, REPLY, 1, 0, 2, 2)  # MSG_DENIED, RPC_MISMATCH, low 2, high 2


def rpc_reply_auth_error(xid):
    return w(xid, REPLY, 1, 1, 1)  # MSG_DENIED, AUTH_ERROR, AUTH_BADCRED


def rpc_reply_prog_mismatch(xid):
    return w(xid, REPLY, 0, AUTH_NONE, 0, 2, 3, 3)  # PROG_MISMATCH 3..3


# --- RPC-over-RDMA Version One (RFC 8166) ------------------------------------------------
RDMA_MSG, RDMA_NOMSG, RDMA_MSGP, RDMA_DONE, RDMA_ERROR = 0, 1, 2, 3, 4


def seg(handle, length, offset):
    """xdr_rdma_segment: handle, length, 64-bit offset."""
    return w(handle, length) + hyper(offset)


def read_list(*items):
    """Read list: for each (position, segment) a 1, position, segment; then 0."""
    return b"".join(w(1, pos) + s for pos, s in items) + w(0)


def write_chunk(*segs):
    return w(len(segs)) + b"".join(segs)


def write_list(*chunks):
    return b"".join(w(1) + c for c in chunks) + w(0)


def reply_chunk(chunk=None):
    return w(0) if chunk is None else w(1) + chunk


def v1(xid, proc, body, credits=32):
    return w(xid, 1, credits, proc) + body


def no_lists():
    return read_list() + write_list() + reply_chunk()


V1 = {
    "msg_inline_call": v1(1, RDMA_MSG, no_lists() + rpc_call(1)),
    "msg_inline_reply": v1(2, RDMA_MSG, no_lists() + rpc_reply_ok(2, w(0))),
    "msg_read_chunk": v1(
        3, RDMA_MSG,
        read_list((100, seg(0x1234_5601, 8192, 0x7F00_0000_1000)))
        + write_list() + reply_chunk() + rpc_call(3, proc=7, args=b"\0" * 60),
    ),
    "msg_two_read_segments": v1(
        4, RDMA_MSG,
        read_list((64, seg(0x11, 4096, 0x1000)), (64, seg(0x11, 4096, 0x2000)))
        + write_list() + reply_chunk() + rpc_call(4, proc=7, args=b"\0" * 24),
    ),
    "msg_write_list": v1(
        5, RDMA_MSG,
        read_list() + write_list(write_chunk(seg(0x22, 65536, 0x9000)))
        + reply_chunk() + rpc_call(5, proc=6, args=b"\0" * 40),
    ),
    "msg_write_list_two_chunks": v1(
        6, RDMA_MSG,
        read_list()
        + write_list(write_chunk(seg(0x22, 4096, 0x9000), seg(0x23, 4096, 0xA000)),
                     write_chunk(seg(0x24, 512, 0xB000)))
        + reply_chunk() + rpc_call(6, proc=6),
    ),
    "msg_reply_chunk": v1(
        7, RDMA_MSG,
        read_list() + write_list() + reply_chunk(write_chunk(seg(0x33, 8192, 0xC000)))
        + rpc_call(7, proc=16),
    ),
    "nomsg_position_zero": v1(
        8, RDMA_NOMSG,
        read_list((0, seg(0x44, 6000, 0xD000))) + write_list() + reply_chunk(),
    ),
    "nomsg_reply_in_reply_chunk": v1(
        9, RDMA_NOMSG,
        read_list() + write_list() + reply_chunk(write_chunk(seg(0x55, 2000, 0xE000))),
    ),
    "msgp": v1(10, RDMA_MSGP, w(8, 64) + no_lists() + rpc_call(10)),
    "done": v1(11, RDMA_DONE, b""),
    "error_vers": v1(12, RDMA_ERROR, w(1, 1, 1)),  # ERR_VERS, low 1, high 1
    "error_chunk": v1(13, RDMA_ERROR, w(2)),  # ERR_CHUNK
    "bad_version": w(14, 7, 32, RDMA_MSG) + no_lists() + rpc_call(14),
    "short_header": w(15, 1, 32),
}

# --- RPC-over-RDMA Version Two (draft -02) -------------------------------------------------
R2_MSG, R2_NOMSG, R2_ERROR, R2_OPTIONAL = 0, 1, 4, 5


def v2(xid, proc, body, credits=32):
    return w(xid, 2, credits, proc) + body


def v2_msg_body(direction, inv_handle=0, lists=None):
    return w(direction, inv_handle) + (lists if lists is not None else no_lists())


V2 = {
    "msg_call": v2(1, R2_MSG, v2_msg_body(CALL) + rpc_call(1)),
    "msg_reply": v2(2, R2_MSG, v2_msg_body(REPLY) + rpc_reply_ok(2, w(0))),
    "msg_call_chunks": v2(
        3, R2_MSG,
        v2_msg_body(CALL, 0x66,
                    read_list((92, seg(0x66, 4096, 0x1000)))
                    + write_list(write_chunk(seg(0x67, 4096, 0x2000)))
                    + reply_chunk(write_chunk(seg(0x68, 8192, 0x3000))))
        + rpc_call(3, proc=7, args=b"\0" * 52),
    ),
    "nomsg_call": v2(
        4, R2_NOMSG,
        v2_msg_body(CALL, 0, read_list((0, seg(0x69, 5000, 0x4000))) + write_list() + reply_chunk()),
    ),
    "nomsg_reply": v2(
        5, R2_NOMSG,
        v2_msg_body(REPLY, 0, read_list() + write_list() + reply_chunk(write_chunk(seg(0x6A, 3000, 0x5000)))),
    ),
    "error_vers": v2(6, R2_ERROR, w(1, 1, 2)),
    "error_bad_xdr": v2(7, R2_ERROR, w(2)),
    "error_inval_proc": v2(8, R2_ERROR, w(4)),
    "error_inval_option": v2(9, R2_ERROR, w(5)),
    "error_cant_reply": v2(10, R2_ERROR, w(3, 1, 1, 9000)),  # processed, index 1, 9000 needed
    "optional_call": v2(11, R2_OPTIONAL, w(CALL, 0x42) + opaque(b"opt-info")),
    "optional_reply": v2(12, R2_OPTIONAL, w(REPLY, 0x43) + opaque(b"")),
    "unknown_proc": v2(13, 7, w(0, 0, 0)),
}

# --- RFC 8797 private data -----------------------------------------------------------------
MAGIC = bytes([0xF6, 0xAB, 0x0E, 0x18])


def pd(version=1, flags=0, send=3, recv=3):
    """Format identifier, version, flags (bit 0: R, remote invalidation), sizes ((n+1)*1024)."""
    return MAGIC + bytes([version, flags, send, recv])


PRIVATE_DATA = {
    "v1_defaults": pd(),
    "remote_invalidate_4k": pd(flags=1),
    "max_sizes": pd(flags=1, send=255, recv=255),
    "min_sizes": pd(send=0, recv=0),
    "unknown_version": pd(version=2),
    "reserved_flags": pd(flags=0xFE),
    "behind_other_bytes": b"\x01\x02\x03\x04" + pd(flags=1, send=31, recv=31),
    "cut_short": MAGIC + bytes([1, 1]),
}

# --- iWARP wire layer (iwarp_wire target): first octet = mode (bit 0: MPA CRC on) ----------
def crc32c(data):
    """CRC32c (Castagnoli), bit by bit: reflected polynomial 0x82F63B78, init and xor-out ~0."""
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def mpa_rr(key, flags, rev, private_data):
    """RFC 5044 7.1: 16-octet key, flags octet (M 0x80, C 0x40, R 0x20; 0x10 enhanced), Rev,
    PD_Length, private data."""
    return key + bytes([flags, rev]) + struct.pack(">H", len(private_data)) + private_data


MPA_REQ, MPA_REP = b"MPA ID Req Frame", b"MPA ID Rep Frame"


def ird_ord(ird, ord_, a=0, b=0, c=0, d=0):
    """RFC 6581: |A|B| IRD (14) |C|D| ORD (14)|."""
    return struct.pack(">HH", (a << 15) | (b << 14) | ird, (c << 15) | (d << 14) | ord_)


def fpdu(ulpdu, crc=True):
    """RFC 5044 4.1: ULPDU_Length, ULPDU, zero pad to 4 octets, CRC32c (least significant
    octet first, RFC 3720 B.4 order; zero when CRCs are off)."""
    body = struct.pack(">H", len(ulpdu)) + ulpdu
    body += b"\0" * (-len(body) % 4)
    return body + (struct.pack("<I", crc32c(body)) if crc else b"\0" * 4)


def ddp_tagged(last, opcode, stag, to):
    """RFC 5041 4.2: T=1, L, DV=1; RDMAP control RV=1 + opcode (RFC 5040 4.2); STag; TO."""
    return bytes([0x81 | (last << 6), 0x40 | opcode]) + struct.pack(">IQ", stag, to)


def ddp_untagged(last, opcode, ulp_word, qn, msn, mo):
    """RFC 5041 4.3: T=0, L, DV=1; RDMAP control; 32 ULP bits; QN; MSN; MO."""
    return bytes([0x01 | (last << 6), 0x40 | opcode]) + struct.pack(">IIII", ulp_word, qn, msn, mo)


RDMA_WRITE, READ_REQ, READ_RESP, SEND, SEND_INV, SEND_SE, SEND_SE_INV, TERMINATE = range(8)
IW_WRITE = ddp_tagged(1, RDMA_WRITE, 0xDEADBEEF, 0x100000020) + b"\x01\x02\x03"
IW_MESSAGES = [
    ddp_untagged(1, SEND, 0, 0, 1, 0) + b"hi!!",
    IW_WRITE,
    # RFC 5040 4.4: sink STag, sink TO, size, source STag, source TO.
    ddp_untagged(1, READ_REQ, 0, 1, 1, 0) + struct.pack(">IQIIQ", 0x100, 0x1000, 65536, 0x200, 0xFFFFFFFF00000000),
    ddp_tagged(0, READ_RESP, 0x100, 0x1000) + b"\xaa" * 64,
    ddp_untagged(1, SEND_SE_INV, 0xCAFE0001, 0, 2, 0) + b"z",
    # RFC 5040 4.8: layer 1 (DDP), etype 1 (tagged), ecode 1 (bounds), M and D; DDP Segment
    # Length 17; the offending 14-octet DDP header.
    ddp_untagged(1, TERMINATE, 0, 2, 1, 0) + bytes([0x11, 0x01, 0xC0, 0x00]) + struct.pack(">H", 17) + IW_WRITE[:14],
]

IWARP = {
    "mpa_request_rev2": b"\0" + mpa_rr(MPA_REQ, 0x50, 2, ird_ord(16, 8) + pd(flags=1)),
    "mpa_reply_reject_rev1": b"\0" + mpa_rr(MPA_REP, 0x20, 1, b""),
    "mpa_request_markers": b"\0" + mpa_rr(MPA_REQ, 0x80, 1, pd()),
    "mpa_bad_key": b"\0" + mpa_rr(b"MPA ID Xyz Frame", 0x00, 1, b""),
    "mpa_pd_too_long": b"\0" + MPA_REQ + bytes([0, 1]) + struct.pack(">H", 513) + b"\0" * 513,
    "fpdu_stream_crc": b"\x01" + b"".join(fpdu(m) for m in IW_MESSAGES),
    "fpdu_stream_no_crc": b"\0" + b"".join(fpdu(m, crc=False) for m in IW_MESSAGES),
    "fpdu_bad_crc": b"\x01" + fpdu(IW_MESSAGES[0])[:-1] + b"\x00",
    "fpdu_unknown_opcode": b"\x01" + fpdu(ddp_untagged(1, 8, 0, 0, 1, 0)),
}

# --- ONC RPC messages (rpc_msg target) -------------------------------------------------------
RPC = {
    "call_auth_none": rpc_call(0x100, proc=1, args=w(8) + b"\0" * 8),
    "call_auth_sys": rpc_call(0x101, proc=4, cred=w(AUTH_SYS) + opaque(auth_sys_body(1000, 1000, (4, 24, 27)))),
    "call_auth_sys_16_gids": rpc_call(0x102, cred=w(AUTH_SYS) + opaque(auth_sys_body(0, 0, tuple(range(16)), b"m" * 255))),
    "reply_success": rpc_reply_ok(0x103, w(0, 1, 2)),
    "reply_rpc_mismatch": rpc_reply_denied_mismatch(0x104),
    "reply_auth_error": rpc_reply_auth_error(0x105),
    "reply_prog_mismatch": rpc_reply_prog_mismatch(0x106),
    "reply_garbage_args": w(0x107, REPLY, 0, AUTH_NONE, 0, 4),
}

# --- NFSv3 arguments (RFC 1813), nfs3_args target: first octet = procedure -----------------------
FH = opaque(bytes(range(32)))  # nfs_fh3 of 32 octets
NAME = opaque(b"file.txt")
SATTR_NONE = w(0, 0, 0, 0, 0, 0)  # set_it false for mode/uid/gid/size, atime/mtime DONT_CHANGE

NFS3 = {
    0: b"",  # NULL
    1: FH,  # GETATTR
    2: FH + SATTR_NONE + w(0),  # SETATTR, no guard
    3: FH + NAME,  # LOOKUP
    4: FH + w(0x3F),  # ACCESS
    5: FH,  # READLINK
    6: FH + hyper(4096) + w(65536),  # READ
    7: FH + hyper(0) + w(5, 2) + opaque(b"hello"),  # WRITE, FILE_SYNC
    8: FH + NAME + w(0) + SATTR_NONE,  # CREATE UNCHECKED
    9: FH + opaque(b"dir") + SATTR_NONE,  # MKDIR
    10: FH + opaque(b"link") + SATTR_NONE + opaque(b"target"),  # SYMLINK
    11: FH + opaque(b"fifo") + w(7) + SATTR_NONE,  # MKNOD NF3FIFO
    12: FH + NAME,  # REMOVE
    13: FH + opaque(b"dir"),  # RMDIR
    14: FH + NAME + FH + opaque(b"new.txt"),  # RENAME
    15: FH + FH + opaque(b"hard"),  # LINK
    16: FH + hyper(0) + hyper(0) + w(8192),  # READDIR
    17: FH + hyper(0) + hyper(0) + w(4096, 32768),  # READDIRPLUS
    18: FH,  # FSSTAT
    19: FH,  # FSINFO
    20: FH,  # PATHCONF
    21: FH + hyper(0) + w(0),  # COMMIT
}


# --- The NFSv3 server, nfs3_server target: first octet = procedure (low five bits) and
# --- credential (bits 5-6: 0 AUTH_SYS root, 1 uid 1000, 2 uid 1000 with 16 groups, 3 AUTH_NONE);
# --- a handle is written as the marker the target replaces with fixture handle n
def H(n):
    """Handle marker n: 0 root, 1 d, 2 f, 3 l, 4 p, 5 stale, 6 bad MAC, 7 unsealed."""
    return w(4) + bytes([0xFE, 0xFE, 0xFE, n])


ROOT, D, F, L, P, STALE, BADMAC, UNSEALED = (H(n) for n in range(8))
SERVER = {
    "proc00_null": (0, b""),
    "proc01_getattr_f": (1, F),
    "proc02_setattr_f_mode_guarded": (2, F + w(1, 0o600, 0, 0, 0, 0, 0) + w(1, 0, 0)),
    "proc03_lookup_f": (3, ROOT + opaque(b"f")),
    "proc04_access_d": (4, D + w(0x3F)),
    "proc05_readlink_l": (5, L),
    "proc06_read_f": (6, F + hyper(10) + w(50)),
    "proc07_write_f_unstable": (7, F + hyper(90) + w(5, 0) + opaque(b"hello")),
    "proc08_create_guarded": (8, D + opaque(b"new") + w(1) + SATTR_NONE),
    "proc08_create_exclusive": (8, D + opaque(b"excl") + w(2) + hyper(0x0102030405060708)),
    "proc09_mkdir": (9, ROOT + opaque(b"dir2") + SATTR_NONE),
    "proc10_symlink": (10, D + opaque(b"s") + SATTR_NONE + opaque(b"../f")),
    "proc11_mknod_chr": (11, D + opaque(b"c") + w(3) + SATTR_NONE + w(1, 3)),
    "proc12_remove_f": (12, ROOT + opaque(b"f")),
    "proc13_rmdir_d": (13, ROOT + opaque(b"d")),
    "proc14_rename_f_into_d": (14, ROOT + opaque(b"f") + D + opaque(b"g")),
    "proc15_link_f_into_d": (15, F + D + opaque(b"h")),
    "proc16_readdir_root": (16, ROOT + hyper(0) + hyper(0) + w(8192)),
    "proc17_readdirplus_root": (17, ROOT + hyper(0) + hyper(0) + w(4096, 32768)),
    "proc18_fsstat": (18, ROOT),
    "proc19_fsinfo": (19, ROOT),
    "proc20_pathconf": (20, ROOT),
    "proc21_commit_f": (21, F + hyper(0) + w(0)),
    "proc01_getattr_stale": (1, STALE),
    "proc01_getattr_bad_mac": (1, BADMAC),
    "proc01_getattr_unsealed": (1, UNSEALED),
    "proc06_read_p_uid1000": (6 | 0x20, P + hyper(0) + w(10)),
    "proc12_remove_f_groups": (12 | 0x40, ROOT + opaque(b"f")),
    "proc03_lookup_auth_none": (3 | 0x60, ROOT + opaque(b"d")),
}
# The same calls on the dir: store (bit 7), and calls that try to leave the export through the
# fixture's link l (-> ../outside/secret) or through names.
DIR = 0x80
SERVER.update({"dir_" + name: (first | DIR, args) for name, (first, args) in list(SERVER.items())})
SERVER.update({
    "dir_escape_read_link": (6 | DIR, L + hyper(0) + w(100)),
    "dir_escape_write_link": (7 | DIR, L + hyper(0) + w(1, 2) + opaque(b"!")),
    "dir_escape_truncate_link": (2 | DIR, L + w(0, 0, 0, 1) + hyper(0) + w(0, 0, 0)),
    "dir_escape_lookup_through_link": (3 | DIR, L + opaque(b"secret")),
    "dir_escape_lookup_dotdot": (3 | DIR, ROOT + opaque(b"..")),
    "dir_escape_create_slash": (8 | DIR, ROOT + opaque(b"../outside/new") + w(0) + SATTR_NONE),
    "dir_escape_rename_slash": (14 | DIR, ROOT + opaque(b"f") + ROOT + opaque(b"../outside/secret")),
    "dir_escape_link_slash": (15 | DIR, F + ROOT + opaque(b"../outside/hard")),
    "dir_escape_remove_link": (12 | DIR, ROOT + opaque(b"l")),
    "dir_escape_setattr_mode_link": (2 | DIR, L + w(1, 0o777, 0, 0, 0, 0, 0) + w(0)),
})


# --- NFSACL (program 100227 version 3), nfsacl target: first octet = procedure (bit 0: GETACL,
# --- SETACL), credential (bits 5-6, as nfs3_server) and store (bit 7: dir:); then the arguments:
# --- nfs_fh3, a mask (ACL 1, ACLCNT 2, DFACL 4, DFACLCNT 8), for SETACL two ACLs, each an entry
# --- count and an XDR array of (tag, id, perm) entries (Linux's fs/nfs_common/nfsacl.c layout;
# --- tags USER_OBJ 1, USER 2, GROUP_OBJ 4, GROUP 8, MASK 0x10, OTHER 0x20, default ACL entries
# --- flagged 0x1000).
UO, US, GO, GR, MK, OT, DEF = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x1000


def acl(*entries):
    """An NFSACL ACL: count, array length, (tag, id, perm) entries."""
    return w(len(entries), len(entries)) + b"".join(w(*e) for e in entries)


NAMED_R = acl((UO, 0, 6), (US, 2000, 4), (GO, 0, 4), (MK, 0, 4), (OT, 0, 0))
MINIMAL = acl((UO, 0, 7), (GO, 0, 5), (MK, 0, 5), (OT, 0, 5))
DEFAULT_NAMED = acl((UO | DEF, 0, 7), (US | DEF, 2000, 7), (GO | DEF, 0, 5), (MK | DEF, 0, 7), (OT | DEF, 0, 0))
NFSACL = {
    "getacl_f_all": (0, F + w(0xF)),
    "getacl_d_counts": (0, D + w(0xA)),
    "getacl_l_all": (0, L + w(0xF)),
    "getacl_bad_mask": (0, F + w(0x10)),
    "getacl_stale": (0, STALE + w(0xF)),
    "getacl_bad_mac": (0, BADMAC + w(0xF)),
    "setacl_f_named_user": (1, F + w(0x1) + NAMED_R + acl()),
    "setacl_d_access_and_default": (1, D + w(0x5) + MINIMAL + DEFAULT_NAMED),
    "setacl_f_unsorted": (1, F + w(0x1) + acl((OT, 7, 0), (MK, 7, 4), (US, 2000, 4), (GO, 7, 4), (UO, 7, 6)) + acl()),
    "setacl_f_no_mask": (1, F + w(0x1) + acl((UO, 0, 6), (US, 2000, 4), (GO, 0, 4), (OT, 0, 0)) + acl()),
    "setacl_f_default": (1, F + w(0x5) + MINIMAL + DEFAULT_NAMED),
    "setacl_f_uid1000": (1 | 0x20, F + w(0x1) + NAMED_R + acl()),
    "setacl_l_link": (1, L + w(0x1) + NAMED_R + acl()),
    "setacl_f_remove": (1, F + w(0x0) + acl() + acl()),
    "setacl_too_many": (1, F + w(0x1) + w(1025, 0) + acl()),
    "setacl_bad_tag": (1, F + w(0x1) + acl((0x40, 0, 0)) + acl()),
    "setacl_bad_mask_bits": (1, F + w(0x11) + acl() + acl()),
}
NFSACL.update({"dir_" + name: (first | DIR, args) for name, (first, args) in list(NFSACL.items())})


# --- Connection scripts: a flags octet, then u16-length-prefixed messages ---------------------
def script(flags, *msgs):
    return bytes([flags]) + b"".join(struct.pack(">H", len(m)) + m for m in msgs)


RESPONDER = {
    "v1_inline_calls": script(0x08, V1["msg_inline_call"], V1["msg_read_chunk"]),
    "v1_ddp_calls": script(0x0C, V1["msg_write_list"], V1["msg_reply_chunk"], V1["msg_write_list_two_chunks"]),
    "v1_long_call": script(0x08, V1["nomsg_position_zero"]),
    "v1_bad_inputs": script(0x08, V1["bad_version"], V1["short_header"], V1["done"], V1["msgp"], V1["error_chunk"]),
    "v2_calls": script(0x09, V2["msg_call"], V2["msg_call_chunks"], V2["nomsg_call"]),
    "v2_optional_and_errors": script(0x09, V2["optional_call"], V2["optional_reply"], V2["unknown_proc"]),
    "v1_failing_wrs": script(0x38, V1["msg_read_chunk"], V1["msg_write_list"]),
}

REQUESTER = {
    "v1_replies": script(0x00, V1["msg_inline_reply"],
                         v1(2, RDMA_MSG, no_lists() + rpc_reply_ok(2))),
    "v1_errors": script(0x00, v1(1, RDMA_ERROR, w(1, 1, 1)), v1(2, RDMA_ERROR, w(2))),
    "v1_reply_chunk": script(0x00, v1(1, RDMA_NOMSG, read_list() + write_list()
                                      + reply_chunk(write_chunk(seg(0x55, 200, 0xE000))))),
    "v1_write_list_returned": script(0x00, v1(1, RDMA_MSG, read_list()
                                              + write_list(write_chunk(seg(0x22, 100, 0x9000)))
                                              + reply_chunk() + rpc_reply_ok(1))),
    "v2_replies": script(0x01, V2["msg_reply"].replace(w(2, 2), w(1, 2), 1), V2["error_cant_reply"]),
    "v2_fallback": script(0x01, v2(1, R2_ERROR, w(1, 1, 1))),
}

# --- NFSv4.1 operations after a valid SEQUENCE (RFC 8881), nfs41_compound target --------------
# First octet: the number of operations after SEQUENCE (low five bits: the COMPOUND announces
# one more, SEQUENCE); then the operations' nfs_argop4 octets. A first octet with its top bit
# set makes the rest a whole COMPOUND4args.
PUTROOTFH = w(24)
GETFH = w(10)
NFS41 = {
    "putroot_getfh_getattr": bytes([3]) + PUTROOTFH + GETFH + w(9, 2, 0x0010011A, 0x00B0A23A),
    "lookup_missing": bytes([2]) + PUTROOTFH + w(15) + opaque(b"missing"),
    "open_create_write_read_close": bytes([5]) + PUTROOTFH
    + w(18, 0, 3, 0) + hyper(1) + opaque(b"owner") + w(1, 0, 2, 0, 2) + opaque(w(0o644)) + w(0) + opaque(b"f")
    + w(38) + w(1, 0, 0, 0) + hyper(0) + w(2) + opaque(b"hello")  # WRITE with the current stateid
    + w(25) + w(1, 0, 0, 0) + hyper(0) + w(100)  # READ
    + w(4, 0) + w(1, 0, 0, 0),  # CLOSE
    "create_dir_readdir": bytes([3]) + PUTROOTFH + w(6, 2) + opaque(b"d") + w(0, 0)
    + w(26) + hyper(0) + b"\0" * 8 + w(1000, 8000, 1, 0x00100002),
    "header_minor_2": bytes([0x80]) + opaque(b"tag") + w(2, 1) + PUTROOTFH,
    "header_exchange_id": bytes([0x80]) + opaque(b"") + w(1, 1, 42) + b"\1" * 8 + opaque(b"x") + w(0, 0, 0),
}
# Minor version 2 (bit 5 of the first octet; RFC 7862): OPEN (create) g, ALLOCATE 64 KiB,
# SEEK to a hole, DEALLOCATE 4 KiB, CLOSE, each with the current stateid (seqid 1, other 0);
# a COPY and a CLONE within one file.
CURRENT_STATEID = w(1, 0, 0, 0)
NFS41.update({
    "v42_allocate_seek_deallocate": bytes([0x20 | 6]) + PUTROOTFH
    + w(18, 0, 3, 0) + hyper(1) + opaque(b"owner") + w(1, 0, 2, 0, 2) + opaque(w(0o644)) + w(0) + opaque(b"g")
    + w(59) + CURRENT_STATEID + hyper(0) + hyper(65536)  # ALLOCATE
    + w(69) + CURRENT_STATEID + hyper(0) + w(1)  # SEEK to NFS4_CONTENT_HOLE
    + w(62) + CURRENT_STATEID + hyper(0) + hyper(4096)  # DEALLOCATE
    + w(4, 0) + CURRENT_STATEID,  # CLOSE
    # OPEN (create) k, WRITE "hello", SAVEFH, CLONE it (count 0: to the end) to offset 1 MiB of
    # itself (on the memory store's blocks and a file system's: a file system that clones
    # takes it; one that cannot, NOTSUPP).
    "v42_clone_within_file": bytes([0x20 | 5]) + PUTROOTFH
    + w(18, 0, 3, 0) + hyper(1) + opaque(b"owner") + w(1, 0, 2, 0, 2) + opaque(w(0o644)) + w(0) + opaque(b"k")
    + w(38) + CURRENT_STATEID + hyper(0) + w(2) + opaque(b"hello")  # WRITE, FILE_SYNC
    + w(32)  # SAVEFH
    + w(71) + CURRENT_STATEID + CURRENT_STATEID + hyper(0) + hyper(1 << 20) + hyper(0),  # CLONE
    # OPEN (create) c, WRITE "hello", SAVEFH, COPY its 5 octets to offset 100 of itself.
    "v42_copy_within_file": bytes([0x20 | 5]) + PUTROOTFH
    + w(18, 0, 3, 0) + hyper(1) + opaque(b"owner") + w(1, 0, 2, 0, 2) + opaque(w(0o644)) + w(0) + opaque(b"c")
    + w(38) + CURRENT_STATEID + hyper(0) + w(2) + opaque(b"hello")  # WRITE, FILE_SYNC
    + w(32)  # SAVEFH
    + w(60) + CURRENT_STATEID + CURRENT_STATEID + hyper(0) + hyper(100) + hyper(5)
    + w(0, 1, 0),  # COPY: not consecutive, synchronous, no source server
    # RFC 8276: OPEN (create) x, SETXATTR (either) user "k" = "v", GETXATTR k, LISTXATTRS from
    # cookie 0 within 4096 octets, REMOVEXATTR k.
    "v42_xattrs": bytes([0x20 | 6]) + PUTROOTFH
    + w(18, 0, 3, 0) + hyper(1) + opaque(b"owner") + w(1, 0, 2, 0, 2) + opaque(w(0o644)) + w(0) + opaque(b"x")
    + w(73, 0) + opaque(b"k") + opaque(b"v")  # SETXATTR
    + w(72) + opaque(b"k")  # GETXATTR
    + w(74) + hyper(0) + w(4096)  # LISTXATTRS
    + w(75) + opaque(b"k"),  # REMOVEXATTR
    # RFC 8275: CREATE of directory m and OPEN EXCLUSIVE4_1 of file e, each with mode_umask
    # (attribute 81: mode, umask) as its only attribute.
    "v42_mode_umask": bytes([0x20 | 4]) + PUTROOTFH
    + w(6, 2) + opaque(b"m") + w(3, 0, 0, 1 << 17) + opaque(w(0o777, 0o022))  # CREATE
    + PUTROOTFH
    + w(18, 0, 3, 0) + hyper(1) + opaque(b"owner") + w(1, 3) + b"verifier"
    + w(3, 0, 0, 1 << 17) + opaque(w(0o666, 0o027)) + w(0) + opaque(b"e"),  # OPEN
})
# The same on the dir: store (bit 6 of the first octet), whose fixture has d, f, a link l out of
# the export (../outside/secret) and a FIFO p; and operations that try to leave the export.
NFS41.update({"dir_" + name: bytes([data[0] | 0x40]) + data[1:] for name, data in list(NFS41.items())})
LOOKUP_L = w(15) + opaque(b"l")
ANON_STATEID = w(0, 0, 0, 0)


def ops(*o):
    """Operations after SEQUENCE on the dir: store: the COMPOUND announces SEQUENCE and them."""
    return bytes([0x40 | len(o)]) + b"".join(o)


NFS41.update({
    "dir_escape_read_link": ops(PUTROOTFH, LOOKUP_L, w(25) + ANON_STATEID + hyper(0) + w(100)),
    "dir_escape_lookup_through_link": ops(PUTROOTFH, LOOKUP_L, w(15) + opaque(b"secret")),
    "dir_escape_open_link": ops(PUTROOTFH, w(18, 0, 1, 0) + hyper(1) + opaque(b"owner") + w(0, 0) + opaque(b"l")),
    "dir_escape_lookupp_root": ops(PUTROOTFH, w(16)),
    "dir_escape_setattr_mode_link": ops(PUTROOTFH, LOOKUP_L, w(34) + ANON_STATEID + w(2, 0, 2) + opaque(w(0o777))),
    "dir_escape_rename_into_link": ops(PUTROOTFH, w(32), LOOKUP_L, w(29) + opaque(b"f") + opaque(b"x")),
    "dir_escape_create_slash": ops(PUTROOTFH, w(6, 2) + opaque(b"../outside/d") + w(0, 0)),
    "dir_escape_remove_dotdot": ops(PUTROOTFH, w(28) + opaque(b"..")),
})

# --- NFSv4.1 client record file (clientdb.rs), nfs4_clientdb target --------------------------
# The file: magic "RNFS4CL1", a 32-bit record count, per record a 32-bit owner length and the
# owner (co_ownerid), a 32-bit principal length and the principal (flavor, and uid and gid for
# AUTH_SYS), no XDR padding; then an 8-octet checksum. First octet of a seed = mode: 0x40 the
# rest follows the magic and the target appends the checksum; 0x80 the rest is a whole file;
# 0x00 records as (16-bit owner length, 8-bit principal length, owner, principal).
def u32(x):
    return struct.pack(">I", x)


def db_record(owner, principal):
    return u32(len(owner)) + owner + u32(len(principal)) + principal


SYS_ROOT = u32(1) + u32(0) + u32(0)  # principal: AUTH_SYS, uid 0, gid 0
NONE_P = u32(0)  # principal: AUTH_NONE
HOST_A = b"Linux NFSv4.1 host-a"


def db_list(*recs):
    return b"".join(struct.pack(">HB", len(o), len(p)) + o + p for o, p in recs)


CLIENTDB = {
    "sealed_empty": bytes([0x40]) + u32(0),
    "sealed_two": bytes([0x40]) + u32(2) + db_record(HOST_A, SYS_ROOT) + db_record(b"host-b", NONE_P),
    "sealed_duplicate": bytes([0x40]) + u32(2) + db_record(HOST_A, SYS_ROOT) + db_record(HOST_A, NONE_P),
    "sealed_owner_too_long": bytes([0x40]) + u32(1) + db_record(b"o" * 1025, SYS_ROOT),
    "sealed_count_too_large": bytes([0x40]) + u32(4097),
    "sealed_trailing": bytes([0x40]) + u32(1) + db_record(HOST_A, SYS_ROOT) + b"\0\0\0\0",
    "sealed_short": bytes([0x40]) + u32(1) + u32(10) + b"abc",
    "raw_bad_magic": bytes([0x80]) + b"RNFS4CL0" + u32(0) + b"\0" * 8,
    "raw_bad_checksum": bytes([0x80]) + b"RNFS4CL1" + u32(0) + b"\0" * 8,
    "records_two": bytes([0]) + db_list((HOST_A, SYS_ROOT), (b"host-b", NONE_P)),
    "records_empty_owner": bytes([0]) + db_list((b"", SYS_ROOT)),
}

# --- nfs_tcp_services target: first octet = mode (0 exports file, 1 MOUNT call record,
# --- 2 record-marking stream, 3 MOUNT / rpcbind replies) ----------------------------------
MOUNT_PROG, MOUNT_V3 = 100005, 3
MNTPROC_NULL, MNTPROC_MNT, MNTPROC_DUMP, MNTPROC_UMNT, MNTPROC_UMNTALL, MNTPROC_EXPORT = 0, 1, 2, 3, 4, 5


def mount_call(xid, proc, args=b"", vers=MOUNT_V3, cred=None):
    return bytes([1]) + rpc_call(xid, prog=MOUNT_PROG, vers=vers, proc=proc, args=args, cred=cred)


def mark(body, last=True):
    """RFC 5531 section 11 record mark: last-fragment bit, 31-bit length."""
    return w((0x80000000 if last else 0) | len(body)) + body


def stream(sizes, data):
    """Mode 2: how many octets of piece sizes, the sizes (each read hands size + 1 octets), the stream."""
    return bytes([2, len(sizes)]) + bytes(sizes) + data


SYS = w(AUTH_SYS) + opaque(auth_sys_body())
TCP_SERVICES = {
    "exports_file": bytes([0]) + b"# comment\n/export 10.0.0.0/8(rw,sec=sys) *(ro)\n"
    b"/other -ro,all_squash 10.9.8.7(rw,anonuid=65534) \\\n  192.168.1.7(no_root_squash)\n",
    "exports_ipv6": bytes([0]) + b"/v6 ::1(rw) fe80::/10(ro,sec=none)\n",
    "mount_null": mount_call(1, MNTPROC_NULL),
    "mount_mnt_inside": mount_call(2, MNTPROC_MNT, opaque(b"/inside"), cred=SYS),
    "mount_mnt_open": mount_call(3, MNTPROC_MNT, opaque(b"/open/")),
    "mount_mnt_unknown": mount_call(4, MNTPROC_MNT, opaque(b"/nowhere"), cred=SYS),
    "mount_umnt": mount_call(5, MNTPROC_UMNT, opaque(b"/open")),
    "mount_dump": mount_call(6, MNTPROC_DUMP),
    "mount_export": mount_call(7, MNTPROC_EXPORT),
    "mount_umntall": mount_call(8, MNTPROC_UMNTALL),
    "mount_v1": mount_call(9, MNTPROC_MNT, opaque(b"/open"), vers=1),
    "stream_two_records": stream([0, 3, 200], mark(b"abcd") + mark(b"ef", last=False) + mark(b"gh")),
    "stream_cut_in_body": stream([], mark(b"abcdefgh")[:9]),
    "stream_cut_in_mark": stream([1], mark(b"ab") + b"\x80\x00"),
    "stream_too_long": stream([7], w(0x80000000 | 1025) + b"x" * 8),
    "stream_empty_fragments": stream([0, 0, 0], mark(b"", last=False) + mark(b"", last=False) + mark(b"")),
    "replies_mountres3_ok": bytes([3]) + w(0) + opaque(b"\x07" * 16) + w(2, AUTH_SYS, AUTH_NONE),
    "replies_exports": bytes([3]) + w(1) + opaque(b"/export") + w(1) + opaque(b"*") + w(0, 0),
    "replies_mountlist": bytes([3]) + w(1) + opaque(b"10.0.0.1") + opaque(b"/export") + w(0),
    "replies_universal_addr": bytes([3]) + b"10.0.0.1.8.1",
}

# --- nlm target: first octet = mode (0 lock table against its model, 1 one call to the NLM
# --- service over the nfs3_server fixture; handle markers as there) -------------------------
NLM_TEST, NLM_LOCK, NLM_CANCEL, NLM_UNLOCK, NLM_SHARE, NLM_UNSHARE, NLM_NM_LOCK, NLM_FREE_ALL = 1, 2, 3, 4, 20, 21, 22, 23


def nlm_lock4(fh, svid=1, offset=0, length=0, caller=b"client", oh=b"owner"):
    """nlm4_lock: caller_name, fh, oh, svid, l_offset, l_len."""
    return opaque(caller) + fh + opaque(oh) + w(svid) + hyper(offset) + hyper(length)


def nlm_call(proc, args, cred=0):
    """Mode 1: procedure and credential (0 root, 1 uid 1000, 2 AUTH_NONE), then the arguments."""
    return bytes([1, (cred << 5) | proc]) + args


def nlm_steps(*steps):
    """Mode 0: steps of (kind, who, offset, length) octets (kinds: 0 LOCK, 1 blocking LOCK,
    2 UNLOCK, 3 CANCEL, 4 TEST, 5 FREE_ALL; who: host bits 0-1, svid bits 2-3, file bit 4,
    exclusive bit 5)."""
    return bytes([0]) + b"".join(bytes(s) for s in steps)


NLM = {
    "table_block_and_grant": nlm_steps((0, 0x20, 0, 10), (1, 0x21, 5, 4), (4, 0x02, 0, 0), (2, 0x00, 0, 0), (4, 0x02, 0, 0)),
    "table_split_and_merge": nlm_steps((0, 0x20, 0, 0), (2, 0x00, 8, 4), (0, 0x00, 8, 2), (0, 0x20, 8, 4)),
    "table_deadlock": nlm_steps((0, 0x20, 0, 1), (0, 0x31, 0, 1), (1, 0x30, 0, 1), (1, 0x21, 0, 1)),
    "table_free_all": nlm_steps((0, 0x20, 0, 0), (1, 0x01, 0, 1), (5, 0x00, 0, 0)),
    # Found by the fuzzer: a request left waiting with nothing in its way once a later one
    # was granted (the queue is now tried again from its head after each grant).
    "table_stale_waiter": bytes.fromhex("0000e0fff9003100c7c7c7dbc7c7cfc7c7c7cac7c7c73bc7c7c7c7c7c7c70ec7c73d39f138f7d8fdfbffff00c7c7ffff0000002001d7d700200000013817ffffffffffffffffffffffffffffffffffffffffffffffffff00d7d7d7d7d7d7dcd8d8d8d8ff71d82fd8d8d800040001010000c7c7dbc7c7cfc7d7c700000000000000006f895431000000000000000000000000000000000000000000000000000000000ec7c73d41f12538f7fffbff30c7c7c7c7c7c700040001c7c74c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c01011700d7d7d7d7d7d7d8d8d8d8d8d8d86e6e6e6e6e6e6ed82fd8d8000000000000aa3434343434343434344534343434343434343434343434348601fd2e"),
    "lock_file": nlm_call(NLM_LOCK, opaque(b"ck") + w(0, 1) + nlm_lock4(F) + w(0, 1)),
    "lock_file_uid1000": nlm_call(NLM_LOCK, opaque(b"ck") + w(0, 0) + nlm_lock4(F, 2) + w(0, 1), cred=1),
    "lock_dir": nlm_call(NLM_LOCK, opaque(b"ck") + w(0, 1) + nlm_lock4(D) + w(0, 1)),
    "lock_stale": nlm_call(NLM_LOCK, opaque(b"ck") + w(0, 1) + nlm_lock4(STALE) + w(0, 1)),
    "lock_forged": nlm_call(NLM_LOCK, opaque(b"ck") + w(0, 1) + nlm_lock4(BADMAC) + w(0, 1)),
    "lock_fbig": nlm_call(NLM_LOCK, opaque(b"ck") + w(0, 1) + nlm_lock4(F, 1, 1 << 63) + w(0, 1)),
    "lock_reclaim_no_grace": nlm_call(NLM_LOCK, opaque(b"ck") + w(0, 1) + nlm_lock4(F) + w(1, 1)),
    "test_file": nlm_call(NLM_TEST, opaque(b"t") + w(1) + nlm_lock4(F)),
    "unlock_file": nlm_call(NLM_UNLOCK, opaque(b"u") + nlm_lock4(F)),
    "cancel_file": nlm_call(NLM_CANCEL, opaque(b"c") + w(1, 1) + nlm_lock4(F)),
    "share_file": nlm_call(NLM_SHARE, opaque(b"s") + opaque(b"client") + F + opaque(b"oh") + w(1, 3, 0)),
    "unshare_file": nlm_call(NLM_UNSHARE, opaque(b"s") + opaque(b"client") + F + opaque(b"oh") + w(0, 0, 0)),
    "nm_lock_file": nlm_call(NLM_NM_LOCK, opaque(b"n") + w(0, 0) + nlm_lock4(F) + w(0, 0)),
    "free_all": nlm_call(NLM_FREE_ALL, opaque(b"client") + w(3)),
    "lock_trailing": nlm_call(NLM_LOCK, opaque(b"ck") + w(0, 1) + nlm_lock4(F) + w(0, 1) + w(0)),
    # Mode 2: a kept-hosts file (this one's checksum does not match: refused).
    "records_bad_sum": bytes([2]) + b"RNLMHS1\0" + w(3, 1) + bytes([4, 10, 0, 0, 1]) + b"\x00\x01a" + bytes(8),
    # Mode 3: SM_NOTIFY's arguments (mon_name, state).
    "sm_notify": bytes([3]) + opaque(b"client-1") + w(5),
}

TARGETS = {
    "v1_header": V1,
    "v2_header": V2,
    "private_data": PRIVATE_DATA,
    "rpc_msg": RPC,
    "nfs3_args": {f"proc{p:02}": bytes([p]) + body for p, body in NFS3.items()},
    "nfs41_compound": NFS41,
    "nfs4_clientdb": CLIENTDB,
    "conn_responder": RESPONDER,
    "conn_requester": REQUESTER,
    "iwarp_wire": IWARP,
    "nfs_tcp_services": TCP_SERVICES,
    "nfs3_server": {name: bytes([first]) + args for name, (first, args) in SERVER.items()},
    "nlm": NLM,
    "nfsacl": {name: bytes([first]) + args for name, (first, args) in NFSACL.items()},
}


def main():
    for target, seeds in TARGETS.items():
        d = os.path.join(HERE, target)
        os.makedirs(d, exist_ok=True)
        for old in os.listdir(d):
            os.remove(os.path.join(d, old))
        for name, data in seeds.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
