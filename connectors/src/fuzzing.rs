//! Byte-level entry points for the cargo-fuzz targets in `fuzz/` (feature `fuzzing`), and
//! the test that replays their committed corpora (see `docs/security.md`, "Fuzzing").
//!
//! Each function takes what arrives from the platform, as raw bytes, and runs it through the
//! same reading and normalizing the connector does on a live event; the results are thrown
//! away. A panic, a stack overflow or a hang in here is a bug in the connector. This is not an
//! API: nothing outside the fuzz targets may call it, and the normalizers stay private.

use crate::discord::fuzz as discord;
use crate::farcaster::fuzz as farcaster;
use crate::telegram::fuzz as telegram;

/// A Telegram webhook body (or one `getUpdates` item): read as teloxide's `Update`, as
/// `receive_webhook` does, then normalized for a bot with a username, under an open and a
/// restrictive group policy.
pub fn telegram_update(bytes: &[u8]) {
    if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err() {
        return;
    }
    let Ok(update) = serde_json::from_slice::<teloxide::types::Update>(bytes) else {
        return;
    };
    let me = telegram::BotIdentity {
        id: 123,
        username: Some("tess_bot".into()),
    };
    let policies = [
        telegram::GroupPolicy::default(),
        telegram::GroupPolicy {
            only_join_allowed: true,
            allowed: Some(vec!["-100123".into(), "-100200:5".into()]),
        },
    ];
    for policy in &policies {
        let _ = telegram::normalize(&update, &me, policy);
    }
}

/// A Discord MESSAGE_CREATE `d` object. Live events are read by serenity, turned back into
/// JSON and normalized (`gateway::Handler::message`); catch-up reads the same object from
/// REST as JSON (`Receiver::catch_up`). Both paths run.
pub fn discord_message_create(bytes: &[u8]) {
    let me = discord::Snowflake(900);
    if let Ok(message) = serde_json::from_slice::<serenity::model::channel::Message>(bytes)
        && let Some(msg) = serde_json::to_value(&message).ok().and_then(discord::parse)
    {
        let _ = discord::Snowflake::parse(&msg.id);
        let _ = discord::to_inbound(&msg, me, discord::Place::FromPayload);
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes)
        && let Some(msg) = discord::parse(value)
    {
        for place in [discord::Place::Direct, discord::Place::Guild] {
            let _ = discord::to_inbound(&msg, me, place);
        }
    }
}

/// A Neynar body: as a verified `cast.created` webhook delivery (`webhook::decode` then the
/// normalizer), as a notifications page (`poll::sift` then the normalizer), and as a bare
/// cast (`GET /v2/farcaster/cast`).
pub fn neynar_cast(bytes: &[u8]) {
    let bot = farcaster::Fid(42);
    if let Ok(farcaster::Event::ForUs(cast)) = farcaster::decode(bytes, bot) {
        let _ = farcaster::to_inbound(&cast, bot, farcaster::Hint::default());
    }
    if let Ok(page) = serde_json::from_slice::<farcaster::NotificationsPage>(bytes) {
        let _ = page.next_cursor();
        let (fresh, _) = farcaster::sift(&page, None);
        for candidate in fresh {
            let _ = farcaster::to_inbound(&candidate.cast, bot, candidate.hint);
        }
    }
    if let Ok(cast) = serde_json::from_slice::<farcaster::Cast>(bytes) {
        let _ = farcaster::to_inbound(&cast, bot, farcaster::Hint::default());
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every committed corpus file of `target`, replayed through `run`: a corpus entry that
    /// panics today fails CI without fuzzing there.
    fn replay(target: &str, run: fn(&[u8])) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("the corpus {} is missing: {e}", dir.display()));
        let mut n = 0;
        for entry in entries {
            let path = entry.expect("a corpus entry").path();
            let bytes = std::fs::read(&path).expect("a readable corpus file");
            run(&bytes);
            n += 1;
        }
        assert!(n > 0, "the corpus {} is empty", dir.display());
    }

    #[test]
    fn telegram_update_corpus_replays() {
        replay("telegram_update", super::telegram_update);
    }

    #[test]
    fn discord_message_create_corpus_replays() {
        replay("discord_message_create", super::discord_message_create);
    }

    #[test]
    fn neynar_cast_corpus_replays() {
        replay("neynar_cast", super::neynar_cast);
    }
}
