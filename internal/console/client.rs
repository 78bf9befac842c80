//! Who a request comes from. By default, the peer of the connection.
//! Behind a reverse proxy every request comes from the proxy, so one
//! guesser would use up everyone's allowance of wrong tokens: with
//! `--trusted-proxy`, a request whose peer is a trusted proxy is counted
//! against the address that proxy names in `X-Forwarded-For`. The header
//! is read from the right (the hop nearest to us, written by the proxy
//! itself) past the trusted proxies; a client cannot forge what is to the
//! right of what it sent, so it cannot pose as another address. From any
//! other peer the header is ignored.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use ipnet::IpNet;

use super::{ClientAddr, Console};

/// A `--trusted-proxy` value: an address (`10.0.0.7`, `::1`) or a network
/// (`10.0.0.0/8`).
pub fn parse_proxy(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!("{text:?} is neither an IP address nor a network (e.g. 10.0.0.7 or 10.0.0.0/8)")
        })
}

/// Whether `ip` is one of the `--trusted-proxy` ranges.
pub(crate) fn trusted(proxies: &[IpNet], ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    proxies.iter().any(|p| p.contains(&ip))
}

/// One `X-Forwarded-For` entry: an address, maybe with a port or brackets.
fn entry(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| text.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
        .map(|ip| ip.to_canonical())
}

/// The client a trusted `peer` forwards for; None when `peer` is not a
/// trusted proxy or names no client.
pub(super) fn forwarded_for(
    proxies: &[IpNet],
    peer: IpAddr,
    headers: &axum::http::HeaderMap,
) -> Option<IpAddr> {
    if !trusted(proxies, peer) {
        return None;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    let mut nearest = None;
    for hop in hops.iter().rev() {
        // A hop that is not an address ends the chain we can follow: the
        // last trusted hop before it stands for the client.
        let Some(ip) = entry(hop) else {
            return nearest;
        };
        if !trusted(proxies, ip) {
            return Some(ip);
        }
        nearest = Some(ip);
    }
    nearest
}

/// Replaces the request's [`ClientAddr`] by the client a trusted proxy
/// forwards for.
pub(super) async fn resolve(State(c): State<Console>, mut req: Request, next: Next) -> Response {
    if c.trusted_proxies.is_empty() {
        return next.run(req).await;
    }
    let peer = req.extensions().get::<ClientAddr>().map(|c| c.0.ip());
    if let Some(ip) = peer.and_then(|p| forwarded_for(&c.trusted_proxies, p, req.headers())) {
        req.extensions_mut()
            .insert(ClientAddr(SocketAddr::new(ip, 0)));
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn proxies_parse() {
        assert_eq!(parse_proxy("10.0.0.7").unwrap().to_string(), "10.0.0.7/32");
        assert_eq!(parse_proxy("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_proxy(" ::1 ").unwrap().to_string(), "::1/128");
        assert!(parse_proxy("proxy.example").is_err());
        assert!(parse_proxy("10.0.0.0/33").is_err());
    }

    #[test]
    fn the_client_is_the_first_untrusted_hop_from_the_right() {
        let proxies = [parse_proxy("10.0.0.0/8").unwrap()];
        let from = |peer: &str, h: &[&str]| forwarded_for(&proxies, ip(peer), &headers(h));
        // An untrusted peer's header is ignored.
        assert_eq!(from("192.0.2.1", &["203.0.113.5"]), None);
        assert_eq!(from("10.0.0.1", &["203.0.113.5"]), Some(ip("203.0.113.5")));
        // What the client wrote itself (left) cannot hide it.
        assert_eq!(
            from("10.0.0.1", &["1.1.1.1, 203.0.113.5, 10.0.0.2"]),
            Some(ip("203.0.113.5"))
        );
        assert_eq!(
            from("10.0.0.1", &["1.1.1.1", "203.0.113.5:4711"]),
            Some(ip("203.0.113.5"))
        );
        assert_eq!(
            from("10.0.0.1", &["[2001:db8::1]"]),
            Some(ip("2001:db8::1"))
        );
        assert_eq!(from("10.0.0.1", &["10.0.0.9"]), Some(ip("10.0.0.9")));
        assert_eq!(from("10.0.0.1", &["junk, 10.0.0.9"]), Some(ip("10.0.0.9")));
        assert_eq!(from("10.0.0.1", &["junk"]), None);
        assert_eq!(from("10.0.0.1", &[]), None);
        assert_eq!(
            from("::ffff:10.0.0.1", &["203.0.113.5"]),
            Some(ip("203.0.113.5"))
        );
    }
}
