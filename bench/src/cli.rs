//! The small command line of the bench binaries (`soak`, `scale`): `--name N` numeric flags.
//!
//! Normal operation: [`Flags::new`] refuses any `--flag` the binary does not know, and
//! [`Flags::number`] reads a flag's number. Recovery: a bad command line prints the usage and
//! the reason and exits with status 2 (nothing runs).

/// A binary's arguments and its usage line.
pub struct Flags {
    args: Vec<String>,
    usage: &'static str,
}

impl Flags {
    /// The process's arguments; exits 2 when one is a `--flag` not in `known`.
    pub fn new(usage: &'static str, known: &[&str]) -> Flags {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if let Some(a) = args
            .iter()
            .find(|a| a.starts_with("--") && !known.contains(&a.as_str()))
        {
            eprintln!("{usage} (unknown option {a})");
            std::process::exit(2);
        }
        Flags { args, usage }
    }

    /// The number after `name`, if the flag is given; exits 2 when it is not a number.
    pub fn number(&self, name: &str) -> Option<u64> {
        let i = self.args.iter().position(|a| a == name)?;
        match self.args.get(i + 1).and_then(|v| v.parse().ok()) {
            Some(v) => Some(v),
            None => {
                eprintln!("{} ({name} needs a number)", self.usage);
                std::process::exit(2)
            }
        }
    }

    /// Exits 2 with the usage and `why`.
    pub fn fail(&self, why: &str) -> ! {
        eprintln!("{} ({why})", self.usage);
        std::process::exit(2)
    }
}
