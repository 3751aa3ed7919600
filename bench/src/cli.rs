//! The small command line of the bench binaries: `--name VALUE` flags (numbers checked against
//! a range, output files checked before the run), `--help` and `--version`, on the workspace's
//! shared command-line layer (`rpcrdma_apps::cli`).
//!
//! Normal operation: [`Flags::new`] answers `--help` / `--version` and refuses any `--flag` the
//! binary does not know, [`Flags::number`] reads a flag's number, [`Flags::out_file`] a file
//! the run will write. Recovery: a bad command line prints the reason in one line and where the
//! help is, and exits with status 2 (nothing runs).

use rpcrdma_apps::cli;

/// A binary's arguments and its usage text.
pub struct Flags {
    prog: String,
    args: Vec<String>,
}

impl Flags {
    /// The process's arguments after the program name; see [`Flags::from_args`].
    pub fn new(usage: &'static str, known: &[&str]) -> Flags {
        let mut argv = std::env::args();
        let prog = cli::prog_name(argv.next().as_deref(), "bench");
        Flags::from_args(prog, argv.collect(), usage, known)
    }

    /// `args` of `prog` (every flag in `known` takes a value): exits 0 after printing the help
    /// or the version, 2 on an unknown flag or a flag without its value.
    pub fn from_args(
        prog: String,
        args: Vec<String>,
        usage: &'static str,
        known: &[&str],
    ) -> Flags {
        if let Some(code) = cli::start(&prog, &args, &|t| known.contains(&t), usage) {
            exit(code);
        }
        let f = Flags { prog, args };
        let mut i = 0;
        while i < f.args.len() {
            let a = f.args[i].as_str();
            if known.contains(&a) {
                if i + 1 >= f.args.len() {
                    f.fail(&format!("{a} needs a value"));
                }
                i += 2;
            } else {
                f.fail(&format!("unknown argument {a:?}"));
            }
        }
        f
    }

    /// The value after `name`, if the flag is given (the last one wins).
    pub fn value(&self, name: &str) -> Option<&str> {
        let i = self.args.iter().rposition(|a| a == name)?;
        self.args.get(i + 1).map(String::as_str)
    }

    /// The number after `name`, if the flag is given; exits 2 when it is not a number in
    /// `lo..=hi` (the message names the range).
    pub fn number(&self, name: &str, lo: u64, hi: u64) -> Option<u64> {
        let v = self.value(name)?;
        Some(cli::num(name, v, lo, hi).unwrap_or_else(|e| self.fail(&e)))
    }

    /// The file after `name`, if given; exits 2 when it cannot be written (nothing is created).
    pub fn out_file(&self, name: &str) -> Option<String> {
        let v = self.value(name)?;
        if let Err(e) = cli::check_out_file(name, std::path::Path::new(v)) {
            self.fail(&e);
        }
        Some(v.to_string())
    }

    /// Exits 2 with `why`.
    pub fn fail(&self, why: &str) -> ! {
        exit(cli::usage_error(&self.prog, why))
    }
}

/// Ends the process with `code` (an `ExitCode` from the shared layer; output is flushed).
fn exit(code: std::process::ExitCode) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let n = if code == std::process::ExitCode::SUCCESS {
        0
    } else {
        i32::from(cli::USAGE_EXIT)
    };
    std::process::exit(n)
}
