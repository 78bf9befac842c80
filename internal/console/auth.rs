//! Who may act: the admin token, the login cookie and CSRF tokens.
//!
//! The cookie and the CSRF token are HMACs of the admin token with a fixed
//! purpose, so the token itself never leaves the server after login and no
//! session state is kept (several dashboards with one token agree).
//! Comparisons are constant-time.

use axum::http::{HeaderMap, StatusCode, header};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The login cookie's name.
pub const COOKIE: &str = "feed_console";

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
        let token = token.into();
        let bad = |why: &str| Err(crate::Error::Config(format!("--admin-token {why}")));
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

    fn derive(&self, purpose: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.0.as_bytes()).expect("any key length");
        mac.update(purpose.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `given` is the token.
    pub fn matches(&self, given: &str) -> bool {
        self.0.as_bytes().ct_eq(given.as_bytes()).into()
    }

    /// The value of the login cookie.
    pub fn cookie_value(&self) -> String {
        self.derive("feed console session v1")
    }

    /// The CSRF token put in every action form.
    pub fn csrf(&self) -> String {
        self.derive("feed console csrf v1")
    }

    /// Whether `given` is this token's CSRF token.
    pub fn csrf_matches(&self, given: &str) -> bool {
        self.csrf().as_bytes().ct_eq(given.as_bytes()).into()
    }
}

/// Why an action was refused, as an HTTP status and a message.
pub type Refusal = (StatusCode, &'static str);

const NO_TOKEN: Refusal = (
    StatusCode::FORBIDDEN,
    "actions are disabled: start the dashboard with --admin-token or --admin-token-file",
);

/// API actions: `Authorization: Bearer <token>`.
pub fn check_bearer(token: Option<&AdminToken>, headers: &HeaderMap) -> Result<(), Refusal> {
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

/// Whether the request comes from a logged-in browser.
pub fn logged_in(token: Option<&AdminToken>, headers: &HeaderMap) -> bool {
    match (token, cookie(headers)) {
        (Some(t), Some(c)) => t.cookie_value().as_bytes().ct_eq(c.as_bytes()).into(),
        _ => false,
    }
}

/// Page actions: the login cookie and the form's CSRF token.
pub fn check_form(
    token: Option<&AdminToken>,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<(), Refusal> {
    let t = token.ok_or(NO_TOKEN)?;
    if !logged_in(token, headers) {
        return Err((
            StatusCode::UNAUTHORIZED,
            "log in with the admin token first",
        ));
    }
    if !t.csrf_matches(csrf) {
        return Err((
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong; reload the page and try again",
        ));
    }
    Ok(())
}

/// `Set-Cookie` for a successful login: HttpOnly, SameSite=Strict, 12
/// hours, and `Secure` when a proxy says the browser uses HTTPS.
pub fn login_cookie(token: &AdminToken, https: bool) -> String {
    let secure = if https { "; Secure" } else { "" };
    format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200{secure}",
        token.cookie_value()
    )
}

/// `Set-Cookie` that logs out.
pub fn logout_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_token() {
        let t = AdminToken::new("s3cret-t0ken-s3cret").unwrap();
        assert!(!format!("{t:?}").contains("s3cret"));
        assert!(!t.cookie_value().contains("s3cret"));
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
}
