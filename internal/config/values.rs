//! The values of settings that other modules act on: the console's
//! tokens, where handlers reach the inputs, what stands between Feed and
//! PostgreSQL. They live here, below everything that uses them, so that
//! `config` needs nothing of the library but its errors.

use subtle::ConstantTimeEq;

/// The admin token. Its `Debug` never shows it, so it cannot leak into logs.
#[derive(Clone)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

impl AdminToken {
    /// Wraps a token; refuses one too weak to resist guessing (fewer than
    /// 16 characters, or fewer than 8 different ones) and one with spaces
    /// at either end, which no login form or header would carry back.
    pub fn new(token: impl Into<String>) -> crate::Result<Self> {
        Self::for_flag("--admin-token", token)
    }

    /// [`AdminToken::new`] for the token of another flag, which its errors
    /// name (`--producer-token` for a [`ProducerToken`]).
    pub fn for_flag(flag: &str, token: impl Into<String>) -> crate::Result<Self> {
        let token = token.into();
        let bad = |why: &str| Err(crate::Error::Config(format!("{flag} {why}")));
        if token.trim() != token {
            return bad(
                "starts or ends with whitespace, which a login or an Authorization header cannot carry; remove it",
            );
        }
        if token.chars().count() < 16 {
            return bad("must be at least 16 characters");
        }
        let distinct: std::collections::HashSet<char> = token.chars().collect();
        if distinct.len() < 8 {
            return bad(
                "must hold at least 8 different characters; generate one, e.g. `openssl rand -hex 24`",
            );
        }
        Ok(Self(token))
    }

    /// Whether `given` is the token.
    pub fn matches(&self, given: &str) -> bool {
        self.0.as_bytes().ct_eq(given.as_bytes()).into()
    }
}

/// The producer token: it allows enqueueing over the API
/// (`POST /api/v1/partitions/{id}/items`) and nothing else. The same type,
/// strength rules and constant-time comparison as the admin token; build
/// one with `ProducerToken::for_flag("--producer-token", …)` so that its
/// errors name the right flag.
pub type ProducerToken = AdminToken;

/// Where handlers reach this processor's listener for their inputs
/// (`--inputs-url`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputsUrl {
    /// The listener's own address, with 0.0.0.0 as 127.0.0.1 and :: as ::1.
    #[default]
    Derived,
    /// This base URL (a proxy, a container's name), e.g.
    /// `http://feed-1:8080` or `https://proxy/feed-1`.
    Base(String),
    /// No `Feed-Inputs` is sent.
    Off,
}

impl InputsUrl {
    /// `--inputs-url`'s value: `off`, or an http(s) URL without query or
    /// fragment (a trailing `/` is dropped).
    pub fn parse(text: &str) -> crate::Result<InputsUrl> {
        if text == "off" {
            return Ok(InputsUrl::Off);
        }
        let bad = |why: &str| {
            crate::Error::Config(format!(
                "--inputs-url {}: {why}; give the base URL handlers reach --listen at, e.g. \
                 http://feed-1:8080, or off",
                crate::printable::printable(text)
            ))
        };
        let url = url::Url::parse(text).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(bad("it must be an http or https URL with a host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("it must have no query (?…) or fragment (#…)"));
        }
        Ok(InputsUrl::Base(text.trim_end_matches('/').to_string()))
    }
}

/// What stands between Feed and PostgreSQL (`--db-pooler`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Nothing: Feed talks to the server (or a TCP proxy such as HAProxy).
    #[default]
    None,
    /// A pooler in session mode: the same as none for Feed.
    Session,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`):
    /// each statement in its own transaction, no LISTEN.
    Transaction,
}

/// Where statements read the time: the database clock, or (in tests) the
/// database clock moved forward by an offset the test sets, so that expiry,
/// backoff and schedule tests move time instead of sleeping through it.
/// Production uses [`Clock::database`], and its statements carry no offset.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clock(Option<&'static std::sync::atomic::AtomicI64>);

impl Clock {
    /// The database clock as it is (the default).
    pub fn database() -> Clock {
        Clock(None)
    }

    /// The database clock plus an offset that starts at zero and that
    /// [`Clock::advance`] moves; every copy moves together. For tests: the
    /// offset lives as long as the program (a few bytes per clock).
    pub fn movable() -> Clock {
        Clock(Some(Box::leak(Box::new(
            std::sync::atomic::AtomicI64::new(0),
        ))))
    }

    /// Moves a movable clock forward by `by` (a database clock does not move).
    pub fn advance(&self, by: std::time::Duration) {
        if let Some(offset) = self.0 {
            let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
            offset.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The offset in milliseconds; None for the database clock as it is.
    pub fn offset_ms(&self) -> Option<i64> {
        self.0
            .map(|offset| offset.load(std::sync::atomic::Ordering::SeqCst))
    }
}
