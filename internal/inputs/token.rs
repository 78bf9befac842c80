//! The capability in an inputs URL: an HMAC-SHA256, under a key this
//! process draws at start, of the partition, the gate and the expiry the
//! URL names. Only this process can make one, so a token read from a URL
//! opens that partition's inputs at that gate until then, and nothing
//! else; the key is never written anywhere, so a restart voids them all.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not made by this process for this partition, gate and expiry: made
    /// for another, changed, or made before a restart.
    #[error(
        "this inputs URL does not open partition {partition:?} at gate {gate}: it was made for \
         another partition or gate, was changed, or comes from before this processor restarted"
    )]
    Forged {
        /// The partition asked for.
        partition: String,
        /// The gate asked for.
        gate: i64,
    },
    /// Genuine, but past its expiry.
    #[error(
        "this inputs URL expired {ago_ms} ms ago; each delivery carries a fresh one in Feed-Inputs"
    )]
    Expired {
        /// How long ago, in milliseconds.
        ago_ms: i64,
    },
}

/// The key tokens are made and checked with, drawn at random per process.
pub(super) struct Key(Hmac<Sha256>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(***)")
    }
}

impl Key {
    /// A key of 256 random bits.
    pub(super) fn random() -> Key {
        Key::from_bytes(&rand::random::<[u8; 32]>())
    }

    fn from_bytes(bytes: &[u8]) -> Key {
        Key(Hmac::new_from_slice(bytes).expect("HMAC takes any key length"))
    }

    /// The MAC of what a token grants; the partition goes in with its
    /// length, so no two grants write the same bytes.
    fn mac(&self, partition: &str, gate: i64, expires: i64) -> Hmac<Sha256> {
        let mut mac = self.0.clone();
        mac.update(b"feed-inputs v1\n");
        mac.update(&(partition.len() as u64).to_be_bytes());
        mac.update(partition.as_bytes());
        mac.update(&gate.to_be_bytes());
        mac.update(&expires.to_be_bytes());
        mac
    }

    /// The token that opens `partition`'s inputs at `gate` until
    /// `expires` (epoch milliseconds): 43 characters of base64url.
    pub(super) fn token(&self, partition: &str, gate: i64, expires: i64) -> String {
        let mac = self.mac(partition, gate, expires).finalize().into_bytes();
        URL_SAFE_NO_PAD.encode(mac)
    }

    /// Whether `token` opens `partition`'s inputs at `gate` with the
    /// expiry `expires`, at `now` (epoch milliseconds). The MAC is
    /// compared in constant time, and checked first: only a genuine
    /// token is told that it expired.
    pub(super) fn check(
        &self,
        partition: &str,
        gate: i64,
        expires: i64,
        token: &str,
        now: i64,
    ) -> Result<(), Refused> {
        let forged = || Refused::Forged {
            partition: partition.into(),
            gate,
        };
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| forged())?;
        self.mac(partition, gate, expires)
            .verify_slice(&bytes)
            .map_err(|_| forged())?;
        if now > expires {
            return Err(Refused::Expired {
                ago_ms: now - expires,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn a_token_opens_its_partition_and_gate_until_it_expires() {
        let key = Key::random();
        let t = key.token("p1", 2, NOW + 40_000);
        assert_eq!(t.len(), 43);
        assert_eq!(key.check("p1", 2, NOW + 40_000, &t, NOW), Ok(()));
        // Up to its expiry, included.
        assert_eq!(key.check("p1", 2, NOW + 40_000, &t, NOW + 40_000), Ok(()));
        assert_eq!(
            key.check("p1", 2, NOW + 40_000, &t, NOW + 40_001),
            Err(Refused::Expired { ago_ms: 1 })
        );
    }

    #[test]
    fn another_partition_gate_expiry_or_key_is_refused() {
        let key = Key::random();
        let expires = NOW + 40_000;
        let t = key.token("p1", 2, expires);
        let forged = |p: &str, g| {
            Err(Refused::Forged {
                partition: p.into(),
                gate: g,
            })
        };
        assert_eq!(key.check("p2", 2, expires, &t, NOW), forged("p2", 2));
        assert_eq!(key.check("p1", 1, expires, &t, NOW), forged("p1", 1));
        assert_eq!(key.check("p1", 3, expires, &t, NOW), forged("p1", 3));
        // A later expiry written into the URL breaks the MAC.
        assert_eq!(key.check("p1", 2, expires + 1, &t, NOW), forged("p1", 2));
        // Another process (or this one after a restart) has another key.
        assert_eq!(
            Key::random().check("p1", 2, expires, &t, NOW),
            forged("p1", 2)
        );
        // Not base64url, cut short, empty, one character changed.
        for bad in ["", "!!!", &t[..42], &format!("{}A", &t[..42])] {
            if bad != t {
                assert_eq!(
                    key.check("p1", 2, expires, bad, NOW),
                    forged("p1", 2),
                    "{bad}"
                );
            }
        }
        // A forged token is never told it expired.
        assert_eq!(
            key.check("p2", 2, expires, &t, expires + 1),
            forged("p2", 2)
        );
    }

    #[test]
    fn grants_that_would_write_the_same_bytes_differ() {
        // Without the length, "ab" + gate could pose as "a" + other bytes.
        let key = Key::from_bytes(b"fixed key for the test");
        assert_ne!(key.token("a", 1, 2), key.token("a\0", 1, 2));
        assert_ne!(key.token("ab", 1, 2), key.token("a", 1, 2));
        // The same grant, the same token (the URL is deterministic).
        assert_eq!(key.token("a", 1, 2), key.token("a", 1, 2));
    }

    #[test]
    fn the_key_never_shows() {
        assert_eq!(format!("{:?}", Key::random()), "Key(***)");
    }
}
