//! Reading the workspace's sources for the checks that scan them (`import_cycles.rs`,
//! `no_print.rs`, `code_shape.rs`): the `.rs` files of a tree, and a file's code without comments and without
//! its unit-test module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
pub fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments and without its inline unit-test module (`mod tests {`
/// after `#[cfg(test)]`; a test module in a file of its own is that file: see [`test_only`]).
pub fn code(text: &str) -> String {
    let cut = text.find("#[cfg(test)]\nmod tests {").unwrap_or(text.len());
    text[..cut]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// True when `file` is a module its parent declares under `#[cfg(test)]` (`mod tests;` in
/// `dir/mod.rs` or `dir.rs` for `dir/tests.rs`).
pub fn test_only(file: &Path) -> bool {
    let (Some(stem), Some(dir)) = (file.file_stem(), file.parent()) else {
        return false;
    };
    let decl = format!("#[cfg(test)]\nmod {};", stem.to_string_lossy());
    let parents = [
        dir.join("mod.rs"),
        dir.with_extension("rs"),
        dir.join("lib.rs"),
    ];
    parents
        .iter()
        .filter(|p| p.as_path() != file)
        .any(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains(&decl)))
}
