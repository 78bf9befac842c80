//! Secret flags. Each secret is given inline (`--NAME`, env `FEED_NAME`)
//! or read from a file (`--NAME-file`, env `FEED_NAME_FILE`), such as a
//! mounted container secret, so that it shows in neither the process list
//! nor the environment.

/// Reads a secret file while the flags are parsed; a trailing newline is
/// not part of the secret.
pub fn read_file(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|text| text.trim_end_matches(['\r', '\n']).to_string())
        .map_err(|e| format!("cannot read the file: {e}"))
}

/// Declares the flag pair of one secret as a clap `Args` struct whose
/// `value()` is the secret from whichever flag was given.
macro_rules! secret_flags {
    ($name:ident { $inline:ident, $file:ident, env = $env:literal, what = $what:literal }, $help:literal) => {
        #[doc = concat!("The ", $what, ", inline or from a file.")]
        #[derive(clap::Args, Clone, Default)]
        pub struct $name {
            #[doc = $help]
            #[arg(long, env = $env, hide_env_values = true, conflicts_with = stringify!($file))]
            $inline: Option<String>,
            #[arg(
                long,
                env = concat!($env, "_FILE"),
                value_parser = $crate::secret::read_file,
                help = concat!("Read the ", $what, " from this file (trailing newline ignored) [default: none]")
            )]
            $file: Option<String>,
        }

        impl $name {
            /// The secret, from whichever flag was given.
            pub fn value(&self) -> Option<String> {
                self.$inline.clone().or_else(|| self.$file.clone())
            }
        }
    };
}

/// The secrets of a file, one a line.
#[derive(Clone)]
pub struct Lines(pub Vec<String>);

/// Reads a file of secrets while the flags are parsed: one a line, blank
/// lines skipped (a single secret's trailing newline is not part of it).
pub fn read_lines(path: &str) -> Result<Lines, String> {
    let text = read_file(path)?;
    Ok(Lines(
        text.lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    ))
}

/// Declares the flag pair of a list of secrets (several at once during a
/// rotation): the inline flag repeatable (its variable takes one a line),
/// the file one a line.
macro_rules! secret_list_flags {
    ($name:ident { $inline:ident, $file:ident, env = $env:literal, what = $what:literal }, $help:literal) => {
        #[doc = concat!("The ", $what, "s, inline or from a file.")]
        #[derive(clap::Args, Clone, Default)]
        pub struct $name {
            #[doc = $help]
            #[arg(long, env = $env, hide_env_values = true, value_delimiter = '\n', conflicts_with = stringify!($file))]
            $inline: Vec<String>,
            #[arg(
                long,
                env = concat!($env, "_FILE"),
                value_parser = $crate::secret::read_lines,
                help = concat!("Read the ", $what, "s from this file, one a line (blank lines skipped) [default: none]")
            )]
            $file: Option<$crate::secret::Lines>,
        }

        impl $name {
            /// The secrets, from whichever flag was given.
            pub fn values(&self) -> Vec<String> {
                // An empty value is kept, so that checking it refuses it rather
                // than leaving requests unsigned without a word.
                let inline = self.$inline.iter().cloned();
                let file = self.$file.iter().flat_map(|f| f.0.iter().cloned());
                inline.chain(file).collect()
            }
        }
    };
}
