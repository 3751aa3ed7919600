//! The command line of `rpcrdma-perf`: one scanner for perftest's spellings and two flag tables,
//! one for the verbs tests (`send_lat` … `read_bw`: [`parse`] → [`PerfArgs`], [`usage`]) and
//! one for the RPC tests (`rpc_lat`, `rpc_bw`: [`parse_rpc`] → [`RpcArgs`], [`usage_rpc`]).
//!
//! Normal operation: `scan` splits the arguments the way perftest reads them (`-s 64`,
//! `-s64`, `--size 64`, `--size=64`, grouped boolean short flags like `-aF`, a value flag
//! inside a group taking the rest of the group); which flags exist and whether each takes a
//! value is the table's answer, and each flag is applied as it is met, in order. Numbers are
//! decimal or `0x` hex (`number`). Each table then applies perftest's defaults and the
//! dependencies between flags. Recovery: an unknown, unsupported or out-of-range flag, a
//! missing value or a value given to a boolean flag is an error message naming the flag;
//! nothing is silently ignored except the flags perftest users pass by habit and that mean
//! nothing here (`-F`, `-R`).

mod rpc;
mod verbs;

use std::path::Path;

pub use rpc::{parse_rpc, usage_rpc, RpcArgs};
pub use verbs::{parse, usage, PerfArgs};

pub use crate::cli::ProviderKind;

/// How a flag takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// A boolean flag: `--name=v` is refused.
    Nothing,
    /// `--name v`, `--name=v`, `-cv`, `-c v`.
    Value,
}

/// One item of the command line, as [`scan`] hands it to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item<'a> {
    /// A flag as spelled (`--size` or `-s`, without the value) and its value.
    Flag(&'a str, Option<&'a str>),
    /// An argument that is no flag (the server address).
    Operand(&'a str),
}

/// A flag table: which flags exist and how each takes its value.
trait Table {
    /// The long flag `--name`, or the error naming it.
    fn long(&self, name: &str) -> Result<Takes, String>;
    /// The short flag `-c`, or the error naming it.
    fn short(&self, c: char) -> Result<Takes, String>;
}

/// The value of `flag` (`inline` after `=`, or the next argument, which is then consumed).
fn value<'a>(
    flag: &str,
    inline: Option<&'a str>,
    args: &'a [String],
    i: &mut usize,
) -> Result<&'a str, String> {
    if let Some(v) = inline {
        return Ok(v);
    }
    let v = args
        .get(*i)
        .ok_or_else(|| format!("{flag} needs a value"))?;
    *i += 1;
    Ok(v)
}

/// Walks `args` in order, asking `table` about each flag and handing every flag with its
/// value, and every operand, to `apply`; stops at the first error.
fn scan(
    args: &[String],
    table: &dyn Table,
    apply: &mut dyn FnMut(Item<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let mut i = 0;
    while i < args.len() {
        let tok = args[i].as_str();
        i += 1;
        if let Some(long) = tok.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let flag = format!("--{name}");
            match table.long(name)? {
                Takes::Nothing => {
                    if inline.is_some() {
                        return Err(format!("{flag} takes no value"));
                    }
                    apply(Item::Flag(&flag, None))?;
                }
                Takes::Value => {
                    let v = value(&flag, inline, args, &mut i)?;
                    apply(Item::Flag(&flag, Some(v)))?;
                }
            }
        } else if tok.len() > 1 && tok.starts_with('-') {
            let group = &tok[1..];
            for (at, f) in group.char_indices() {
                let flag = format!("-{f}");
                if table.short(f)? == Takes::Nothing {
                    apply(Item::Flag(&flag, None))?;
                    continue;
                }
                let rest = &group[at + f.len_utf8()..];
                let v = value(&flag, (!rest.is_empty()).then_some(rest), args, &mut i)?;
                apply(Item::Flag(&flag, Some(v)))?;
                break;
            }
        } else {
            apply(Item::Operand(tok))?;
        }
    }
    Ok(())
}

/// Whether `tok` is a flag of `table` that takes a value (in the next argument).
fn takes_value(table: &dyn Table, tok: &str) -> bool {
    if let Some(l) = tok.strip_prefix("--") {
        return table.long(l) == Ok(Takes::Value);
    }
    let mut c = tok.chars();
    match (c.next(), c.next(), c.next()) {
        (Some('-'), Some(f), None) => table.short(f) == Ok(Takes::Value),
        _ => false,
    }
}

/// Whether `tok` takes a value in the verbs tests (for [`crate::cli::early`]).
pub fn verbs_takes_value(tok: &str) -> bool {
    takes_value(&verbs::Flags, tok)
}

/// Whether `tok` takes a value in the RPC tests (for [`crate::cli::early`]).
pub fn rpc_takes_value(tok: &str) -> bool {
    takes_value(&rpc::Flags, tok)
}

/// `v` as a number (decimal or `0x` hex); the error names `flag`.
pub(crate) fn number(flag: &str, v: &str) -> Result<u64, String> {
    let t = v.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse::<u64>()
    };
    r.map_err(|_| format!("{flag} {v:?}: must be a number"))
}

/// `v` as a number in `lo..=hi`; the error names `flag` and the range.
pub(crate) fn ranged(flag: &str, v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    crate::cli::num(flag, v, lo, hi)
}

/// What a run will touch, checked before it starts: the output files can be written (nothing
/// is created), the `--cores` exist here, the `-d` device exists for the provider.
fn preflight(
    outs: &[(&str, Option<&Path>)],
    cores: &[usize],
    device: Option<&str>,
    provider: ProviderKind,
) -> Result<(), String> {
    for (flag, path) in outs {
        if let Some(p) = path {
            crate::cli::check_out_file(flag, p)?;
        }
    }
    crate::cli::check_cores("--cores", cores)?;
    if let Some(d) = device {
        crate::cli::check_device("-d", d, provider)?;
    }
    Ok(())
}

/// `-m`: one of the IB MTUs.
fn mtu(flag: &str, v: &str) -> Result<u32, String> {
    let m = number(flag, v)?;
    if !matches!(m, 256 | 512 | 1024 | 2048 | 4096) {
        return Err(format!("{flag} {v}: must be 256, 512, 1024, 2048 or 4096"));
    }
    Ok(m as u32)
}

/// `--cores A[,B]`: client core, server core.
fn cores(v: &str) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in v.split(',') {
        cores.push(number("--cores", part)? as usize);
    }
    if cores.is_empty() || cores.len() > 2 {
        return Err("--cores takes one or two core numbers (client,server)".into());
    }
    Ok(cores)
}

/// `--provider soft|iwarp|rdma`.
fn provider(v: &str) -> Result<ProviderKind, String> {
    ProviderKind::parse("--provider", v)
}

/// `--connection RC` (perftest's; the only connection type here).
fn connection(v: &str) -> Result<(), String> {
    if v != "RC" {
        return Err(format!("--connection {v} is not supported (RC only)"));
    }
    Ok(())
}

/// perftest's dependencies that both tables share: `-a` with `-s`, `-D` with `-a`.
fn check_sizes(all: bool, size_given: bool, duration: bool) -> Result<(), String> {
    if all && size_given {
        return Err("-a and -s cannot be used together".into());
    }
    if duration && all {
        return Err("-D (duration) runs one size; drop -a".into());
    }
    Ok(())
}
