//! Who may act: the admin token, console logins and their CSRF tokens.
//!
//! A login starts a session of this process: a random id (the cookie) with
//! a random CSRF token of its own and an expiry, kept in memory. Logout
//! ends it on the server, so a copied cookie stops working; the token
//! itself never leaves the server after login. Token and CSRF comparisons
//! are constant-time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use subtle::ConstantTimeEq;

pub use crate::config::{AdminToken, ProducerToken};

/// The login cookie's name.
pub(super) const COOKIE: &str = "feed_console";

/// How long a login lasts (the cookie's `Max-Age` too).
const LOGIN_TTL: Duration = Duration::from_secs(12 * 3600);

/// Logins kept at most; the oldest go first.
const MAX_LOGINS: usize = 1_000;

/// One login: its CSRF token and when it ends.
struct Login {
    csrf: String,
    ends: Instant,
}

/// The logins of this process, by their random session id.
#[derive(Default)]
pub(super) struct Sessions(Mutex<HashMap<String, Login>>);

/// 32 random bytes as hex: a session id or a CSRF token.
fn random_hex() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl Sessions {
    /// Starts a login; returns its session id, the cookie's value.
    pub(super) fn start(&self) -> String {
        let mut logins = self.0.lock().expect("the sessions' lock is never poisoned");
        let now = Instant::now();
        logins.retain(|_, l| l.ends > now);
        if logins.len() >= MAX_LOGINS
            && let Some(oldest) = logins
                .iter()
                .min_by_key(|(_, l)| l.ends)
                .map(|(id, _)| id.clone())
        {
            logins.remove(&oldest);
        }
        let id = random_hex();
        let login = Login {
            csrf: random_hex(),
            ends: now + LOGIN_TTL,
        };
        logins.insert(id.clone(), login);
        id
    }

    /// The CSRF token of the live login the request's cookie names.
    pub(super) fn csrf(&self, headers: &HeaderMap) -> Option<String> {
        let id = cookie(headers)?;
        let logins = self.0.lock().expect("the sessions' lock is never poisoned");
        logins
            .get(&id)
            .filter(|l| l.ends > Instant::now())
            .map(|l| l.csrf.clone())
    }

    /// Ends the login the request's cookie names.
    pub(super) fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers) {
            self.0
                .lock()
                .expect("the sessions' lock is never poisoned")
                .remove(&id);
        }
    }
}

/// Why an action was refused, as an HTTP status and a message.
pub(super) type Refusal = (StatusCode, &'static str);

const NO_TOKEN: Refusal = (
    StatusCode::FORBIDDEN,
    "actions are disabled: start the dashboard with --admin-token or --admin-token-file",
);

/// API actions: `Authorization: Bearer <token>`.
pub(super) fn check_bearer(token: Option<&AdminToken>, headers: &HeaderMap) -> Result<(), Refusal> {
    let token = token.ok_or(NO_TOKEN)?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if token.matches(g.trim()) => Ok(()),
        _ => Err((
            StatusCode::UNAUTHORIZED,
            "a valid admin token is required: Authorization: Bearer <token>",
        )),
    }
}

/// Enqueueing over the API: `Authorization: Bearer <token>` with the
/// producer token or the admin token. Both are compared (in constant time)
/// whichever matches.
pub(super) fn check_producer(
    admin: Option<&AdminToken>,
    producer: Option<&ProducerToken>,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    if admin.is_none() && producer.is_none() {
        return Err((
            StatusCode::FORBIDDEN,
            "enqueueing over the API is disabled: start the dashboard with --producer-token or \
             --producer-token-file (or --admin-token / --admin-token-file)",
        ));
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(given) = given else {
        return Err(NO_PRODUCER);
    };
    let admin = admin.is_some_and(|t| t.matches(given));
    let producer = producer.is_some_and(|t| t.matches(given));
    if admin | producer {
        Ok(())
    } else {
        Err(NO_PRODUCER)
    }
}

const NO_PRODUCER: Refusal = (
    StatusCode::UNAUTHORIZED,
    "a valid producer or admin token is required: Authorization: Bearer <token>",
);

/// The login cookie's value, if the request carries one.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

/// How the audit names a console login: the first 8 hex digits of its
/// session id's SHA-256 (the id itself is a secret), so that the actions
/// of one login can be told apart from another's.
pub(super) fn login_tag(headers: &HeaderMap) -> String {
    use sha2::Digest;
    let id = cookie(headers).unwrap_or_default();
    let digest = sha2::Sha256::digest(id.as_bytes());
    format!("console login {}", &hex::encode(digest)[..8])
}

/// Page actions: a live login and its CSRF token in the form.
pub(super) fn check_form(
    token: Option<&AdminToken>,
    sessions: &Sessions,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<(), Refusal> {
    token.ok_or(NO_TOKEN)?;
    let Some(expected) = sessions.csrf(headers) else {
        return Err((
            StatusCode::UNAUTHORIZED,
            "log in with the admin token first",
        ));
    };
    if !bool::from(expected.as_bytes().ct_eq(csrf.as_bytes())) {
        return Err((
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong; reload the page and try again",
        ));
    }
    Ok(())
}

/// `Set-Cookie` for a login (its session id): HttpOnly, SameSite=Strict,
/// 12 hours, and `Secure` when a proxy says the browser uses HTTPS.
pub(super) fn login_cookie(session: &str, https: bool) -> String {
    let secure = if https { "; Secure" } else { "" };
    format!(
        "{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        LOGIN_TTL.as_secs()
    )
}

/// `Set-Cookie` that logs out.
pub(super) fn logout_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_token() {
        let t = AdminToken::new("s3cret-t0ken-s3cret").unwrap();
        assert!(!format!("{t:?}").contains("s3cret"));
        assert!(t.matches("s3cret-t0ken-s3cret") && !t.matches("s3cret"));
    }

    #[test]
    fn weak_or_padded_tokens_are_refused() {
        for weak in [
            "short",
            "éééééééé",
            "aaaaaaaaaaaaaaaa",
            "abababababababababab",
            " 0123456789abcdef",
            "0123456789abcdef\t",
        ] {
            assert!(AdminToken::new(weak).is_err(), "{weak:?}");
        }
        assert!(AdminToken::new("0123456789abcdef").is_ok());
    }

    #[test]
    fn producer_tokens() {
        let admin = AdminToken::new("admin-t0ken-0123456789").unwrap();
        let producer =
            ProducerToken::for_flag("--producer-token", "producer-t0ken-0123456789").unwrap();
        let e = ProducerToken::for_flag("--producer-token", "short").unwrap_err();
        assert!(e.to_string().contains("--producer-token must be"), "{e}");
        let bearer = |t: Option<&str>| {
            let mut h = HeaderMap::new();
            if let Some(t) = t {
                let v = format!("Bearer {t}").parse().unwrap();
                h.insert(header::AUTHORIZATION, v);
            }
            h
        };
        let code = |a: Option<&AdminToken>, p: Option<&ProducerToken>, t: Option<&str>| {
            check_producer(a, p, &bearer(t)).err().map(|r| r.0)
        };
        let (a, p) = (Some(&admin), Some(&producer));
        let forbidden = Some(StatusCode::FORBIDDEN);
        let unauthorized = Some(StatusCode::UNAUTHORIZED);
        assert_eq!(code(None, None, Some("admin-t0ken-0123456789")), forbidden);
        assert_eq!(code(a, p, None), unauthorized);
        assert_eq!(code(a, p, Some("wrong-t0ken-0123456789")), unauthorized);
        assert_eq!(code(a, p, Some("producer-t0ken-0123456789")), None);
        assert_eq!(code(a, p, Some("admin-t0ken-0123456789")), None);
        assert_eq!(code(None, p, Some("producer-t0ken-0123456789")), None);
        assert_eq!(code(a, None, Some("admin-t0ken-0123456789")), None);
        assert_eq!(
            code(a, None, Some("producer-t0ken-0123456789")),
            unauthorized
        );
        // The producer token is no admin token.
        assert!(check_bearer(a, &bearer(Some("producer-t0ken-0123456789"))).is_err());
    }

    #[test]
    fn logins_are_random_and_end() {
        let s = Sessions::default();
        let (a, b) = (s.start(), s.start());
        assert_ne!(a, b);
        let with = |id: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::COOKIE, format!("{COOKIE}={id}").parse().unwrap());
            h
        };
        let (csrf_a, csrf_b) = (s.csrf(&with(&a)).unwrap(), s.csrf(&with(&b)).unwrap());
        assert_ne!(csrf_a, csrf_b, "a CSRF token per login");
        s.end(&with(&a));
        assert!(
            s.csrf(&with(&a)).is_none(),
            "logout ends the login on the server"
        );
        assert!(s.csrf(&with(&b)).is_some());
        assert!(s.csrf(&with("forged")).is_none());
    }
}
