//! A multi-host URL taken apart: its hosts, what `target_session_attrs`
//! asks for, and each host's own URL (the same user, database and query).

use std::fmt;

use crate::Error;
use crate::store::redact;

/// Stands for the host list while the rest of the URL is parsed.
const PLACEHOLDER: &str = "feed-host-list.invalid";

/// One `host:port` of the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Addr {
    pub(super) host: String,
    pub(super) port: u16,
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The hosts of a URL that names several.
pub(super) struct List {
    pub(super) addrs: Vec<Addr>,
    /// `target_session_attrs` asks for a host that takes writes.
    pub(super) asks_writes: bool,
    /// The URL up to the host list (`postgres://user:password@`) and from
    /// its end, `target_session_attrs` taken out: host `i`'s own URL is
    /// `head + host:port + tail`.
    head: String,
    tail: String,
}

impl fmt::Debug for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the head: it holds the password.
        f.debug_struct("List")
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

/// Where the host list of a URL's authority lies; None without `://`.
fn host_list(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let at = url[start..end].rfind('@').map_or(start, |i| start + i + 1);
    Some((at, end))
}

/// The URL with a placeholder for a host list of several hosts, and the
/// list; None for a URL with one host. For `redact`.
pub(crate) fn one_host(url: &str) -> Option<(String, &str)> {
    let (at, end) = host_list(url)?;
    let list = &url[at..end];
    list.contains(',')
        .then(|| (format!("{}{PLACEHOLDER}{}", &url[..at], &url[end..]), list))
}

/// [`redact`] for a URL whose host list the placeholder stands for.
pub(crate) fn put_back(redacted: &str, list: &str) -> String {
    redacted.replacen(PLACEHOLDER, list, 1)
}

/// Splits `h1:5432,[::1]:5433,h3` into addresses (5432 by default).
fn addrs(list: &str) -> Result<Vec<Addr>, String> {
    list.split(',')
        .map(|entry| {
            let (host, port) = match entry.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
                    let port = p
                        .parse::<u16>()
                        .map_err(|_| format!("{entry:?}: the port must be a number"))?;
                    (h, port)
                }
                _ => (entry, 5432),
            };
            if host.is_empty() || host.starts_with('%') || host.starts_with('/') {
                return Err(format!(
                    "{entry:?}: each host of the list must be a host name or address (not empty, not a socket path)"
                ));
            }
            Ok(Addr {
                host: host.trim_start_matches('[').trim_end_matches(']').into(),
                port,
            })
        })
        .collect()
}

/// The URL's query without `target_session_attrs`, and whether it asks
/// for a host that takes writes.
fn session_attrs(query: &str) -> Result<(String, bool), String> {
    let mut writes = false;
    let mut rest = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if k != "target_session_attrs" {
            rest.append_pair(&k, &v);
            continue;
        }
        writes = match &*v {
            "read-write" | "primary" => true,
            "any" => false,
            other => {
                return Err(format!(
                    "target_session_attrs={other} is not supported: use read-write (or primary, \
                     or any for commands that only read)"
                ));
            }
        };
    }
    Ok((rest.finish(), writes))
}

impl List {
    /// The hosts of a URL naming several; None for one host.
    pub(super) fn parse(url: &str) -> crate::Result<Option<List>> {
        let bad = |why: String| Error::DatabaseUrl(format!("{}: {why}", redact(url)));
        let Some((at, end)) = host_list(url) else {
            return Ok(None);
        };
        if !url[at..end].contains(',') {
            return Ok(None);
        }
        let addrs = addrs(&url[at..end]).map_err(bad)?;
        let (path, query) = url[end..].split_once('?').unwrap_or((&url[end..], ""));
        let (query, asks_writes) = session_attrs(query).map_err(bad)?;
        let tail = match query.is_empty() {
            true => path.to_string(),
            false => format!("{path}?{query}"),
        };
        let list = List {
            addrs,
            asks_writes,
            head: url[..at].to_string(),
            tail,
        };
        for i in 0..list.addrs.len() {
            if let Err(e) = url::Url::parse(&list.url(i)) {
                return Err(bad(format!(
                    "{e}; expected e.g. postgres://user:password@h1:5432,h2:5432/db"
                )));
            }
        }
        Ok(Some(list))
    }

    /// The URL of host `i` alone.
    pub(super) fn url(&self, i: usize) -> String {
        let a = &self.addrs[i];
        let host = match a.host.contains(':') {
            true => format!("[{}]", a.host),
            false => a.host.clone(),
        };
        format!("{}{host}:{}{}", self.head, a.port, self.tail)
    }

    /// A driver's message with whatever of the URL's head it quotes (the
    /// password) taken out.
    pub(super) fn clean(&self, text: &str) -> String {
        text.replace(&self.head, "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str) -> List {
        List::parse(url).unwrap().expect("several hosts")
    }

    #[test]
    fn a_host_list_is_split_with_default_ports_and_each_host_gets_its_url() {
        let h = parsed(
            "postgres://u:p@h1:5433,10.0.0.2,[::1]:5434/feed?target_session_attrs=read-write&sslmode=disable",
        );
        let shown: Vec<String> = h.addrs.iter().map(Addr::to_string).collect();
        assert_eq!(shown, ["h1:5433", "10.0.0.2:5432", "::1:5434"]);
        assert!(h.asks_writes);
        assert_eq!(h.url(0), "postgres://u:p@h1:5433/feed?sslmode=disable");
        assert_eq!(
            h.url(1),
            "postgres://u:p@10.0.0.2:5432/feed?sslmode=disable"
        );
        assert_eq!(h.url(2), "postgres://u:p@[::1]:5434/feed?sslmode=disable");
        assert_eq!(parsed("postgresql://h1,h2").url(1), "postgresql://h2:5432");
    }

    #[test]
    fn target_session_attrs_says_whether_the_primary_is_asked_for() {
        assert!(!parsed("postgres://h1,h2/db").asks_writes);
        assert!(!parsed("postgres://h1,h2/db?target_session_attrs=any").asks_writes);
        assert!(parsed("postgres://h1,h2/db?target_session_attrs=primary").asks_writes);
    }

    #[test]
    fn one_host_is_not_a_list() {
        for url in [
            "postgres://u:p,w@h1:5432/db",
            "postgres://h1/db?options=a,b",
            "postgres://h1/db?target_session_attrs=read-write",
        ] {
            assert!(List::parse(url).unwrap().is_none(), "{url}");
        }
    }

    #[test]
    fn bad_lists_are_refused_with_the_password_hidden() {
        for (url, says) in [
            (
                "postgres://u:secret@h1:x,h2/db",
                "the port must be a number",
            ),
            ("postgres://u:secret@h1,,h2/db", "must be a host name"),
            (
                "postgres://u:secret@h1,h2:99999/db",
                "the port must be a number",
            ),
            (
                "postgres://u:secret@h1,h2/db?target_session_attrs=standby",
                "target_session_attrs=standby is not supported",
            ),
        ] {
            let e = List::parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("secret"), "{e}");
            assert!(e.contains("u:***@h1"), "{e}");
        }
    }

    #[test]
    fn redact_hides_the_password_of_a_host_list() {
        assert_eq!(
            redact("postgres://u:pw@h1:5432,h2:5433/db?password=x&target_session_attrs=read-write"),
            "postgres://u:***@h1:5432,h2:5433/db?password=***&target_session_attrs=read-write"
        );
        assert_eq!(
            List::parse("postgres://u:pw@h1,h2/db")
                .unwrap()
                .unwrap()
                .clean("at postgres://u:pw@h1:5432/db"),
            "at h1:5432/db"
        );
    }
}
