//! The log subscriber every binary installs ([`init`]): the libraries' `tracing` events
//! (docs/observability.md, "Logs") written to stderr, filtered by `RUST_LOG`.
//!
//! Normal operation: `RUST_LOG` holds `tracing-subscriber` `EnvFilter` directives (`info`,
//! `rpcrdma_poller=debug,warn`, ...), the same syntax as `env_logger`'s; without it, or when
//! empty, the binary's default level applies (`info` for `rpcrdma-nfsd`, `warn` for the tools,
//! whose stdout is their report and stays what it was). Lines go to stderr with a timestamp, the
//! level, the target (the emitting module) and the fields; colours only on a terminal and never
//! with `NO_COLOR` set. Under systemd (`JOURNAL_STREAM` names the stderr stream: systemd.exec(5))
//! a line has no timestamp and no colours — journald stamps it — and starts with the
//! `<N>` syslog priority prefix journald reads as the entry's priority (sd-daemon(3)), so
//! `journalctl -p warning` selects the warnings.
//!
//! Recovery: directives that do not parse are skipped (the valid ones apply); a second
//! [`init`] in the process, or one after a subscriber was set elsewhere, changes nothing.

use std::io::IsTerminal;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Installs the process's subscriber: events to stderr, filtered by `RUST_LOG` or else
/// `default` (a directive such as `info` or `warn`). Call it first thing in `main`.
pub fn init(default: &str) {
    let rust_log = std::env::var("RUST_LOG").unwrap_or_default();
    let directives = if rust_log.trim().is_empty() {
        default
    } else {
        rust_log.as_str()
    };
    let journal = stderr_is_journal();
    let ansi =
        !journal && std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing::subscriber::set_global_default(subscriber(
        directives,
        journal,
        ansi,
        std::io::stderr,
    ));
}

/// The subscriber [`init`] installs, writing to `w` (tests give a buffer).
pub fn subscriber<W>(
    directives: &str,
    journal: bool,
    ansi: bool,
    w: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = EnvFilter::builder().parse_lossy(directives);
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(w)
        .with_ansi(ansi);
    if journal {
        let fmt = Journald(tracing_subscriber::fmt::format().without_time());
        Box::new(b.event_format(fmt).finish())
    } else {
        Box::new(b.finish())
    }
}

/// True when `JOURNAL_STREAM` (`DEVICE:INODE`, set by systemd for a unit whose output goes
/// to the journal) names this process's stderr: the variable alone may be inherited by a
/// child whose stderr was redirected elsewhere.
fn stderr_is_journal() -> bool {
    let Ok(v) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    // SAFETY: `stat` is plain old data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes the stat of descriptor 2 into `st`, which it may fully overwrite.
    if unsafe { libc::fstat(2, &mut st) } != 0 {
        return false;
    }
    v == format!("{}:{}", st.st_dev, st.st_ino)
}

/// The syslog priority journald reads from a line's `<N>` prefix (sd-daemon(3)).
pub fn journal_priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// The default line format (without the time) behind a `<N>` priority prefix.
struct Journald(Format<tracing_subscriber::fmt::format::Full, ()>);

impl<S, N> FormatEvent<S, N> for Journald
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        write!(w, "<{}>", journal_priority(event.metadata().level()))?;
        self.0.format_event(ctx, w, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    fn lines(directives: &str, journal: bool) -> String {
        let buf = Buf::default();
        let sub = subscriber(directives, journal, false, buf.clone());
        tracing::subscriber::with_default(sub, || {
            tracing::error!(peer = "10.0.0.9:1", "an error");
            tracing::warn!("a warning");
            tracing::info!("news");
            tracing::debug!("details");
        });
        let out = buf.0.lock().unwrap().clone();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn accepts_the_default_level_and_rust_log_directives() {
        let s = lines("warn", false);
        assert!(
            s.contains("an error") && s.contains("peer=\"10.0.0.9:1\""),
            "{s}"
        );
        assert!(s.contains("a warning") && !s.contains("news"), "{s}");
        let s = lines("rpcrdma_apps=debug", false);
        assert!(s.contains("details") && s.contains("news"), "{s}");
        // A directive that does not parse is skipped; the valid one applies.
        let s = lines("error,=[", false);
        assert!(s.contains("an error") && !s.contains("a warning"), "{s}");
    }

    #[test]
    fn accepts_journald_lines_with_priority_and_without_time() {
        let s = lines("info", true);
        let l: Vec<&str> = s.lines().collect();
        assert_eq!(l.len(), 3, "{s}");
        assert!(l[0].starts_with("<3>") && l[0].contains("ERROR"), "{s}");
        assert!(l[1].starts_with("<4>") && l[1].contains("WARN"), "{s}");
        assert!(l[2].starts_with("<6>") && l[2].contains("INFO"), "{s}");
        assert!(!s.contains('\u{1b}'), "no colours: {s}");
        // Without journald each line starts with an RFC 3339 timestamp (a year).
        let s = lines("info", false);
        assert!(s.lines().all(|l| l.starts_with("20")), "{s}");
    }
}
