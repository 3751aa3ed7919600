//! What the memory store charges against its capacity for each thing it holds: at least the
//! memory the process allocates for it, so that a client filling the store with names, links,
//! symbolic links or one-octet writes into separate blocks stays within `capacity` octets of
//! heap.
//!
//! Normal operation: the tree adds a charge when it creates something and subtracts the same
//! charge when it drops it; the numbers below cover the allocations behind each thing
//! (allocator rounding and headers, and the hash tables and B-trees that index it at their
//! emptiest and while they grow). `memory::tests` and `apps/tests/nfsd_memory_bound.rs` measure
//! the allocations against them. Recovery: none; these are plain sums.

/// An inode: its slot in the inode table (which doubles as it grows) and its fixed fields.
pub(super) const INODE: u64 = 512;

/// A directory entry beyond its name: its slots in the directory's cookie B-tree and name
/// hash table.
const ENTRY: u64 = 320;

/// An allocation: the allocator's header and rounding.
const ALLOC: u64 = 32;

/// A data block beyond its octets: its slot in the file's block B-tree and its allocation.
pub(super) const BLOCK: u64 = 128 + ALLOC;

/// Smallest buffer a data block holds.
pub(super) const MIN_BLOCK: usize = 16;

/// A directory entry named with `name_len` octets (the name is held twice: by cookie and by
/// name).
pub(super) fn entry(name_len: usize) -> u64 {
    ENTRY + 2 * (name_len as u64 + ALLOC)
}

/// A symbolic link's target of `len` octets.
pub(super) fn target(len: usize) -> u64 {
    len as u64 + ALLOC
}

/// The buffer a data block holding `len` octets keeps (blocks of `bs` octets): the next power
/// of two, at least [`MIN_BLOCK`], at most the block size.
pub(super) fn block_buf(len: usize, bs: usize) -> usize {
    if len == 0 {
        return 0;
    }
    len.next_power_of_two().max(MIN_BLOCK).min(bs.max(len))
}

/// The charge of a data block holding `len` octets.
pub(super) fn block(len: usize, bs: usize) -> u64 {
    BLOCK + block_buf(len, bs) as u64
}

/// The ACLs of one object: their box and each ACL's entries (12 octets each).
pub(super) fn acls(a: Option<&crate::nfs::acl::Acls>) -> u64 {
    let Some(a) = a else {
        return 0;
    };
    let one = |acl: &Option<crate::nfs::acl::Acl>| {
        acl.as_ref()
            .map_or(0, |x| ALLOC + 12 * x.entries().len() as u64)
    };
    ALLOC + 64 + one(&a.access) + one(&a.default)
}

/// The user extended attributes of one object beyond each attribute: their box (32 octets)
/// and the B-tree that holds them at its emptiest (one leaf node: eleven slots of two boxed
/// slices, 368 octets).
pub(super) const XATTRS: u64 = ALLOC + 32 + ALLOC + 368;

/// One user extended attribute with a name of `name_len` octets and a value of `value_len`
/// octets: the name and the value (an allocation each) and its share of the B-tree's nodes
/// once they split (a leaf left with five of its eleven slots, about 74 octets a slot, and the
/// internal nodes above the leaves).
pub(super) fn xattr(name_len: usize, value_len: usize) -> u64 {
    96 + 2 * ALLOC + name_len as u64 + value_len as u64
}
