//! Posting a reply as casts: split to the byte limit, each chunk a reply to the one before,
//! each with an idempotency key derived from the reply's key and the chunk's position, so a
//! retried delivery finds the casts it already made instead of making them again.

use crate::sync::Locked;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::api::Neynar;
use super::config::{Fid, Secret};
use super::wire::PublishCast;
use crate::connector::{ConnectorError, Delivery};
use crate::model::{MessageId, Outbound};
use crate::split;

/// Cast hashes whose authors the connector saw, so a reply can name its parent's author
/// without a lookup.
const AUTHORS_CAP: usize = 4096;

/// Neynar's `idem` for chunk `index` of the reply with `key`: 16 hex characters (the
/// length Neynar recommends), the same on every retry and in every process.
pub(crate) fn idem_key(key: &str, index: usize) -> String {
    let mut hasher = Sha256::new();
    hasher.update(key.as_bytes());
    hasher.update([0u8]);
    hasher.update((index as u64).to_be_bytes());
    let digest = hasher.finalize();
    hex::encode(&digest[..8])
}

/// The chunks a reply is cast as: each at most `limit` bytes, never cut inside a character.
pub(crate) fn chunks(text: &str, limit: usize) -> Vec<String> {
    split::split_text(text, limit, split::bytes)
}

/// A bounded map from cast hash to author FID.
#[derive(Default)]
pub(crate) struct Authors {
    inner: Mutex<(HashMap<String, u64>, VecDeque<String>)>,
}

impl Authors {
    pub(crate) fn remember(&self, hash: &str, fid: u64) {
        let mut guard = self.inner.locked();
        let (map, order) = &mut *guard;
        if map.insert(hash.to_string(), fid).is_none() {
            order.push_back(hash.to_string());
        }
        while order.len() > AUTHORS_CAP {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    pub(crate) fn get(&self, hash: &str) -> Option<u64> {
        let guard = self.inner.locked();
        guard.0.get(hash).copied()
    }
}

/// Who wrote `hash`: from memory, else asked of Neynar (and remembered).
pub(crate) async fn author_of(
    api: &Neynar,
    authors: &Authors,
    hash: &str,
) -> Result<u64, ConnectorError> {
    if let Some(fid) = authors.get(hash) {
        return Ok(fid);
    }
    let cast = api.cast(hash).await?;
    authors.remember(hash, cast.author.fid);
    Ok(cast.author.fid)
}

/// The parent's author for a reply. Best effort: the field is optional.
async fn parent_author(api: &Neynar, authors: &Authors, hash: &str) -> Option<u64> {
    author_of(api, authors, hash)
        .await
        .inspect_err(|e| {
            tracing::debug!(error = %e, "could not look up the parent cast's author; posting without it");
        })
        .ok()
}

/// Where the first cast of a message goes: under the cast it answers, under its thread's
/// root, or at the top level: `feed` (the account's own feed) and `channel:<name>` (a
/// channel) are the rooms of autonomous posts (issue 34), which answer nothing.
fn first_parent(reply: &Outbound) -> (Option<String>, Option<&str>) {
    if let Some(hash) = &reply.reply_to {
        return (Some(hash.as_str().to_string()), None);
    }
    let id = reply.room.id.as_str();
    if id == FEED {
        return (None, None);
    }
    if let Some(channel) = id.strip_prefix(CHANNEL_PREFIX) {
        return (None, Some(channel));
    }
    let root = reply.room.send_to.clone().unwrap_or_else(|| id.to_string());
    (Some(root), None)
}

/// The room of the account's own feed.
pub const FEED: &str = "feed";
/// The prefix of a channel's room (`channel:memes`).
pub const CHANNEL_PREFIX: &str = "channel:";

/// Casts `reply` under `reply.reply_to` (or the thread's root, or at the top level of the
/// feed or a channel), chunk after chunk, each later chunk under the one before.
pub(crate) async fn send(
    api: &Neynar,
    authors: &Authors,
    signer: &Secret,
    bot: Fid,
    limit: usize,
    reply: &Outbound,
) -> Result<Delivery, ConnectorError> {
    let parts = chunks(&reply.text, limit);
    let (mut parent, mut channel) = first_parent(reply);
    let mut parent_fid = match &parent {
        Some(hash) => parent_author(api, authors, hash).await,
        None => None,
    };
    let mut delivery = Delivery::default();
    for (index, text) in parts.iter().enumerate() {
        let idem = idem_key(&reply.key, index);
        let hash = api
            .publish(&PublishCast {
                signer_uuid: signer.expose(),
                text,
                parent: parent.as_deref(),
                parent_author_fid: parent_fid,
                channel_id: channel.take(),
                idem: &idem,
            })
            .await?;
        authors.remember(&hash, bot.0);
        delivery.message_ids.push(MessageId::new(hash.clone()));
        parent = Some(hash);
        parent_fid = Some(bot.0);
    }
    Ok(delivery)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posts_go_to_the_top_level_of_the_feed_or_a_channel() {
        use crate::model::{Platform, RoomId, RoomRef};
        let out = |room: &str, reply_to: Option<&str>| Outbound {
            key: "k".into(),
            room: RoomRef::new(Platform::Farcaster, RoomId::new(room)),
            text: "t".into(),
            reply_to: reply_to.map(MessageId::new),
            replaces: Vec::new(),
        };
        assert_eq!(first_parent(&out("feed", None)), (None, None));
        assert_eq!(
            first_parent(&out("channel:memes", None)),
            (None, Some("memes"))
        );
        assert_eq!(
            first_parent(&out("0xroot", None)),
            (Some("0xroot".into()), None)
        );
        assert_eq!(
            first_parent(&out("0xroot", Some("0xc"))),
            (Some("0xc".into()), None)
        );
    }

    #[test]
    fn idem_is_stable_short_and_distinct() {
        let a = idem_key("reply-1", 0);
        assert_eq!(a, idem_key("reply-1", 0), "the same on a retry");
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, idem_key("reply-1", 1), "each chunk has its own");
        assert_ne!(a, idem_key("reply-2", 0), "each reply has its own");
        // Fixed across builds and processes (no random hasher).
        assert_eq!(idem_key("k", 0), idem_key(&String::from("k"), 0));
        assert_eq!(idem_key("k", 0), "19305fc112814ade");
    }

    #[test]
    fn multibyte_text_is_split_on_character_boundaries_within_the_byte_limit() {
        // 700 bytes of 2-, 3- and 4-byte characters with spaces.
        let unit = "é日本🌊 ";
        let text: String = unit.repeat(700 / unit.len() + 1);
        let parts = chunks(&text, 320);
        assert!(parts.len() >= 3, "{}", parts.len());
        for p in &parts {
            assert!(p.len() <= 320, "{} bytes", p.len());
            assert!(std::str::from_utf8(p.as_bytes()).is_ok());
        }
        let rejoined: String = parts.join(" ");
        assert_eq!(
            rejoined.split_whitespace().collect::<Vec<_>>(),
            text.split_whitespace().collect::<Vec<_>>()
        );
        // No spaces at all: still cut between characters.
        let dense = "日".repeat(300);
        let parts = chunks(&dense, 320);
        assert!(parts.iter().all(|p| p.len() <= 320));
        assert_eq!(parts.concat(), dense);
        // Long casts.
        assert_eq!(chunks(&dense, 1024).len(), 1);
    }

    #[test]
    fn authors_are_remembered_and_bounded() {
        let authors = Authors::default();
        authors.remember("0x1", 7);
        assert_eq!(authors.get("0x1"), Some(7));
        for i in 0..(AUTHORS_CAP + 10) {
            authors.remember(&format!("0xa{i}"), 1);
        }
        assert_eq!(authors.get("0x1"), None);
        assert_eq!(authors.get(&format!("0xa{}", AUTHORS_CAP + 9)), Some(1));
    }
}
