//! Signing settings as values: which signatures requests carry, and the
//! key a secret stands for (checked when the settings are, so a bad
//! secret stops the command before anything is sent).

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::{Error, Result};

/// Which signatures a request carries (`--signature-scheme`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureScheme {
    /// Standard Webhooks and `Feed-Signature`.
    #[default]
    Both,
    /// Standard Webhooks only.
    Standard,
    /// `Feed-Signature` only.
    Feed,
}

impl SignatureScheme {
    pub(crate) fn standard(self) -> bool {
        self != SignatureScheme::Feed
    }

    pub(crate) fn feed(self) -> bool {
        self != SignatureScheme::Standard
    }
}

/// `whsec_` secrets are base64, padded or not, as the reference libraries read them.
const WHSEC: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The fewest bytes a signing key may have: shorter keys can be guessed
/// offline from one signed request. The Standard Webhooks spec asks for
/// 24 to 64; `openssl rand -base64 32` makes 32.
pub const MIN_KEY_BYTES: usize = 16;

/// The HMAC key of a secret: `whsec_<base64>` is the decoded bytes (the
/// Standard Webhooks form); any other text is its own bytes (what Feed
/// always used, and what the libraries call a raw secret). An empty or
/// short key is refused: it would sign without protecting anything.
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
        return Err(Error::Invalid(
            "a signing secret is empty; give one (e.g. `echo whsec_$(openssl rand -base64 32)`) \
             or leave the flag out to send unsigned requests"
                .into(),
        ));
    }
    if key.len() < MIN_KEY_BYTES {
        return Err(Error::Invalid(format!(
            "a signing secret's key is {} bytes, under the {MIN_KEY_BYTES} a key needs to resist \
             guessing; generate one, e.g. `echo whsec_$(openssl rand -base64 32)`",
            key.len()
        )));
    }
    Ok(key)
}

/// Checks every secret given to `flag`, naming the flag when one is bad.
pub(crate) fn check_secrets(flag: &str, secrets: &[String]) -> Result<()> {
    for s in secrets {
        signing_key(s).map_err(|e| Error::Config(format!("{flag}: {e}")))?;
    }
    Ok(())
}
