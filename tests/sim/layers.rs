//! The layers of docs/ARCHITECTURE.md, checked on the source: every `crate::` path in a
//! top-level module of `src/` names a module of its own layer or a lower one (unit tests
//! apart: a test may use the whole crate). A new module must be placed in the table below,
//! as in the document; an upward import fails here with the file that makes it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, lowest first: each module imports only from its own layer and those below.
const LAYERS: &[&[&str]] = &[
    &["error", "sync", "access", "hazard"],
    &["backend"],
    &["track"],
    &["completion_thread"],
    &["trace", "reaper", "host_cache"],
    &["device"],
    &["completion"],
    &["recorder"],
    &["memory"],
    &["peer"],
    &["libs"],
    &["graph"],
    &["lane"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules `lib.rs` declares, and the crate-root re-exports (name → module).
fn crate_root() -> (BTreeSet<String>, Vec<(String, String)>) {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap_or_default();
    let mut mods = BTreeSet::new();
    let mut reexports = Vec::new();
    for line in lib.lines().map(str::trim) {
        let line = line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub ")).unwrap_or(line);
        if let Some(m) = line.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
            mods.insert(m.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("use ") {
            let (top, names) = rest.split_once("::").unwrap_or(("", ""));
            for name in names.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|n| !n.is_empty()) {
                reexports.push((name.to_string(), top.to_string()));
            }
        }
    }
    (mods, reexports)
}

/// `text` without comments and string literals (which may spell paths that import nothing).
fn strip(text: &str) -> String {
    let (b, mut out, mut i) = (text.as_bytes(), String::with_capacity(text.len()), 0);
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' && (i == 0 || b[i - 1] != b'\'') {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// `text` without its `#[cfg(test)] mod name { .. }` blocks.
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let head = after.trim_start();
        let is_block = head.starts_with("mod ") || head.starts_with("pub(crate) mod ");
        match (is_block, after.find('{'), after.find(';')) {
            (true, Some(open), semi) if semi.is_none_or(|s| s > open) => {
                let mut depth = 0;
                let mut end = after.len();
                for (i, c) in after[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

/// The first segment of each path that starts at `text` (just after `crate::`).
fn first_segments(text: &str) -> Vec<String> {
    let ident = |s: &str| s.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    if !text.starts_with('{') {
        return vec![ident(text)];
    }
    let (mut depth, mut start, mut out) = (0, 1, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    out.push(ident(&text[start..i]));
                    break;
                }
            }
            ',' if depth == 1 => {
                out.push(ident(&text[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_imports_only_its_own_layer_and_those_below() {
    let (mods, reexports) = crate_root();
    assert!(mods.len() > 10, "lib.rs declares {} modules: the parse is broken", mods.len());
    let unplaced: Vec<_> = mods.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules in no layer (add them here and to docs/ARCHITECTURE.md): {unplaced:?}");
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut upward = Vec::new();
    let mut edges = 0;
    for path in files {
        let rel = path.strip_prefix(src()).unwrap_or(&path).to_string_lossy().replace('\\', "/");
        let top = rel.split('/').next().unwrap_or("").trim_end_matches(".rs").to_string();
        let (Some(from), false) = (layer_of(&top), rel.ends_with("tests.rs")) else { continue };
        let text = without_test_modules(&strip(&std::fs::read_to_string(&path).unwrap_or_default()));
        for (at, _) in text.match_indices("crate::") {
            for seg in first_segments(&text[at + "crate::".len()..]) {
                let target = if mods.contains(&seg) {
                    Some(seg.clone())
                } else {
                    reexports.iter().find(|(n, _)| *n == seg).map(|(_, m)| m.clone())
                };
                let Some(target) = target.filter(|t| *t != top) else { continue };
                edges += 1;
                if layer_of(&target).is_some_and(|to| to > from) {
                    upward.push(format!("{rel}: {top} (layer {}) -> {target}", from + 1));
                }
            }
        }
    }
    assert!(edges > 100, "only {edges} imports found: the parse is broken");
    assert!(upward.is_empty(), "imports that point up a layer:\n{}", upward.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    let text = strip("use crate::{error::Error, lane::Lane}; // crate::libs\nlet s = \"crate::device\";");
    let segs: Vec<_> = text.match_indices("crate::").flat_map(|(at, _)| first_segments(&text[at + 7..])).collect();
    assert_eq!(segs, ["error", "lane"]);
    let kept = without_test_modules("a\n#[cfg(test)]\nmod t { use crate::lane::Lane; { } }\nb");
    assert!(!kept.contains("lane") && kept.contains('a') && kept.contains('b'));
    assert!(layer_of("lane") > layer_of("track"));
}
