//! The library's layering, checked on its source: the core never reaches up
//! into the HTTP layer, the layout's names sit below both the URIs and the
//! identity, and what retrieval routes share comes from `retrieval`, not
//! from the `find` primitive. ARCHITECTURE.md states these as invariants.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The code lines of `path` (comments and doc comments left out) with
/// their numbers.
fn code_lines(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().enumerate().map(|(i, l)| (i + 1, l.trim().to_owned())).filter(|(_, l)| !l.starts_with("//")).collect()
}

fn library() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/src")
}

/// `(file, line, text)` of every code line of `files` that mentions any of
/// `needles`.
fn mentions(files: &[PathBuf], needles: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        for (n, line) in code_lines(file) {
            if needles.iter().any(|needle| line.contains(needle)) {
                found.push(format!("{}:{n}: {line}", file.display()));
            }
        }
    }
    found
}

#[test]
fn the_core_never_imports_the_http_layer() {
    let api = library().join("api");
    let core: Vec<PathBuf> = sources(&library()).into_iter().filter(|p| !p.starts_with(&api)).collect();
    assert!(core.len() > 20, "the core's files were found: {core:?}");
    let found = mentions(&core, &["crate::api", "super::api"]);
    assert!(found.is_empty(), "the core imports `api`:\n{}", found.join("\n"));
}

#[test]
fn uris_and_identities_do_not_import_each_other() {
    // `identity` builds on `uri` (a caller's visible roots are URIs); `uri`
    // takes the account's name from `names`, below both.
    let lib = library();
    let found = [
        mentions(&[lib.join("uri.rs")], &["crate::identity"]),
        mentions(&[lib.join("names.rs")], &["crate::uri", "crate::identity"]),
    ]
    .concat();
    assert!(found.is_empty(), "a cycle between uri, identity and names:\n{}", found.join("\n"));
}

#[test]
fn the_retrieval_toolkit_is_borrowed_from_retrieval_not_find() {
    let files = sources(&library());
    let toolkit = ["RetrievalError", "checked_index", "authorize_targets", "embed_queries", "vectors_for"];
    let mut found = Vec::new();
    for file in &files {
        for (n, line) in code_lines(file) {
            if line.contains("crate::find::") && toolkit.iter().any(|t| line.contains(t)) {
                found.push(format!("{}:{n}: {line}", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "the retrieval toolkit taken from `find`:\n{}", found.join("\n"));
}

/// The limits that keep the house readable: `BENCHMARKS.md` holds current
/// figures only (at most 25 KB; history is in git), and the search route's
/// module parses and serialises only (at most 350 lines).
#[test]
fn the_readers_limits_hold() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let benchmarks = std::fs::metadata(root.join("BENCHMARKS.md")).expect("BENCHMARKS.md").len();
    assert!(benchmarks <= 25 * 1024, "BENCHMARKS.md is {benchmarks} bytes, over 25 KB");
    let search = std::fs::read_to_string(library().join("api/search.rs")).expect("api/search.rs");
    let lines = search.lines().count();
    assert!(lines <= 350, "shared/src/api/search.rs is {lines} lines, over 350");
}
