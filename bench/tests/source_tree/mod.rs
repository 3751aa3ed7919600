//! The workspace's Rust sources, for the checks that read them as text (`import_cycles.rs`,
//! `code_shape.rs`).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively (none when `dir` does not exist).
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
