//! What signing needs besides the HMACs: the key a secret stands for, and
//! the `webhook-id` of a request (the book: Verifying signatures).

use std::borrow::Cow;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::Result;
use crate::config::signing::signing_key;

/// The events secret that goes with a signing secret, as `whsec_<base64>`:
/// an HMAC of a fixed label keyed with the signing key. Events are signed
/// with it unless `--events-signing-secret` is given, so that an item
/// request, whose body a producer chooses, never verifies as an event with
/// a plain Standard Webhooks check (`processor events secret` prints it
/// for the events receiver).
pub fn events_secret(signing_secret: &str) -> Result<String> {
    let key = signing_key(signing_secret)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(b"feed events secret v1");
    let derived = mac.finalize().into_bytes();
    Ok(format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(derived)
    ))
}

/// The `webhook-id` of an item's step: its `Idempotency-Key`, with `%`
/// and `.` percent-encoded. The spec asks for an id without `.`, or an
/// item id chosen by a producer could shift where the signed string's
/// id ends; the encoding is one to one, so retries keep the same id.
pub fn webhook_id(idempotency_key: &str) -> Cow<'_, str> {
    if !idempotency_key.contains(['.', '%']) {
        return Cow::Borrowed(idempotency_key);
    }
    let mut out = String::with_capacity(idempotency_key.len() + 8);
    for c in idempotency_key.chars() {
        match c {
            '%' => out.push_str("%25"),
            '.' => out.push_str("%2E"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The `webhook-id` of a batch request: `batch_` and a hash of its items'
/// idempotency keys, so a batch of the same steps sent again has the same id.
pub fn batch_webhook_id<'a>(keys: impl IntoIterator<Item = &'a str>) -> String {
    let mut hash = Sha256::new();
    for key in keys {
        hash.update(key.as_bytes());
        hash.update(b"\n");
    }
    format!("batch_{}", hex::encode(&hash.finalize()[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_ids() {
        assert_eq!(
            signing_key("a raw secret, 16+").unwrap(),
            b"a raw secret, 16+"
        );
        let sixteen = "whsec_AAECAwQFBgcICQoLDA0ODw";
        assert_eq!(
            signing_key(sixteen).unwrap(),
            (0..16).collect::<Vec<u8>>(),
            "unpadded"
        );
        assert_eq!(signing_key(&format!("{sixteen}==")).unwrap().len(), 16);
        assert!(signing_key("whsec_not base64!").is_err());
        assert!(signing_key("").is_err() && signing_key("whsec_").is_err());
        for short in ["whsec_QUJD", "short", "fifteen bytes!!"] {
            let e = signing_key(short).unwrap_err().to_string();
            assert!(e.contains("under the 16"), "{short}: {e}");
        }
        let events = events_secret(sixteen).unwrap();
        assert!(events.starts_with("whsec_") && events != sixteen);
        assert_eq!(signing_key(&events).unwrap().len(), 32);
        assert_eq!(events, events_secret(sixteen).unwrap(), "stable");
        assert_ne!(events, events_secret("another raw secret").unwrap());
        assert_eq!(webhook_id("i1:3"), "i1:3");
        assert_eq!(webhook_id("a.b%c:2"), "a%2Eb%25c:2");
        assert_ne!(webhook_id("a.b:2"), webhook_id("a%2Eb:2"));
        let one = batch_webhook_id(["a:1", "b:1"]);
        assert_eq!(one, batch_webhook_id(["a:1", "b:1"]));
        assert_ne!(one, batch_webhook_id(["a:1", "b:2"]));
        assert!(one.starts_with("batch_") && one.len() == 38);
    }
}
