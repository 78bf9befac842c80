//! What a failure to open a store means, read from the error's kind and
//! codes (each driver names its own, `driver::refusal`), never from
//! message text: [`Unusable`] lasts until someone acts, [`Unreachable`]
//! may pass by itself. Each message says what to do.

use std::path::Path;
use std::time::Duration;

use sea_orm::sqlx::Error as Sqlx;

use super::driver::sqlite;
use super::driver::{self, Refusal};
use super::query_value;
use super::{Driver, redact};
use crate::Error;

/// How long one attempt to log in may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A database that cannot be used as `--database-url` says; waiting will
/// not change that. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    /// The server has no database of that name.
    #[error("database {name:?} does not exist on {url}: {hint}")]
    NoDatabase {
        /// The URL, password redacted.
        url: String,
        /// The database named in the URL.
        name: String,
        /// How to create it.
        hint: String,
    },
    /// The server refused the login (unknown user, wrong password, no grant).
    #[error(
        "the database at {url} refused the login of user {user:?} ({said}): check the user and password in --database-url, and that the user may use that database"
    )]
    Login {
        /// The URL, password redacted.
        url: String,
        /// The user named in the URL.
        user: String,
        /// What the server said.
        said: String,
    },
    /// The server's TLS certificate cannot be read or accepted.
    #[error(
        "the database at {addr} offered a TLS certificate Feed cannot accept ({said}): Citus \
         makes a self-signed X.509 v1 certificate when it turns TLS on by itself, and Feed reads \
         X.509 v3 only; give the server an X.509 v3 certificate, or on a network you trust add \
         sslmode=disable to --database-url"
    )]
    Certificate {
        /// host:port.
        addr: String,
        /// What the TLS library said.
        said: String,
    },
    /// An SQLite file that cannot be opened or created.
    #[error("cannot open the SQLite database {path} ({said}): {hint}")]
    File {
        /// The file, as an absolute path.
        path: String,
        /// What SQLite said.
        said: String,
        /// What to do.
        hint: String,
    },
}

/// Why a database could not be reached; it may come up later.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    /// Nothing listens at the address (the server is down, or the port is wrong).
    #[error("connection refused at {0} (is the database server running there?)")]
    Refused(String),
    /// The address did not answer in time.
    #[error("no answer from {addr} within {after:?}")]
    TimedOut {
        /// host:port.
        addr: String,
        /// How long was waited.
        after: Duration,
    },
    /// The server at the address takes no writes (a standby, a demoted
    /// primary); a failover may bring the primary there.
    #[error(
        "{0} takes no writes (a standby or a demoted primary); Feed needs the primary: point \
         --database-url at it or at a proxy that routes to it"
    )]
    Standby(String),
    /// The address accepted the connection and closed it before the
    /// database answered: a proxy with no server behind it.
    #[error(
        "{0} closed the connection as soon as it was opened (no primary behind the proxy? a \
         pooler refusing clients?)"
    )]
    Closed(String),
    /// Anything else, in the driver's words (password redacted).
    #[error("{0}")]
    Other(String),
}

/// What is being opened, for the messages.
pub(super) struct Target {
    /// The URL as given (the driver's scheme).
    pub(super) url: String,
    pub(super) driver: Driver,
    /// The URL asks for a missing SQLite file to be created (`mode=rwc`).
    pub(super) create: bool,
    /// The caller forbids creating one whatever the URL says.
    pub(super) existing_only: bool,
}

/// The error a failure to connect is, by its kind and codes.
pub(super) fn classify(e: &Sqlx, target: &Target) -> Error {
    let url = target.url.as_str();
    let why = match e {
        Sqlx::Configuration(c) => {
            return Error::DatabaseUrl(format!("{}: {}", redact(url), clean(&c.to_string(), url)));
        }
        Sqlx::Database(d) => {
            let said = clean(d.message(), url);
            match driver::refusal(d.as_ref()) {
                Some(Refusal::NoDatabase) => return no_database(target).into(),
                Some(Refusal::Login) => {
                    let user = url::Url::parse(url)
                        .map(|u| u.username().to_string())
                        .unwrap_or_default();
                    let url = redact(url);
                    return Unusable::Login { url, user, said }.into();
                }
                Some(Refusal::CannotOpen) => return sqlite_unusable(target, said).into(),
                None => Unreachable::Other(clean(&e.to_string(), url)),
            }
        }
        Sqlx::Io(_) | Sqlx::Tls(_) if let Some(said) = certificate_refused(e) => {
            return Unusable::Certificate {
                addr: address(url),
                said,
            }
            .into();
        }
        Sqlx::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            Unreachable::Refused(address(url))
        }
        Sqlx::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => Unreachable::TimedOut {
            addr: address(url),
            after: CONNECT_TIMEOUT,
        },
        Sqlx::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            Unreachable::Closed(address(url))
        }
        Sqlx::Io(io) => Unreachable::Other(format!("cannot reach {}: {io}", address(url))),
        // sqlx reads the end of the stream as a zero byte answering its
        // SSLRequest: the first thing it asks.
        Sqlx::Protocol(p) if p.starts_with("unexpected response from SSLRequest") => {
            Unreachable::Closed(address(url))
        }
        Sqlx::PoolTimedOut => Unreachable::TimedOut {
            addr: address(url),
            after: Duration::from_secs(5),
        },
        other => Unreachable::Other(clean(&other.to_string(), url)),
    };
    unreachable_as(target, why)
}

/// What the TLS library said of a certificate it refused, found among the
/// error's causes (the driver wraps it in an I/O error).
fn certificate_refused(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(tls @ rustls::Error::InvalidCertificate(_)) = c.downcast_ref::<rustls::Error>()
        {
            return Some(tls.to_string());
        }
        let inner = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        cause = match inner {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        };
    }
    None
}

pub(super) fn unreachable_as(target: &Target, reason: Unreachable) -> Error {
    Error::Connect {
        url: redact(&target.url),
        reason,
    }
}

/// A driver's message with the URL's password redacted.
pub(super) fn clean(text: &str, url: &str) -> String {
    text.replace(url, &redact(url))
}

/// host:port of a network URL, the port defaulted as each server's.
pub(super) fn address(url: &str) -> String {
    let Ok(u) = url::Url::parse(url) else {
        return "<unparseable URL>".into();
    };
    let port = u.port().unwrap_or(match u.scheme() {
        "mysql" => 3306,
        _ => 5432,
    });
    format!("{}:{port}", u.host_str().unwrap_or("localhost"))
}

/// The database named in the URL does not exist: how to create it.
fn no_database(target: &Target) -> Unusable {
    let u = url::Url::parse(&target.url).ok();
    let name = u
        .as_ref()
        .map(|u| u.path().trim_start_matches('/').to_string())
        .unwrap_or_default();
    let host = u
        .as_ref()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_else(|| "localhost".into());
    let user = u.as_ref().map(|u| u.username()).unwrap_or_default();
    let port = address(&target.url)
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let hint = format!(
        "{}, or fix --database-url",
        target.driver.create_database(
            &host,
            &port,
            user,
            &name,
            u.as_ref().is_some_and(|u| u.password().is_some())
        )
    );
    Unusable::NoDatabase {
        url: redact(&target.url),
        name,
        hint,
    }
}

/// An SQLite file that cannot be opened: what is wrong with its path.
fn sqlite_unusable(target: &Target, said: String) -> Unusable {
    let path = sqlite::file(&target.url).unwrap_or_default();
    let dir = path.parent().unwrap_or(Path::new("/"));
    let hint = if path.exists() {
        "check that this user may read and write the file and its directory".to_string()
    } else if target.existing_only {
        "no database here: run the command where the database is, or give its --database-url (`processor migrate` or `processor run` create one)".to_string()
    } else if !target.create {
        let with_mode = match query_value(&target.url, "mode") {
            Some(_) => "set mode=rwc in it".to_string(),
            None if target.url.contains('?') => format!("{}&mode=rwc", target.url),
            None => format!("{}?mode=rwc", target.url),
        };
        format!(
            "the file does not exist; to create it, add ?mode=rwc to --database-url ({with_mode})"
        )
    } else if !dir.is_dir() {
        format!(
            "the directory {} does not exist; create it (mkdir -p) or fix --database-url",
            dir.display()
        )
    } else {
        format!("check that this user may create files in {}", dir.display())
    };
    Unusable::File {
        path: path.display().to_string(),
        said,
        hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_each_servers_port() {
        assert_eq!(address("postgres://u@db/x"), "db:5432");
        assert_eq!(address("mysql://u@db/x"), "db:3306");
        assert_eq!(address("mysql://u@db:1/x"), "db:1");
    }
}
