//! The repository speaks to its users: no text names files a user does not have (development
//! notes and a shared tree outside the repository, listed in [`offences`]) or an absolute path
//! of the machine it was written on. Scans README.md, .ci/run, docs/, scripts/, examples/,
//! vendor/ and every crate's sources and tests (this file excepted: it lists the names).

use std::path::{Path, PathBuf};

/// Every text file under `dir` with one of the extensions that carry prose or code.
fn texts(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                texts(&p, out);
            }
        } else if ["rs", "md", "sh", "toml", "txt", "service"]
            .iter()
            .any(|x| p.extension().is_some_and(|e| e == *x))
        {
            out.push(p);
        }
    }
}

/// The places in `text` that name something a user does not have.
fn offences(text: &str) -> Vec<String> {
    // Spelled in two pieces so that this file does not match itself.
    let words: [(&str, &str); 5] = [
        ("../sha", "red"),
        ("FACTS", ".md"),
        ("COMMON", ".md"),
        ("NOTES", ".md"),
        ("/wo", "rk/"),
    ];
    let mut out = Vec::new();
    for (a, b) in words {
        let name = format!("{a}{b}");
        if text.contains(&name) {
            out.push(name);
        }
    }
    out
}

#[test]
fn rejects_references_to_files_users_do_not_have() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md"), root.join(".ci/run")];
    for d in ["docs", "scripts", "examples", "vendor"] {
        texts(&root.join(d), &mut files);
    }
    for krate in ["engine", "mempool", "poller", "apps", "bench", "fuzz"] {
        texts(&root.join(krate), &mut files);
    }
    assert!(files.len() > 200, "found only {} files", files.len());
    let mut bad = Vec::new();
    let me = Path::new(file!()).file_name();
    for f in &files {
        if f.file_name() == me && f.parent().is_some_and(|d| d.ends_with("tests")) {
            continue;
        }
        let Ok(t) = std::fs::read_to_string(f) else {
            continue;
        };
        for o in offences(&t) {
            bad.push(format!("{}: names {o}", f.display()));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn accepts_the_scan_finding_a_planted_reference() {
    let planted = format!("see {}{} for the facts", "FACTS", ".md");
    assert_eq!(offences(&planted), [format!("{}{}", "FACTS", ".md")]);
    assert!(offences("RFC 8166 section 4").is_empty());
}
