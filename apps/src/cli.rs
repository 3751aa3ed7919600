//! The command-line layer every binary of this workspace shares: `--help` (stdout, exit 0),
//! `--version` (the package version), usage errors (one line and a pointer to `--help` on
//! stderr, exit 2), numbers checked against a range that the message names, and the checks a
//! tool runs on paths, cores and devices before it starts any work. The tools keep their own
//! flag tables (perftest's spellings for `rpcrdma-perf`); a cursor over the arguments that
//! splits `--flag=value` serves the hand-written ones. `--provider` is one type for every tool,
//! [`ProviderKind`], and one generic dispatch, [`dispatch`] (`cli/provider.rs`).
//!
//! Normal operation: a tool's `main` calls [`early`] on its arguments (help or version wins
//! over everything else), parses its flags, runs the `check_*` functions on what it will use,
//! and only then opens a device or a file. Recovery: every malformed argument is an error
//! message naming the flag, printed by [`usage_error`]; nothing panics.

use std::net::IpAddr;
use std::path::Path;
use std::process::ExitCode;

mod provider;

pub use provider::{dispatch, AppProvider, Devices, ProviderJob, ProviderKind};

/// The exit status of a usage error (as getopt-based tools and perftest use).
pub const USAGE_EXIT: u8 = 2;

/// The package version every `--version` prints.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What [`early`] found: a request answered before any other argument is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Early {
    /// `-h` / `--help`.
    Help,
    /// `-V` / `--version`.
    Version,
}

/// `-h` / `--help` or `-V` / `--version` anywhere before `--` (the first one wins), unless
/// it is the value of the flag before it (`takes_value` says which flags take one). A
/// `--version` followed by a number is refused: in the RPC tools that spelling once chose the
/// RPC-over-RDMA version, now `--rpcrdma-version`.
pub fn early(args: &[String], takes_value: &dyn Fn(&str) -> bool) -> Result<Option<Early>, String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--" => return Ok(None),
            "-h" | "--help" => return Ok(Some(Early::Help)),
            "-V" | "--version" => {
                if let Some(n) = args.get(i + 1).filter(|n| n.parse::<u32>().is_ok()) {
                    return Err(format!(
                        "--version takes no value (it prints the program version); the \
                         RPC-over-RDMA version is --rpcrdma-version {n}"
                    ));
                }
                return Ok(Some(Early::Version));
            }
            _ if a.starts_with("--version=") => {
                return Err("--version takes no value; the RPC-over-RDMA version is \
                            --rpcrdma-version N"
                    .into())
            }
            _ if !a.contains('=') && takes_value(a) => i += 2,
            _ => i += 1,
        }
    }
    Ok(None)
}

/// The program's name from `argv[0]` (`fallback` without one).
pub fn prog_name(argv0: Option<&str>, fallback: &'static str) -> String {
    argv0
        .and_then(|a| a.rsplit('/').next())
        .filter(|a| !a.is_empty())
        .unwrap_or(fallback)
        .to_string()
}

/// Prints `text` (the help) on stdout; exit status 0.
pub fn print_help(text: &str) -> ExitCode {
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
    ExitCode::SUCCESS
}

/// Prints `prog VERSION` on stdout; exit status 0.
pub fn print_version(prog: &str) -> ExitCode {
    println!("{prog} {VERSION}");
    ExitCode::SUCCESS
}

/// Answers [`Early`] (help text from `help`), or `None` to go on.
pub fn answer(prog: &str, e: Option<Early>, help: impl FnOnce() -> String) -> Option<ExitCode> {
    match e? {
        Early::Help => Some(print_help(&help())),
        Early::Version => Some(print_version(prog)),
    }
}

/// The start of every tool's `main`: answers `--help` (with `help`) and `--version`, and
/// refuses `--version N`; `Some(status)` when the tool is done, `None` to go on parsing.
pub fn start(
    prog: &str,
    argv: &[String],
    takes_value: &dyn Fn(&str) -> bool,
    help: &str,
) -> Option<ExitCode> {
    match early(argv, takes_value) {
        Ok(e) => answer(prog, e, || help.to_string()),
        Err(e) => Some(usage_error(prog, &e)),
    }
}

/// Prints a usage error on stderr, `prog: msg` and where the help is; exit status 2.
pub fn usage_error(prog: &str, msg: &str) -> ExitCode {
    eprintln!("{prog}: {}", msg.trim());
    eprintln!("Try `{prog} --help`.");
    ExitCode::from(USAGE_EXIT)
}

/// `v` as a number (decimal, or hex after `0x`), which must lie in `lo..=hi`; the message
/// names the flag and the range.
pub fn num(flag: &str, v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let t = v.trim();
    let n = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse::<u64>()
    };
    match n {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!("{flag} {v}: must be a number in {lo}..={hi}")),
    }
}

/// A TCP / rdma_cm port: `1..=65535`.
pub fn port(flag: &str, v: &str) -> Result<u16, String> {
    Ok(num(flag, v, 1, 65535)? as u16)
}

/// Every core in `cores` exists on this host (and in this process's affinity mask).
pub fn check_cores(flag: &str, cores: &[usize]) -> Result<(), String> {
    let ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .map(|c| c.id)
        .collect();
    if let Some(bad) = cores.iter().find(|c| !ids.contains(c)) {
        let have: Vec<String> = ids.iter().map(usize::to_string).collect();
        return Err(format!(
            "{flag} {bad}: no such core here (this process may run on {})",
            have.join(",")
        ));
    }
    Ok(())
}

/// `path` can be created or overwritten (its directory exists and is writable; the file, if
/// there, is not a directory and is writable). Nothing is created.
pub fn check_out_file(flag: &str, path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.as_os_str().is_empty() || path.is_dir() {
        return Err(format!("{flag} {shown}: not a file name"));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "{flag} {shown}: directory {} does not exist",
            dir.display()
        ));
    }
    let target = if path.exists() { path } else { dir };
    if !writable(target) {
        return Err(format!("{flag} {shown}: not writable"));
    }
    Ok(())
}

fn writable(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path that lives across the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// `path` is a file this process can read.
pub fn check_in_file(flag: &str, path: &Path) -> Result<(), String> {
    match std::fs::File::open(path) {
        Ok(_) if path.is_dir() => Err(format!("{flag} {}: is a directory", path.display())),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{flag} {}: {e}", path.display())),
    }
}

/// Where the kernel lists RDMA devices by name.
const SYS_RDMA: &str = "/sys/class/infiniband";

/// `-d NAME`: the soft provider has one device, `soft`, the iWARP provider one, `iwarp` (it
/// opens a device on any local address); the rdma provider's devices are the kernel's
/// (`/sys/class/infiniband`, what `ibv_devices` and `rdma link` list).
pub fn check_device(flag: &str, name: &str, kind: ProviderKind) -> Result<(), String> {
    if kind != ProviderKind::Rdma {
        if name == kind.name() {
            return Ok(());
        }
        return Err(format!(
            "{flag} {name}: the {0} provider's only device is {0} (--provider rdma opens \
             RDMA devices)",
            kind.name()
        ));
    }
    let mut names: Vec<String> = std::fs::read_dir(SYS_RDMA)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if names.iter().any(|n| n == name) {
        return Ok(());
    }
    names.sort();
    Err(if names.is_empty() {
        format!("{flag} {name}: no RDMA device on this host ({SYS_RDMA} is empty)")
    } else {
        format!(
            "{flag} {name}: no such RDMA device (have: {})",
            names.join(" ")
        )
    })
}

/// Walks the arguments one token at a time; a flag's value is either inline
/// (`--flag=value`) or the next argument.
#[derive(Debug)]
pub struct ArgCursor<'a> {
    argv: &'a [String],
    next: usize,
    token: &'a str,
    inline: Option<&'a str>,
}

impl<'a> ArgCursor<'a> {
    /// A cursor before the first of `argv` (the program name already removed).
    pub fn new(argv: &'a [String]) -> Self {
        ArgCursor {
            argv,
            next: 0,
            token: "",
            inline: None,
        }
    }

    /// The next token's name: `--flag` of `--flag=value`, otherwise the whole token (a short
    /// flag or a positional argument). `None` after the last argument.
    pub fn next_name(&mut self) -> Option<&'a str> {
        let tok = self.argv.get(self.next)?.as_str();
        self.next += 1;
        self.token = tok;
        let (name, inline) = match tok.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (tok, None),
        };
        self.inline = inline;
        Some(name)
    }

    /// The current token as given (with its `=value`, if any).
    pub fn token(&self) -> &'a str {
        self.token
    }

    /// The current flag's value: the inline one, or the next argument (consumed).
    pub fn value(&mut self, name: &str) -> Result<String, String> {
        if let Some(v) = self.inline.take() {
            return Ok(v.to_string());
        }
        let v = self
            .argv
            .get(self.next)
            .ok_or_else(|| format!("{name} needs a value"))?;
        self.next += 1;
        Ok(v.clone())
    }

    /// The current flag's value as a number in `lo..=hi` (see [`num`]).
    pub fn num(&mut self, name: &str, lo: u64, hi: u64) -> Result<u64, String> {
        num(name, &self.value(name)?, lo, hi)
    }

    /// The current flag's value as an IP address.
    pub fn ip(&mut self, name: &str) -> Result<IpAddr, String> {
        let v = self.value(name)?;
        v.parse()
            .map_err(|_| format!("{name} expects an IP address, got {v:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn accepts_help_and_version_unless_they_are_a_value() {
        let takes = |t: &str| t == "--out";
        assert_eq!(
            early(&argv(&["-x", "--help"]), &takes),
            Ok(Some(Early::Help))
        );
        assert_eq!(early(&argv(&["--out", "-h"]), &takes), Ok(None));
        assert_eq!(early(&argv(&["--", "-V"]), &takes), Ok(None));
        assert_eq!(early(&argv(&["-V", "x"]), &takes), Ok(Some(Early::Version)));
        assert!(early(&argv(&["--version", "2"]), &takes)
            .unwrap_err()
            .contains("--rpcrdma-version 2"));
        assert!(early(&argv(&["--version=1"]), &takes).is_err());
    }

    #[test]
    fn rejects_output_files_that_cannot_be_written() {
        let p = |s: &str| Path::new(s).to_path_buf();
        assert!(check_out_file("--o", &p("/nonexistent/x")).is_err());
        assert!(check_out_file("--o", &p("/")).is_err());
        assert!(check_out_file("--o", &p("")).is_err());
        let ok = std::env::temp_dir().join(format!("rpcrdma-cli-{}", std::process::id()));
        assert_eq!(check_out_file("--o", &ok), Ok(()));
        assert!(!ok.exists(), "nothing created");
        assert!(check_cores("--cores", &[usize::MAX]).is_err());
        assert!(check_device("-d", "mlx5_0", ProviderKind::Soft)
            .unwrap_err()
            .contains("soft"));
        assert_eq!(check_device("-d", "soft", ProviderKind::Soft), Ok(()));
        assert_eq!(check_device("-d", "iwarp", ProviderKind::Iwarp), Ok(()));
        assert!(check_device("-d", "soft", ProviderKind::Iwarp).is_err());
    }

    #[test]
    fn accepts_inline_and_separate_values() {
        let a = argv(&["--port=7", "-c", "0x10", "host", "--bind", "10.0.0.1"]);
        let mut c = ArgCursor::new(&a);
        assert_eq!(c.next_name(), Some("--port"));
        assert_eq!(c.num("--port", 1, 65535), Ok(7));
        assert_eq!(c.next_name(), Some("-c"));
        assert_eq!(c.num("-c", 0, 100), Ok(16));
        assert_eq!(c.next_name(), Some("host"));
        assert_eq!(c.token(), "host");
        assert_eq!(c.next_name(), Some("--bind"));
        assert_eq!(c.ip("--bind"), Ok("10.0.0.1".parse().unwrap()));
        assert_eq!(c.next_name(), None);
    }

    #[test]
    fn rejects_missing_bad_and_out_of_range_values() {
        let a = argv(&["--port=0", "--count", "x", "--bind=nope", "--last"]);
        let mut c = ArgCursor::new(&a);
        c.next_name();
        assert_eq!(
            c.num("--port", 1, 65535),
            Err("--port 0: must be a number in 1..=65535".into())
        );
        c.next_name();
        assert_eq!(
            c.num("--count", 0, 9),
            Err("--count x: must be a number in 0..=9".into())
        );
        c.next_name();
        assert!(c
            .ip("--bind")
            .unwrap_err()
            .contains("expects an IP address"));
        c.next_name();
        assert_eq!(c.value("--last"), Err("--last needs a value".into()));
    }
}
