//! Deterministic cost benchmark (issue 15): instructions per RPC, counted by callgrind.
//!
//! `cost run --kind null|ddp|send [--warmup W] [--n N]` runs W + N calls of one kind through
//! the real client, server and soft provider on one reactor thread (`rpcrdma_bench::cost`), or
//! for `send` W + N bare soft SEND round trips on one thread (`rpcrdma_bench::cost::send`);
//! under `valgrind --tool=callgrind --collect-atstart=no` only the N measured ones are counted.
//! Natively it runs the same calls and checks every reply (the test suite does, with N = 50).
//! `--window W` keeps W calls in flight instead of one (null and ddp; not budgeted).
//!
//! `cost analyze --file callgrind.out.X --kind K --n N [--budget FILE] [--top T]` splits the
//! counted instructions per RPC into client, server, provider, application and runtime
//! (`rpcrdma_bench::cost::profile`), prints the top T functions by self and by inclusive cost
//! (markdown), and with `--budget` exits 1 when the total per RPC is more than the budget's
//! `tolerance_percent` above the budget for K. Normal use: scripts/cost.sh.

use std::process::ExitCode;

use rpcrdma_apps::cli;
use rpcrdma_bench::cli::Flags;
use rpcrdma_bench::cost::profile::{budget_value, Profile, BUCKETS};
use rpcrdma_bench::cost::{run_window, Kind};

const USAGE: &str = "usage: cost run --kind null|ddp|send [--warmup W] [--n N] [--window W]
       cost analyze --file F --kind K --n N [--budget B] [--top T]
  run        W + N calls of one kind (only the N are counted under callgrind)
  analyze    instructions per RPC from a callgrind file, checked against a budget
  --kind K   null, ddp or send
  --warmup W warm-up calls, 0..=10000000 [200]
  --n N      measured calls, 1..=100000000 [2000]
  --window W calls in flight (null, ddp), 1..=1024 [1]
  --file F   the callgrind output
  --budget B the budget file (fails above it)
  --top T    functions listed, 1..=1000 [20]
  -h, --help     this text
  -V, --version  the program's version
";

fn kind(f: &Flags) -> Result<Kind, String> {
    f.value("--kind")
        .and_then(Kind::parse)
        .ok_or_else(|| "--kind null|ddp|send is required".to_string())
}

fn cmd_run(f: &Flags) -> Result<bool, String> {
    let k = kind(f)?;
    let warmup = f.number("--warmup", 0, 10_000_000).unwrap_or(200);
    let n = f.number("--n", 1, 100_000_000).unwrap_or(2000);
    let window = f.number("--window", 1, 1024).unwrap_or(1);
    let out = run_window(k, warmup, n, window)?;
    println!(
        "cost run: kind {} warm-up {warmup} measured {n} window {window}: {} replies right, {} wrong or failed",
        k.name(),
        out.ok,
        out.bad
    );
    Ok(out.bad == 0 && out.ok == warmup.max(1) + n)
}

fn cmd_analyze(flags: &Flags) -> Result<bool, String> {
    let k = kind(flags)?;
    let n = flags.number("--n", 1, 100_000_000).unwrap_or(2000);
    let top = flags.number("--top", 1, 1000).unwrap_or(20) as usize;
    let file = flags.value("--file").ok_or("--file is required")?;
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let p = Profile::parse(&text)?;
    let s = p.split();
    let per = |x: f64| x / n as f64;
    let total = per(p.total as f64);
    let unit = k.unit();
    println!(
        "\n### {} {unit}: {total:.0} instructions per {unit} ({n} counted)\n",
        k.name()
    );
    println!("| bucket | instructions per {unit} | share |\n|---|---:|---:|");
    for (b, v) in BUCKETS.iter().zip(s.buckets) {
        println!(
            "| {b} | {:.0} | {:.1} % |",
            per(v),
            100.0 * v / p.total.max(1) as f64
        );
    }
    // Thread and process start-up frames (whose inclusive cost is the whole run) say nothing.
    let wrapper = |n: &str| {
        [
            "clone",
            "start_thread",
            "std::sys",
            "<std::sys",
            "core::ops::function::FnOnce",
            "std::rt::",
            "(below main)",
            "__libc_start",
            "0x",
            "cost::main",
        ]
        .iter()
        .any(|w| n.starts_with(w))
            || n == "main"
    };
    let mut f: Vec<_> = s
        .functions
        .iter()
        .filter(|x| !wrapper(&x.0))
        .cloned()
        .collect();
    for (title, by_self) in [("self", true), ("inclusive", false)] {
        f.sort_by_key(|x| std::cmp::Reverse(if by_self { x.1 } else { x.2 }));
        println!("\nTop {top} functions by {title} cost ({}):\n", k.name());
        println!("| function | self / {unit} | inclusive / {unit} |\n|---|---:|---:|");
        for (name, se, inc) in f.iter().take(top) {
            let short: String = name.replace("rpcrdma_", "").chars().take(160).collect();
            println!(
                "| `{}` | {:.0} | {:.0} |",
                short.replace('|', "\\|"),
                per(*se as f64),
                per(*inc as f64)
            );
        }
    }
    let Some(bfile) = flags.value("--budget") else {
        return Ok(true);
    };
    let btext = std::fs::read_to_string(bfile).map_err(|e| format!("{bfile}: {e}"))?;
    let budget = budget_value(&btext, k.name()).ok_or(format!("{bfile}: no {}", k.name()))?;
    let tol = budget_value(&btext, "tolerance_percent").unwrap_or(3);
    let limit = budget as f64 * (1.0 + tol as f64 / 100.0);
    let ok = total <= limit;
    println!(
        "\nBUDGET {}: {total:.0} instructions per {unit}, budget {budget} + {tol} % = {limit:.0}: {}",
        k.name(),
        if ok { "ok" } else { "OVER BUDGET" }
    );
    Ok(ok)
}

fn main() -> ExitCode {
    let mut argv = std::env::args();
    let prog = cli::prog_name(argv.next().as_deref(), "cost");
    let args: Vec<String> = argv.collect();
    let r = match args.split_first() {
        Some((cmd, rest)) if cmd == "run" => {
            let f = Flags::from_args(prog.clone(), rest.to_vec(), USAGE, &RUN_FLAGS);
            cmd_run(&f)
        }
        Some((cmd, rest)) if cmd == "analyze" => {
            let f = Flags::from_args(prog.clone(), rest.to_vec(), USAGE, &ANALYZE_FLAGS);
            cmd_analyze(&f)
        }
        _ => {
            if let Some(code) = cli::start(&prog, &args, &|_| false, USAGE) {
                return code;
            }
            return cli::usage_error(&prog, "give run or analyze");
        }
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => cli::usage_error(&prog, &e),
    }
}

/// The flags of `cost run`.
const RUN_FLAGS: [&str; 4] = ["--kind", "--warmup", "--n", "--window"];
/// The flags of `cost analyze`.
const ANALYZE_FLAGS: [&str; 5] = ["--kind", "--n", "--file", "--budget", "--top"];
