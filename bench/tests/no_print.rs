//! The library crates (engine, mempool, poller) write nothing to stdout or stderr themselves:
//! what they have to say goes through the `tracing` facade (docs/observability.md, "Logs"),
//! which the embedding application routes or silences. The check reads their sources (comments,
//! inline `#[cfg(test)] mod tests { .. }` modules and test-only module files left out) and
//! fails on every `println!`, `eprintln!`, `print!`, `eprint!` or `dbg!` it finds.

mod source_scan;

use std::path::{Path, PathBuf};

use source_scan::{code, sources, test_only};

const MACROS: [&str; 5] = ["println!", "eprintln!", "print!", "eprint!", "dbg!"];

/// `file:line: text` of every print macro in the non-test code of the `.rs` files under `root`.
fn prints(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(root, &mut files);
    files.sort();
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !test_only(f)) {
        let text = std::fs::read_to_string(f).expect("read");
        for (i, line) in code(&text).lines().enumerate() {
            let named = MACROS.iter().any(|m| {
                line.match_indices(m).any(|(at, _)| {
                    // A whole name: not `eprintln!` matched as `println!`, nor `x_print!`.
                    !line[..at]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            });
            if named {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn rejects_print_macros_in_the_library_crates() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in ["engine", "mempool", "poller"] {
        let root: PathBuf = ws.join(krate).join("src");
        assert!(root.is_dir(), "{} is not a directory", root.display());
        found.extend(prints(&root));
    }
    assert!(
        found.is_empty(),
        "print macros in library code (log through `tracing` instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn accepts_the_checker_finding_planted_prints_and_skipping_tests() {
    let dir = std::env::temp_dir().join(format!("no-print-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).expect("mkdir");
    let w = |p: &str, s: &str| std::fs::write(dir.join(p), s).expect("write");
    w("lib.rs", "mod a;\nmod b;\n");
    // Found: after a test-module declaration, in a module file, in a nested block.
    w(
        "a/mod.rs",
        "#[cfg(test)]\nmod tests;\nfn f() {\n    if x { eprintln!(\"x\"); }\n}\n",
    );
    // Not found: the test-only file, a comment, an inline test module, a longer name.
    w("a/tests.rs", "fn t() { println!(\"t\"); }\n");
    w(
        "b.rs",
        "// println!(\"doc\")\nfn g() { my_print!(1); }\n#[cfg(test)]\nmod tests {\n fn h() { dbg!(1); }\n}\n",
    );
    let found = prints(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("a/mod.rs:4:"), "{found:?}");
}
