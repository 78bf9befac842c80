//! The book (`docs/book`) and README against the code: the generated
//! reference is what the code generates, every relative link and anchor
//! resolves, and the hand-written pages name every command and flag.
//! Its examples run in `book_examples`.

use std::path::{Path, PathBuf};

use crate::cli::processor;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The fenced blocks of `lang` in `text`, in order.
pub fn blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let open = format!("```{lang}\n");
    text.split(open.as_str())
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .collect()
}

/// Every Markdown file of the book's sources, with its path.
fn pages() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(ROOT).join("docs/book/src"), &mut out);
    out.sort();
    out
}

#[test]
fn the_reference_is_what_the_code_generates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let o = processor(&["reference", "--out", out], "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let committed = Path::new(ROOT).join("docs/book/src/reference");
    for name in ["cli.md", "api.md", "metrics.md", "schema.md"] {
        let generated = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let page = std::fs::read_to_string(committed.join(name)).unwrap_or_default();
        if generated != page {
            let line = generated
                .lines()
                .zip(page.lines())
                .position(|(a, b)| a != b)
                .map_or(generated.lines().count().min(page.lines().count()), |i| i)
                + 1;
            panic!(
                "docs/book/src/reference/{name} differs from what the code generates \
                 (first at line {line}); write it again with\n    \
                 cargo run -- reference --out docs/book/src/reference\nand commit it"
            );
        }
    }
}

/// mdBook's id for a heading: lower case, spaces to `-`, other
/// punctuation dropped (after Markdown: code ticks and link targets).
fn heading_id(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find("](") {
        text.push_str(&rest[..open]);
        rest = rest[open..].split_once(')').map_or("", |(_, r)| r);
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The text outside fenced blocks and code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split("\n```").enumerate() {
        if i % 2 == 0 {
            for (j, span) in part.split('`').enumerate() {
                if j % 2 == 0 {
                    out.push_str(span);
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The anchors a page offers: its headings' ids.
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(heading_id(line.trim_start_matches('#').trim()));
        }
    }
    out
}

#[test]
fn relative_links_resolve() {
    let mut files = pages();
    for extra in ["README.md", "docs/design.md", "benches/RESULTS.md"] {
        let path = Path::new(ROOT).join(extra);
        let text = std::fs::read_to_string(&path).unwrap();
        files.push((path, text));
    }
    let mut broken = Vec::new();
    for (path, text) in &files {
        let prose = prose(text);
        for link in prose.split("](").skip(1) {
            let Some(target) = link.split(')').next() else {
                continue;
            };
            let target = target.split_whitespace().next().unwrap_or("");
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", path.display()));
                continue;
            }
            if !anchor.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&text).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target} (no such heading)", path.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_is_in_the_summary() {
    let src = Path::new(ROOT).join("docs/book/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    for (path, _) in pages() {
        let rel = path
            .strip_prefix(&src)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        if rel != "SUMMARY.md" {
            assert!(
                summary.contains(&format!("]({rel})")),
                "docs/book/src/{rel} is not in SUMMARY.md"
            );
        }
    }
}

#[test]
fn the_book_explains_every_command_and_flag() {
    let book: String = pages()
        .into_iter()
        .filter(|(p, _)| !p.ends_with("reference/cli.md"))
        .map(|(_, text)| text)
        .collect();
    for cmd in [
        "run",
        "migrate",
        "enqueue",
        "status",
        "retry",
        "demo",
        "health",
        "checkpoint",
        "pause",
        "resume",
        "cancel",
        "prune",
        "ui",
        "wait",
        "export",
        "events list",
        "events retry",
        "limits set",
        "limits list",
        "limits clear",
        "tokens create",
        "tokens list",
        "tokens revoke",
    ] {
        let mut args: Vec<&str> = cmd.split(' ').collect();
        args.push("--help");
        let o = processor(&args, "");
        let help = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            book.contains(&format!("processor {cmd}")),
            "the book lacks `processor {cmd}`"
        );
        for flag in help
            .split_whitespace()
            .filter(|w| w.starts_with("--") && w.len() > 2)
        {
            let flag = flag.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
            if flag == "--help" {
                continue;
            }
            let documented = book.match_indices(flag).any(|(i, _)| {
                let next = book[i + flag.len()..].chars().next().unwrap_or(' ');
                !next.is_ascii_alphanumeric() && next != '-'
            });
            assert!(
                documented,
                "the book does not explain {flag} of `processor {cmd}`"
            );
        }
    }
}

#[test]
fn readme_quick_start_is_the_books() {
    let readme = include_str!("../../README.md");
    let book = include_str!("../../docs/book/src/getting-started.md");
    let quick = |text: &'static str| &text[text.find("## Quick start").unwrap()..];
    let (readme, book) = (quick(readme), quick(book));
    assert_eq!(blocks(readme, "python")[0], blocks(book, "python")[0]);
    assert_eq!(blocks(readme, "sh")[..2], blocks(book, "sh")[..2]);
}

/// README's set-up is two commands that work pasted into a fresh clone:
/// both are `cargo` commands (nothing to install first), and the first
/// runs the demo, here through the same binary built for the tests, in
/// an empty folder, as written (its arguments after `--`).
#[test]
fn readme_setup_is_two_commands_that_need_nothing_installed() {
    let readme = include_str!("../../README.md");
    let setup = &readme[readme.find("## Set-up: two commands").unwrap()..];
    let commands: Vec<&str> = blocks(setup, "sh")[0]
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        commands,
        ["cargo run --release -- demo", "cargo test --workspace"],
        "README's set-up must need nothing but a clone and Rust"
    );
    let args: Vec<&str> = commands[0]
        .split(" -- ")
        .nth(1)
        .unwrap()
        .split(' ')
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(&args)
        .current_dir(dir.path())
        .env_remove("FEED_DATABASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("partition complete"), "{text}");
}
