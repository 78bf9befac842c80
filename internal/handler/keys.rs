//! What signing needs besides the HMACs: the key a secret stands for, and
//! the `webhook-id` of a request (the book: Verifying signatures).

use std::borrow::Cow;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// `whsec_` secrets are base64, padded or not, as the reference libraries read them.
const WHSEC: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The HMAC key of a secret: `whsec_<base64>` is the decoded bytes (the
/// Standard Webhooks form); any other text is its own bytes (what Feed
/// always used, and what the libraries call a raw secret).
pub fn signing_key(secret: &str) -> Result<Vec<u8>> {
    let key = match secret.strip_prefix("whsec_") {
        Some(b64) => WHSEC.decode(b64).map_err(|_| {
            Error::Invalid(
                "a secret starting with whsec_ must be base64 after the prefix (the Standard \
                 Webhooks form); give any other secret without the prefix"
                    .into(),
            )
        })?,
        None => secret.as_bytes().to_vec(),
    };
    if key.is_empty() {
        return Err(Error::Invalid("a signing secret is empty".into()));
    }
    Ok(key)
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
        assert_eq!(signing_key("raw secret").unwrap(), b"raw secret");
        assert_eq!(signing_key("whsec_AAEC").unwrap(), [0, 1, 2]);
        assert_eq!(signing_key("whsec_AAE").unwrap(), [0, 1], "unpadded");
        assert!(signing_key("whsec_not base64!").is_err());
        assert!(signing_key("").is_err() && signing_key("whsec_").is_err());
        assert_eq!(webhook_id("i1:3"), "i1:3");
        assert_eq!(webhook_id("a.b%c:2"), "a%2Eb%25c:2");
        assert_ne!(webhook_id("a.b:2"), webhook_id("a%2Eb:2"));
        let one = batch_webhook_id(["a:1", "b:1"]);
        assert_eq!(one, batch_webhook_id(["a:1", "b:1"]));
        assert_ne!(one, batch_webhook_id(["a:1", "b:2"]));
        assert!(one.starts_with("batch_") && one.len() == 38);
    }
}
