//! `processor reference --out DIR` (hidden): writes the book's reference
//! pages from the code. The command line's page is written here from
//! clap's own description of every command and flag; the other pages
//! come from the library (`feed::reference`).

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory};
use feed::reference::{api_page, cell, header, metrics_page, schema_page};

#[derive(Args)]
pub struct ReferenceArgs {
    /// The folder to write cli.md, api.md, metrics.md and schema.md into
    #[arg(long, default_value = "docs/book/src/reference")]
    out: PathBuf,
}

pub async fn reference(args: ReferenceArgs) -> anyhow::Result<()> {
    let pages = [
        ("cli.md", cli_page()),
        ("api.md", api_page()),
        ("metrics.md", metrics_page()),
        ("schema.md", schema_page().await?),
    ];
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    for (name, page) in pages {
        let path = args.out.join(name);
        std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Every visible command and flag, as clap knows them.
fn cli_page() -> String {
    let mut cli = super::Cli::command();
    cli.build();
    let mut page = header(
        "Command line",
        "the command line's definition (cmd/processor)",
    );
    page.push_str(
        "Every flag can also be given as the environment variable shown beside it. \
         Durations are written `500ms`, `30s`, `5m`, `7d`.\n\n| command | what it does |\n| --- | --- |\n",
    );
    let commands = visible(&cli);
    for c in &commands {
        let _ = writeln!(
            page,
            "| [`{}`](#{}) | {} |",
            name(c),
            name(c).replace(' ', "-"),
            cell(&about(c))
        );
    }
    for c in commands {
        command(&mut page, c);
    }
    page
}

/// The visible subcommands of `parent`, and theirs, depth first.
fn visible(parent: &clap::Command) -> Vec<&clap::Command> {
    let mut out = Vec::new();
    for c in parent
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
    {
        if c.has_subcommands() {
            out.extend(visible(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// `processor events list` for the command whose bin name clap built.
fn name(c: &clap::Command) -> String {
    c.get_bin_name().unwrap_or(c.get_name()).to_string()
}

fn about(c: &clap::Command) -> String {
    c.get_about().map(|a| a.to_string()).unwrap_or_default()
}

fn command(page: &mut String, c: &clap::Command) {
    let usage = c.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ");
    let _ = write!(
        page,
        "\n## {}\n\n{}\n\n```text\n{usage}\n```\n",
        name(c),
        about(c)
    );
    let args: Vec<&clap::Arg> = c
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help")
        .collect();
    if args.is_empty() {
        return;
    }
    page.push_str("\n| flag | environment | default | meaning |\n| --- | --- | --- | --- |\n");
    for a in args {
        let flag = match a.get_long() {
            Some(long) => format!("`--{long}`"),
            None => format!("`{}`", a.get_id().as_str().to_uppercase()),
        };
        let env = a
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let default = a
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(", ");
        let mut help = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if !values.is_empty() && a.get_action().takes_values() {
            let _ = write!(help, " (one of {})", values.join(", "));
        }
        let _ = writeln!(page, "| {flag} | {env} | {default} | {} |", cell(&help));
    }
}
