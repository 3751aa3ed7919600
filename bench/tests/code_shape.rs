//! Size limits on the workspace's Rust sources (docs/architecture.md, "Code shape"): no file
//! over [`MAX_FILE_LINES`] lines and no function over [`MAX_FN_LINES`] lines, in every crate's
//! `src/`, `tests/`, `benches/` and `examples/` and in the fuzz targets.
//!
//! A function runs from the line of its `fn` keyword to the line of the brace that closes its
//! body; comments, string and character literals are blanked first so that braces inside them
//! do not count. Declarations without a body (trait methods, `extern` items) are not functions
//! here.

mod source_scan;

use source_scan::sources;
use std::path::{Path, PathBuf};

/// The longest source file allowed, in lines.
const MAX_FILE_LINES: usize = 1200;
/// The longest function allowed, in lines.
const MAX_FN_LINES: usize = 150;

/// The workspace's source files.
fn workspace_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for krate in ["engine", "mempool", "poller", "apps", "bench"] {
        for dir in ["src", "tests", "benches", "examples"] {
            sources(&root.join(krate).join(dir), &mut out);
        }
    }
    sources(&root.join("fuzz/fuzz_targets"), &mut out);
    assert!(out.len() > 100, "found only {} source files", out.len());
    out.sort();
    out
}

/// Length of the raw-string opener at `b[i..]` (`r"`, `r#"`, `br##"`, ...) and its number
/// of `#`, when `b[i]` starts one.
fn raw_string_open(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    (b.get(j) == Some(&b'"')).then_some((j + 1 - i, hashes))
}

/// `text` with comments and the contents of string and character literals replaced by
/// spaces (newlines kept, so line numbers hold).
fn blank(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            wipe(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            wipe(&mut out, i, j);
            i = j;
        } else if let Some((open, hashes)) = raw_string_open(b, i) {
            let mut close = vec![b'#'; hashes + 1];
            close[0] = b'"';
            let body = i + open;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |n| body + n + close.len());
            wipe(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            wipe(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            i = char_literal_end(text, i)
                .inspect(|&end| wipe(&mut out, i, end))
                .unwrap_or(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The end of the character literal starting at the quote `text[i]`, or `None` when the
/// quote starts a lifetime or label.
fn char_literal_end(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(i + 1) == Some(&b'\\') {
        let close = b[i + 2..].iter().position(|&c| c == b'\'')?;
        return Some(i + 2 + close + 1 + usize::from(close == 0));
    }
    let c = text[i + 1..].chars().next()?;
    let after = i + 1 + c.len_utf8();
    (b.get(after) == Some(&b'\'')).then_some(after + 1)
}

/// Every function in `text` longer than `max` lines: (first line, lines, name).
fn long_functions(text: &str, max: usize) -> Vec<(usize, usize, String)> {
    let code = blank(text);
    let line_at = |pos: usize| code[..pos].iter().filter(|&&c| c == b'\n').count() + 1;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(n) = code[at..].windows(3).position(|w| w == b"fn ") {
        let start = at + n;
        at = start + 3;
        if start > 0 && ident(code[start - 1]) {
            continue;
        }
        let name: String = code[at..]
            .iter()
            .take_while(|&&c| ident(c))
            .map(|&c| c as char)
            .collect();
        if name.is_empty() {
            continue;
        }
        let Some(open) = code[at..].iter().position(|&c| c == b'{' || c == b';') else {
            break;
        };
        if code[at + open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut end = code.len();
        for (k, &c) in code[at + open..].iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + open + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let (first, last) = (line_at(start), line_at(end));
        if last - first + 1 > max {
            out.push((first, last - first + 1, name));
        }
    }
    out
}

#[test]
fn rejects_source_files_over_the_line_limit() {
    let mut long = Vec::new();
    for f in workspace_sources() {
        let lines = std::fs::read_to_string(&f)
            .expect("readable")
            .lines()
            .count();
        if lines > MAX_FILE_LINES {
            long.push(format!("{} ({lines} lines)", f.display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (split them by what they hold):\n{}",
        long.join("\n")
    );
}

#[test]
fn rejects_functions_over_the_line_limit() {
    let mut long = Vec::new();
    for f in workspace_sources() {
        let text = std::fs::read_to_string(&f).expect("readable");
        for (line, lines, name) in long_functions(&text, MAX_FN_LINES) {
            long.push(format!("{}:{line} fn {name} ({lines} lines)", f.display()));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn accepts_the_checker_measuring_planted_functions() {
    let body = "    let x = 1;\n".repeat(10);
    let text = format!(
        "// fn in_comment() {{\nfn short() {{\n{body}}}\n\
         trait T {{ fn decl(&self); }}\n\
         pub(crate) fn braces_in_literals() {{\n    let s = \"}}}}\"; let c = '}}'; let r = r#\"{{\"#;\n\
         {body}    let l: &'static str = s; /* }} */\n}}\n\
         fn after() {{\n{body}}}\n"
    );
    let found = long_functions(&text, 5);
    let names: Vec<_> = found.iter().map(|(l, n, s)| (*l, *n, s.as_str())).collect();
    assert_eq!(
        names,
        [
            (2, 12, "short"),
            (15, 14, "braces_in_literals"),
            (29, 12, "after")
        ]
    );
    assert!(long_functions(&text, 14).is_empty());
}
