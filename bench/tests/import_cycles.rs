//! No import cycle between the modules of any crate of the workspace (docs/architecture.md).
//!
//! A module is a source file (`a/b.rs` and `a/b/mod.rs` are `a::b`). It imports another when
//! its code (comments and `#[cfg(test)] mod tests` left out) names `crate::x::y…` or
//! `super::x…`, resolved to the longest module path that exists; a module's own children and
//! parents count like any other module. The check fails on every strongly connected group of
//! more than one module, listing it.

mod source_scan;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use source_scan::{code, sources};

/// The module path of `file` under `root` (`lib.rs`, `main.rs` and `mod.rs` name their
/// directory).
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("under the root");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts
}

/// The paths `code` names that start with `crate::` (`(0, rest)`) or with `k` times
/// `super::` (`(k, rest)`).
fn named_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find(['c', 's']).map(|i| at + i) {
        at = i + 1;
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
            continue;
        }
        let path: String = code[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let segs: Vec<&str> = path.split("::").collect();
        let supers = segs.iter().take_while(|s| **s == "super").count();
        let (k, rest) = match segs.first() {
            Some(&"crate") if segs.len() > 1 => (0, &segs[1..]),
            Some(&"super") if segs.len() > supers => (supers, &segs[supers..]),
            _ => continue,
        };
        at = i + path.len();
        let rest = rest.iter().filter(|s| !s.is_empty()).map(|s| s.to_string());
        out.push((k, rest.collect()));
    }
    out
}

/// The longest prefix of `path` that is a module of `mods`.
fn resolve(mods: &BTreeSet<Vec<String>>, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|k| path[..k].to_vec())
        .find(|m| mods.contains(m))
}

/// The import graph of the crate whose sources are under `root`.
fn graph(root: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let mods: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(root, f)).collect();
    let mut g = BTreeMap::new();
    for f in &files {
        let me = module_of(root, f);
        let text = code(&std::fs::read_to_string(f).expect("read a source file"));
        let mut deps = BTreeSet::new();
        for (supers, p) in named_paths(&text) {
            // `super` of `a::b` (a/b.rs or a/b/mod.rs) is `a`; `crate` is the root.
            let base = if supers == 0 {
                &[][..]
            } else {
                &me[..me.len().saturating_sub(supers)]
            };
            let full: Vec<String> = base.iter().cloned().chain(p).collect();
            deps.extend(resolve(&mods, &full));
        }
        deps.remove(&me);
        deps.remove(&Vec::new());
        g.insert(me, deps);
    }
    g
}

/// Strongly connected groups of more than one module (Tarjan).
fn cycles(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<String>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a Vec<String>) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let Some((w, _)) = self.g.get_key_value(w) else {
                    continue;
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let m = self.low[v].min(self.low[w]);
                    self.low.insert(v, m);
                } else if self.on.contains(w) {
                    let m = self.low[v].min(self.index[w]);
                    self.low.insert(v, m);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    group.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.out.push(group);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn rejects_import_cycles_in_every_crate() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in ["engine", "mempool", "poller", "apps", "bench"] {
        let root = ws.join(krate).join("src");
        assert!(root.is_dir(), "{} is not a directory", root.display());
        for c in cycles(&graph(&root)) {
            found.push(format!("{krate}: {}", c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn accepts_the_checker_finding_a_planted_cycle() {
    let dir = std::env::temp_dir().join(format!("import-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).expect("mkdir");
    let w = |p: &str, s: &str| std::fs::write(dir.join(p), s).expect("write");
    // a::x <-> b is a cycle; a -> c -> a is not (c names a in a comment and in its tests)
    w("lib.rs", "mod a;\nmod b;\nmod c;\n");
    w("a/mod.rs", "mod x;\nuse crate::c::C;\n");
    w("a/x.rs", "use super::super::b::B;\n");
    w("b.rs", "use crate::a::x::X;\n");
    w(
        "c.rs",
        "pub struct C; // crate::a\n#[cfg(test)]\nmod tests {\n use crate::a::A;\n}\n",
    );
    let found = cycles(&graph(&dir));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found, vec![vec!["a::x".to_string(), "b".into()]]);
}
