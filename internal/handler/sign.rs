//! Signing requests (the book: Verifying signatures): Standard Webhooks (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`) and Feed's own
//! `Feed-Signature`, with one key per secret (several during a rotation).
//!
//! A request Feed signed for an item (whose body a producer chose) must
//! not pass for an event. `Feed-Signature` starts an event's string with
//! `v2 event` instead of `v2` and covers `Feed-Event`, so it never
//! verifies as the other kind. Standard Webhooks signs only the id, the
//! time and the body: there the id tells them apart (an event's is its
//! number; an item request's holds a `:`, `<id>:<version>`, or starts
//! with `batch_`), which an events receiver sharing the secret checks.

use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use sha2::Sha256;

use crate::config::signing::signing_key;
use crate::{Error, Result};

use crate::config::signing::SignatureScheme;

/// What a request delivers, which decides the string `Feed-Signature` signs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Item,
    Event,
}

/// The request headers an item's v2 signature covers, in this order; one
/// that is absent counts as empty.
pub const SIGNED_HEADERS: [&str; 6] = [
    "feed-item-id",
    "feed-partition-id",
    "feed-gate",
    "feed-attempt",
    "idempotency-key",
    "feed-batch",
];

/// The request headers an event's v2 signature covers, in this order.
pub const EVENT_SIGNED_HEADERS: [&str; 5] = [
    "feed-event",
    "feed-partition-id",
    "feed-gate",
    "feed-attempt",
    "idempotency-key",
];

/// [`SIGNED_HEADERS`] and [`EVENT_SIGNED_HEADERS`] as header names, built
/// once (a lookup by `&str` checks and hashes the name every time).
const ITEM_NAMES: [HeaderName; 6] = [
    HeaderName::from_static("feed-item-id"),
    HeaderName::from_static("feed-partition-id"),
    HeaderName::from_static("feed-gate"),
    HeaderName::from_static("feed-attempt"),
    HeaderName::from_static("idempotency-key"),
    HeaderName::from_static("feed-batch"),
];
const EVENT_NAMES: [HeaderName; 5] = [
    HeaderName::from_static("feed-event"),
    HeaderName::from_static("feed-partition-id"),
    HeaderName::from_static("feed-gate"),
    HeaderName::from_static("feed-attempt"),
    HeaderName::from_static("idempotency-key"),
];

/// `t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`: the first scheme, which
/// signs the body only (sent beside v2 with `--signature-v1`, items only).
pub fn signature(secret: &[u8], t: i64, body: &[u8]) -> String {
    let t = t.to_string();
    format!("t={t},v1={}", hex::encode(v1(&mac(secret), &t, body)))
}

/// An item request's v2 signature: hex HMAC-SHA256 of `v2`, the time and
/// each of [`SIGNED_HEADERS`]'s values, each followed by a newline, then
/// the body. Header values cannot hold a newline, so the string is
/// unambiguous, and no Feed header can be changed without breaking it.
pub fn signature_v2(secret: &[u8], t: i64, headers: &HeaderMap, body: &[u8]) -> String {
    hex::encode(v2(&mac(secret), Kind::Item, &t.to_string(), headers, body))
}

/// An event request's v2 signature: as [`signature_v2`], but the string
/// starts with `v2 event` and covers [`EVENT_SIGNED_HEADERS`].
pub fn event_signature_v2(secret: &[u8], t: i64, headers: &HeaderMap, body: &[u8]) -> String {
    hex::encode(v2(&mac(secret), Kind::Event, &t.to_string(), headers, body))
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length")
}

fn v1(key: &Hmac<Sha256>, t: &str, body: &[u8]) -> [u8; 32] {
    let mut mac = key.clone();
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

fn v2(key: &Hmac<Sha256>, kind: Kind, t: &str, headers: &HeaderMap, body: &[u8]) -> [u8; 32] {
    let mut mac = key.clone();
    let (first, names): (&[u8], &[HeaderName]) = match kind {
        Kind::Item => (b"v2\n", &ITEM_NAMES),
        Kind::Event => (b"v2 event\n", &EVENT_NAMES),
    };
    mac.update(first);
    mac.update(t.as_bytes());
    mac.update(b"\n");
    for name in names {
        mac.update(headers.get(name).map_or(&b""[..], |v| v.as_bytes()));
        mac.update(b"\n");
    }
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// Standard Webhooks: HMAC-SHA256 of `{id}.{t}.{body}`.
fn standard(key: &Hmac<Sha256>, id: &str, t: &str, body: &[u8]) -> [u8; 32] {
    let mut mac = key.clone();
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");
const FEED_SIGNATURE: HeaderName = HeaderName::from_static("feed-signature");

/// Signs requests with every key, in the schemes configured. Each key's
/// HMAC state is prepared once; a request costs one pass over its body
/// per key and scheme.
pub(crate) struct Signer {
    keys: Vec<Hmac<Sha256>>,
    scheme: SignatureScheme,
    /// Also v1 in `Feed-Signature` (items only: v1 signs the body alone,
    /// so it could not tell an event from an item).
    v1: bool,
}

impl Signer {
    /// The signer of `secrets` (given by `flag`); None when there is none
    /// (unsigned requests).
    pub(crate) fn new(
        flag: &str,
        secrets: &[String],
        scheme: SignatureScheme,
        v1: bool,
    ) -> Result<Option<Signer>> {
        if secrets.is_empty() {
            return Ok(None);
        }
        let keys = secrets
            .iter()
            .map(|s| signing_key(s).map(|k| mac(&k)))
            .collect::<Result<_>>()
            .map_err(|e| Error::Config(format!("{flag}: {e}")))?;
        Ok(Some(Signer { keys, scheme, v1 }))
    }

    /// Whether requests carry Standard Webhooks headers (and so need a `webhook-id`).
    pub(crate) fn standard(&self) -> bool {
        self.scheme.standard()
    }

    /// Adds the signature headers of a request to `out`: `feed` holds the
    /// Feed headers the request carries (which `Feed-Signature` covers),
    /// `id` is its `webhook-id`, `t` the Unix time.
    pub(crate) fn sign(
        &self,
        kind: Kind,
        out: &mut HeaderMap,
        feed: &HeaderMap,
        id: &str,
        body: &[u8],
        t: i64,
    ) {
        let t = t.to_string();
        if self.scheme.standard() {
            let mut sigs = String::with_capacity(self.keys.len() * 48);
            for key in &self.keys {
                if !sigs.is_empty() {
                    sigs.push(' ');
                }
                sigs.push_str("v1,");
                base64::engine::general_purpose::STANDARD
                    .encode_string(standard(key, id, &t, body), &mut sigs);
            }
            out.insert(WEBHOOK_ID, value(id.to_owned()));
            out.insert(WEBHOOK_TIMESTAMP, value(t.clone()));
            out.insert(WEBHOOK_SIGNATURE, value(sigs));
        }
        if self.scheme.feed() {
            let mut sig = String::with_capacity(16 + self.keys.len() * 2 * 68);
            sig.push_str("t=");
            sig.push_str(&t);
            if self.v1 && kind == Kind::Item {
                for key in &self.keys {
                    push_hex(&mut sig, ",v1=", v1(key, &t, body));
                }
            }
            for key in &self.keys {
                push_hex(&mut sig, ",v2=", v2(key, kind, &t, feed, body));
            }
            out.insert(FEED_SIGNATURE, value(sig));
        }
    }
}

/// Appends `label` and `mac` in hex to `out`.
fn push_hex(out: &mut String, label: &str, mac: [u8; 32]) {
    let mut hex = [0u8; 64];
    hex::encode_to_slice(mac, &mut hex).expect("64 hex digits");
    out.push_str(label);
    out.push_str(std::str::from_utf8(&hex).expect("hex is ASCII"));
}

/// A header value Feed built: ids already sent as header values, digits,
/// base64 and hex.
fn value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).expect("a signature header is printable ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [
            ("feed-item-id", "i1"),
            ("feed-partition-id", "p1"),
            ("feed-gate", "0"),
            ("feed-attempt", "1"),
            ("idempotency-key", "i1:3"),
        ] {
            h.insert(name, value.parse().unwrap());
        }
        h
    }

    #[test]
    fn feed_signatures() {
        // Reference value: printf '1.{}' | openssl dgst -sha256 -hmac k
        assert_eq!(
            signature(b"k", 1, b"{}"),
            "t=1,v1=3dd49b2593d0f9a349e9e71c4bde3e2b862c2be4003fe9b4ba81332029310158"
        );
        // v2 covers the Feed headers: reference from Python's hmac over
        // "v2\n1\ni1\np1\n0\n1\ni1:3\n\n{}".
        let mut h = item_headers();
        let v2 = "a4b418f7b1272c7e7fe75bda8f52adbc0a31d3ab9391ec74e179dba04a9fc997";
        assert_eq!(signature_v2(b"k", 1, &h, b"{}"), v2);
        // A signer takes keys of 16 bytes or more; the same string keyed
        // with 16 "k"s, also from Python's hmac.
        let sixteen = "k".repeat(16);
        let v2_16 = "73935579d9692987fba6979692851a7a38c37bc9928b0c3db157ea4b1ebfd84e";
        assert_eq!(signature_v2(sixteen.as_bytes(), 1, &h, b"{}"), v2_16);
        let signer = Signer::new("-", &[sixteen], SignatureScheme::Feed, false)
            .unwrap()
            .unwrap();
        let mut out = HeaderMap::new();
        signer.sign(Kind::Item, &mut out, &h, "i1:3", b"{}", 1);
        assert_eq!(out["feed-signature"], format!("t=1,v2={v2_16}").as_str());
        assert!(out.get("webhook-signature").is_none(), "feed scheme only");
        h.insert("feed-gate", "1".parse().unwrap());
        assert_ne!(
            signature_v2(b"k", 1, &h, b"{}"),
            v2,
            "a changed header breaks it"
        );
    }

    #[test]
    fn an_event_never_signs_an_item_string() {
        // The same headers and body signed as an item and as an event differ.
        let mut h = item_headers();
        h.insert("feed-event", "partition.complete".parse().unwrap());
        assert_ne!(
            signature_v2(b"k", 1, &h, b"{}"),
            event_signature_v2(b"k", 1, &h, b"{}")
        );
        // Reference from Python's hmac over "v2 event\n1\npartition.complete\np1\n0\n1\ni1:3\n{}".
        assert_eq!(
            event_signature_v2(b"k", 1, &h, b"{}"),
            "18cd8d9cf18112e40e51129105ab4f633dbe20f8d44bb7e77bc883b4e25ea946"
        );
    }

    #[test]
    fn header_names_are_the_documented_ones() {
        assert!(ITEM_NAMES.iter().map(HeaderName::as_str).eq(SIGNED_HEADERS));
        assert!(
            EVENT_NAMES
                .iter()
                .map(HeaderName::as_str)
                .eq(EVENT_SIGNED_HEADERS)
        );
    }

    #[test]
    fn standard_webhooks_as_the_reference_crate_signs() {
        // Two secrets (a rotation): one signature each, space-separated;
        // the third-party crate verifies each with its own secret.
        let (new, old) = (
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "old raw secret, 16+",
        );
        let secrets = [new.to_string(), old.to_string()];
        let signer = Signer::new("-", &secrets, SignatureScheme::Both, true)
            .unwrap()
            .unwrap();
        let body = br#"{"email":"test@example.com"}"#;
        let t = chrono::Utc::now().timestamp();
        let mut out = HeaderMap::new();
        signer.sign(Kind::Item, &mut out, &item_headers(), "i1:3", body, t);
        let reference = standardwebhooks::Webhook::new(new).unwrap();
        let expected = reference.sign("i1:3", t, body).unwrap();
        let sigs = out["webhook-signature"].to_str().unwrap();
        assert_eq!(sigs.split(' ').next(), Some(expected.as_str()));
        assert_eq!(out["webhook-id"], "i1:3");
        assert_eq!(out["webhook-timestamp"], t.to_string().as_str());
        reference.verify(body, &out).unwrap();
        let raw = standardwebhooks::Webhook::from_bytes(old.as_bytes().to_vec()).unwrap();
        raw.verify(body, &out).unwrap();
        assert!(reference.verify(b"{}", &out).is_err(), "another body");
        // Feed-Signature carries v1 and v2 of each key.
        let feed = out["feed-signature"].to_str().unwrap();
        assert_eq!(feed.matches(",v1=").count(), 2);
        assert_eq!(feed.matches(",v2=").count(), 2);
        // An event never carries v1 (it signs the body alone).
        let mut out = HeaderMap::new();
        signer.sign(Kind::Event, &mut out, &HeaderMap::new(), "7", body, t);
        let feed = out["feed-signature"].to_str().unwrap();
        assert!(!feed.contains("v1=") && feed.matches(",v2=").count() == 2);
        reference.verify(body, &out).unwrap();
    }
}
