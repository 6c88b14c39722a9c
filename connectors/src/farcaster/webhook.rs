//! Neynar webhooks: checking `X-Neynar-Signature` and reading a `cast.created` event.
//!
//! The signature is the hex HMAC-SHA512 of the raw body, keyed with the webhook's shared
//! secret; it is compared in constant time. Only casts that mention the bot or reply to it
//! are handed on; everything else is acknowledged and dropped.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha512;

use super::config::{Fid, Secret};
use super::normalize;
use super::wire::{Cast, WebhookEvent};

pub(crate) const SIGNATURE_HEADER: &str = "x-neynar-signature";

/// Whether `signature` (hex, either case) is the HMAC-SHA512 of `body` under `secret`.
pub(crate) fn verify(secret: &Secret, body: &[u8], signature: &str) -> bool {
    let Ok(expected) = hex::decode(signature.trim()) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha512>::new_from_slice(secret.expose().as_bytes()) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// The hex HMAC-SHA512 of `body` under `secret`, as Neynar computes it.
#[cfg(test)]
pub(crate) fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha512>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// What a verified delivery comes to.
#[derive(Debug)]
pub(crate) enum Event {
    /// A cast addressed to the bot.
    ForUs(Box<Cast>),
    /// Acknowledged and dropped; the reason is for the log and the response body.
    Ignored(&'static str),
}

/// Reads a verified body. An error is a body that is not a Neynar event (400).
pub(crate) fn decode(body: &[u8], bot: Fid) -> Result<Event, String> {
    let event: WebhookEvent =
        serde_json::from_slice(body).map_err(|e| format!("not a Neynar webhook event: {e}"))?;
    if event.kind != "cast.created" {
        return Ok(Event::Ignored("not a cast.created event"));
    }
    let cast: Cast = serde_json::from_value(event.data)
        .map_err(|e| format!("cast.created without a readable cast: {e}"))?;
    if cast.author.fid == bot.0 {
        return Ok(Event::Ignored("the bot's own cast"));
    }
    if !normalize::addresses(&cast, bot) {
        return Ok(Event::Ignored(
            "the cast neither mentions the bot nor replies to it",
        ));
    }
    Ok(Event::ForUs(Box::new(cast)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::farcaster::normalize::tests::cast_json;
    use serde_json::json;

    fn secret() -> Secret {
        Secret::new("whsec-test")
    }

    #[test]
    fn a_good_signature_verifies_and_a_bad_one_does_not() {
        let body = br#"{"type":"cast.created","data":{}}"#;
        let sig = sign("whsec-test", body);
        assert_eq!(sig.len(), 128, "SHA-512 in hex");
        assert!(verify(&secret(), body, &sig));
        assert!(verify(&secret(), body, &sig.to_uppercase()));
        // Another body, another secret, a truncated or garbage signature: all refused.
        assert!(!verify(&secret(), b"{}", &sig));
        assert!(!verify(&Secret::new("other"), body, &sig));
        assert!(!verify(&secret(), body, &sig[..64]));
        assert!(!verify(&secret(), body, "zz"));
        assert!(!verify(&secret(), body, ""));
    }

    #[test]
    fn known_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
    }

    #[test]
    fn only_casts_for_the_bot_are_taken() {
        let bot = Fid(42);
        let mut mention = cast_json("0x1", 7, "@fern hi");
        mention["mentioned_profiles"] = json!([{"fid": 42, "username": "fern"}]);
        let body = json!({"created_at": 1, "type": "cast.created", "data": mention});
        assert!(matches!(
            decode(body.to_string().as_bytes(), bot),
            Ok(Event::ForUs(_))
        ));

        let other =
            json!({"created_at": 1, "type": "cast.created", "data": cast_json("0x2", 7, "hi")});
        assert!(matches!(
            decode(other.to_string().as_bytes(), bot),
            Ok(Event::Ignored(_))
        ));

        let own = json!({"type": "cast.created", "data": cast_json("0x3", 42, "me")});
        assert!(matches!(
            decode(own.to_string().as_bytes(), bot),
            Ok(Event::Ignored(_))
        ));

        let follow = json!({"type": "follow.created", "data": {}});
        assert!(matches!(
            decode(follow.to_string().as_bytes(), bot),
            Ok(Event::Ignored(_))
        ));

        assert!(decode(b"not json", bot).is_err());
        assert!(decode(br#"{"type":"cast.created","data":{"nope":1}}"#, bot).is_err());
    }
}
