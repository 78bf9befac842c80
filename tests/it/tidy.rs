//! The house rules that `docs/design.md` states, read off the source:
//! every invariant it states names a test that exists,
//! no two top-level modules of the library import each other (directly
//! or around a circle), and no source file of the library, the command
//! line, the migrations or the test kit grows past 400 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file, in lines.
const MAX_LINES: usize = 400;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, by path relative to the repository.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `internal/` belongs to.
fn module_of(rel: &Path) -> String {
    let first = rel.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// Which top-level modules each one names (`crate::x`, or `x` inside
/// `use crate::{…}`).
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let lib = root().join("internal");
    let mut files = Vec::new();
    sources(&lib, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(&lib).unwrap()))
        .filter(|m| m != "lib")
        .collect();
    let path = regex::Regex::new(r"crate::(\w+)").unwrap();
    let group = regex::Regex::new(r"use crate::\{([^}]*)\}").unwrap();
    let word = regex::Regex::new(r"\w+").unwrap();
    let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = module_of(f.strip_prefix(&lib).unwrap());
        if from == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let named = path.captures_iter(&text).map(|c| c[1].to_string()).chain(
            group.captures_iter(&text).flat_map(|c| {
                word.find_iter(&c[1])
                    .map(|w| w.as_str().to_string())
                    .collect::<Vec<_>>()
            }),
        );
        for to in named {
            if to != from && modules.contains(&to) {
                arrows.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    arrows
}

/// A path of arrows from `from` back to `to`, if there is one.
fn path_back(
    arrows: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if from == to {
        return Some(vec![to.to_string()]);
    }
    if !seen.insert(from.to_string()) {
        return None;
    }
    for next in arrows.get(from).into_iter().flatten() {
        if let Some(mut rest) = path_back(arrows, next, to, seen) {
            rest.insert(0, from.to_string());
            return Some(rest);
        }
    }
    None
}

#[test]
fn no_module_imports_another_around_a_circle() {
    let arrows = imports();
    assert!(arrows.len() > 20, "the modules were not found: {arrows:?}");
    let mut circles = Vec::new();
    for (from, tos) in &arrows {
        for to in tos {
            if let Some(back) = path_back(&arrows, to, from, &mut BTreeSet::new()) {
                circles.push(format!("{from} -> {}", back.join(" -> ")));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules of internal/ import each other around a circle (move the shared \
         values below both, as config, rate and validate hold values):\n{}",
        circles.join("\n")
    );
}

#[test]
fn no_source_file_grows_past_the_limit() {
    let mut files = Vec::new();
    for dir in ["internal", "cmd", "migrations/src", "testkit/src"] {
        sources(&root().join(dir), &mut files);
    }
    assert!(files.len() > 100, "the sources were not found");
    let long: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().lines().count() > MAX_LINES)
        .map(|f| {
            f.strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .to_string()
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines: {long:?}; split each by what its parts do"
    );
}

#[test]
fn the_command_line_writes_no_sql() {
    let mut files = Vec::new();
    sources(&root().join("cmd"), &mut files);
    assert!(files.len() > 5, "the command line was not found");
    let sql = regex::Regex::new(r#""\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP) "#).unwrap();
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let rel = f.strip_prefix(root()).unwrap().display().to_string();
            sql.find_iter(&text)
                .map(|m| format!("{rel}: {}", m.as_str()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "the command line writes SQL (it belongs in the library's store): {found:?}"
    );
}

/// Whether `module::test` names a function `test` in a file of `tests/`
/// or `internal/` whose name, or one of whose folders, is `module`.
fn resolves(name: &str, files: &[PathBuf]) -> bool {
    let Some((module, test)) = name.rsplit_once("::") else {
        return false;
    };
    let module = module.rsplit("::").next().unwrap_or(module);
    let def = regex::Regex::new(&format!(r"fn {test}\b")).unwrap();
    files.iter().any(|f| {
        let named = f
            .components()
            .any(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs") == module);
        named && def.is_match(&std::fs::read_to_string(f).unwrap())
    })
}

#[test]
fn every_invariant_of_the_design_names_a_test_that_holds_it() {
    let design = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
    let mut files = Vec::new();
    for dir in ["tests", "internal"] {
        sources(&root().join(dir), &mut files);
    }
    let named = regex::Regex::new(r"`([a-z_0-9]+(?:::[a-z_0-9]+)+)`").unwrap();
    let mut unheld = Vec::new();
    let mut count = 0;
    for para in design.split("\n\n").filter(|p| p.contains("*Invariant")) {
        count += 1;
        let held = para.split("Held by").nth(1).unwrap_or("");
        let tests: Vec<&str> = named
            .captures_iter(held)
            .map(|c| c.get(1).unwrap().as_str())
            .collect();
        let start: String = para.chars().take(80).collect();
        if tests.is_empty() {
            unheld.push(format!("no \"Held by `module::test`\": {start}…"));
        }
        for t in tests.into_iter().filter(|t| !resolves(t, &files)) {
            unheld.push(format!("{t} is no test: {start}…"));
        }
    }
    assert!(count >= 20, "the invariants were not found");
    assert!(unheld.is_empty(), "{}", unheld.join("\n"));
}

#[test]
fn the_drivers_build_statements_and_the_store_runs_them() {
    let mut files = Vec::new();
    sources(&root().join("internal/store/driver"), &mut files);
    assert!(files.len() > 8, "the drivers were not found");
    let store = regex::Regex::new(r"\bStore\b").unwrap();
    let running: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| store.is_match(l))
        })
        .map(|f| f.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    assert!(
        running.is_empty(),
        "driver files that run statements through the store (build them in the driver, run them in the store): {running:?}"
    );
}

/// `config` stands only on leaves (and the crate's `Error`, which every
/// module returns): a module that acts on a setting imports config, never
/// the other way.
#[test]
fn config_is_a_leaf_of_plain_values() {
    let arrows = imports();
    let leaves: BTreeSet<String> = ["printable", "rate", "status", "validate"]
        .into_iter()
        .map(String::from)
        .collect();
    let config = arrows.get("config").cloned().unwrap_or_default();
    let above: Vec<&String> = config
        .difference(&leaves)
        .filter(|m| *m != "error")
        .collect();
    assert!(
        above.is_empty(),
        "config names {above:?}: move the values it needs into config (its values \
         module), below the modules that act on them"
    );
    for leaf in &leaves {
        let named = arrows.get(leaf.as_str()).cloned().unwrap_or_default();
        assert!(
            named.is_subset(&leaves),
            "{leaf}, which config stands on, names {named:?}"
        );
    }
}
