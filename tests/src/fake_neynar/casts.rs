//! The casts the fake Neynar holds, and the routes that read them: notifications (cursor
//! pages, newest first, mentions and replies to the bot), a cast by hash, a conversation
//! with its replies, and users in bulk; each cast rendered with the fields Neynar sends.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{EPOCH_SECS, Inner, Refusal, Route, Shared, StoredCast, finish, front, neynar_error};

pub(super) fn hash_for(seq: u64) -> String {
    format!("0x{:040x}", 0xfa00_0000_0000u64 + seq)
}

pub(super) fn insert_cast(
    inner: &mut Inner,
    author_fid: u64,
    text: String,
    parent_hash: Option<String>,
    parent: Option<&StoredCast>,
    mentioned_fids: Vec<u64>,
) -> String {
    inner.seq += 1;
    let seq = inner.seq;
    let hash = hash_for(seq);
    let thread_hash = parent
        .map(|p| p.thread_hash.clone())
        .unwrap_or_else(|| hash.clone());
    inner.casts.push(StoredCast {
        seq,
        hash: hash.clone(),
        thread_hash,
        parent_hash,
        parent_author_fid: parent.map(|p| p.author_fid),
        author_fid,
        text,
        mentioned_fids,
        embeds: Vec::new(),
    });
    hash
}

/// RFC 3339 (UTC, milliseconds) for seconds since the epoch.
pub(super) fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (proleptic Gregorian), after H. Hinnant.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub(super) fn user_json(inner: &Inner, fid: u64) -> Value {
    let username = inner
        .users
        .get(&fid)
        .cloned()
        .unwrap_or_else(|| format!("user{fid}"));
    json!({
        "object": "user",
        "fid": fid,
        "username": username,
        "display_name": username,
        "custody_address": "0x0000000000000000000000000000000000000000",
        "pfp_url": null,
        "follower_count": 0,
        "following_count": 0,
        "verifications": [],
        "verified_addresses": {"eth_addresses": [], "sol_addresses": []},
        "power_badge": false
    })
}

pub(super) fn render_cast(inner: &Inner, cast: &StoredCast) -> Value {
    let replies = inner
        .casts
        .iter()
        .filter(|c| c.parent_hash.as_deref() == Some(&cast.hash))
        .count();
    json!({
        "object": "cast",
        "hash": cast.hash,
        "thread_hash": cast.thread_hash,
        "parent_hash": cast.parent_hash,
        "parent_url": null,
        "root_parent_url": null,
        "parent_author": {"fid": cast.parent_author_fid},
        "author": user_json(inner, cast.author_fid),
        "app": null,
        "text": cast.text,
        "timestamp": rfc3339(EPOCH_SECS + cast.seq as i64),
        "embeds": cast.embeds,
        "channel": null,
        "reactions": {"likes_count": 0, "recasts_count": 0, "likes": [], "recasts": []},
        "replies": {"count": replies},
        "mentioned_profiles": cast.mentioned_fids.iter().map(|f| user_json(inner, *f)).collect::<Vec<_>>(),
        "mentioned_profiles_ranges": cast.mentioned_fids.iter().map(|_| json!({"start": 0, "end": 1})).collect::<Vec<_>>(),
        "mentioned_channels": [],
        "mentioned_channels_ranges": []
    })
}

/// Neynar's cursors are opaque strings; this one holds an offset.
pub(super) fn encode_cursor(offset: usize) -> String {
    format!("fake-{}", hex::encode(offset.to_string()))
}

pub(super) fn decode_cursor(cursor: &str) -> Option<usize> {
    let raw = hex::decode(cursor.strip_prefix("fake-")?).ok()?;
    String::from_utf8(raw).ok()?.parse().ok()
}

pub(super) async fn notifications(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = notifications_inner(&shared, &headers, &q);
    if r.status() == StatusCode::OK {
        shared.polls.send_modify(|n| *n += 1);
    }
    finish(&shared, &method, &uri, &headers, r)
}

/// What a notifications request asks for, checked as Neynar checks it.
struct Asked {
    fid: u64,
    mentions: bool,
    replies: bool,
    page_size: usize,
    offset: usize,
}

impl Asked {
    fn read(shared: &Shared, q: &HashMap<String, String>) -> Result<Asked, Refusal> {
        let Some(fid) = q
            .get("fid")
            .and_then(|f| f.parse::<u64>().ok())
            .filter(|f| *f > 0)
        else {
            return Err(Refusal::new(
                400,
                "fid must be a positive integer",
                "InvalidField",
                Some("fid"),
            ));
        };
        let (mentions, replies) = match q.get("type") {
            Some(types) => Self::types(types)?,
            None => (true, true),
        };
        let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
            None => 15,
            Some(Ok(l)) if (1..=25).contains(&l) => l,
            Some(_) => {
                return Err(Refusal::new(
                    400,
                    "limit must be between 1 and 25",
                    "InvalidField",
                    Some("limit"),
                ));
            }
        };
        let offset = match q.get("cursor") {
            None => 0,
            Some(c) => decode_cursor(c).ok_or_else(|| {
                Refusal::new(400, "Invalid cursor", "InvalidField", Some("cursor"))
            })?,
        };
        Ok(Asked {
            fid,
            mentions,
            replies,
            page_size: limit.min(shared.config.max_page_size.max(1)),
            offset,
        })
    }

    /// `type=mentions,replies,…`: whether mentions and replies are asked for.
    fn types(types: &str) -> Result<(bool, bool), Refusal> {
        let types: Vec<&str> = types.split(',').map(str::trim).collect();
        for t in &types {
            if !matches!(
                *t,
                "follows" | "recasts" | "likes" | "mentions" | "replies" | "quotes"
            ) {
                return Err(Refusal::new(
                    400,
                    &format!("Invalid notification type: {t}"),
                    "InvalidField",
                    Some("type"),
                ));
            }
        }
        Ok((types.contains(&"mentions"), types.contains(&"replies")))
    }
}

pub(super) fn notifications_inner(
    shared: &Shared,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
) -> Response {
    if let Err(r) = front(shared, Route::Notifications, headers) {
        return r.response();
    }
    let asked = match Asked::read(shared, q) {
        Ok(asked) => asked,
        Err(refused) => return refused.response(),
    };
    let (fid, offset, page_size) = (asked.fid, asked.offset, asked.page_size);
    let inner = shared.lock();
    let mut items: Vec<(&StoredCast, &str)> = inner
        .casts
        .iter()
        .filter(|c| c.author_fid != fid)
        .filter_map(|c| {
            if c.mentioned_fids.contains(&fid) {
                asked.mentions.then_some((c, "mention"))
            } else if c.parent_author_fid == Some(fid) {
                asked.replies.then_some((c, "reply"))
            } else {
                None
            }
        })
        .collect();
    items.sort_by_key(|item| std::cmp::Reverse(item.0.seq));
    let page: Vec<Value> = items
        .iter()
        .skip(offset)
        .take(page_size)
        .map(|(c, kind)| {
            json!({
                "object": "notification",
                "most_recent_timestamp": rfc3339(EPOCH_SECS + c.seq as i64),
                "type": kind,
                "seen": false,
                "cast": render_cast(&inner, c)
            })
        })
        .collect();
    let next = (offset + page_size < items.len()).then(|| encode_cursor(offset + page_size));
    axum::Json(json!({
        "notifications": page,
        "unseen_notifications_count": items.len(),
        "next": {"cursor": next}
    }))
    .into_response()
}

pub(super) fn identified<'a>(
    inner: &'a Inner,
    q: &HashMap<String, String>,
) -> Result<&'a StoredCast, Refusal> {
    let Some(identifier) = q.get("identifier") else {
        return Err(Refusal::new(
            400,
            "identifier is required",
            "InvalidField",
            Some("identifier"),
        ));
    };
    match q.get("type").map(String::as_str) {
        Some("hash") => {}
        Some("url") => return Err(Refusal::new(404, "Cast not found", "NotFound", None)),
        _ => {
            return Err(Refusal::new(
                400,
                "type must be url or hash",
                "InvalidField",
                Some("type"),
            ));
        }
    }
    inner
        .casts
        .iter()
        .find(|c| &c.hash == identifier)
        .ok_or_else(|| Refusal::new(404, "Cast not found", "NotFound", None))
}

pub(super) async fn lookup_cast(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = match front(&shared, Route::CastLookup, &headers) {
        Err(r) => r.response(),
        Ok(()) => {
            let inner = shared.lock();
            match identified(&inner, &q) {
                Ok(cast) => axum::Json(json!({"cast": render_cast(&inner, cast)})).into_response(),
                Err(r) => r.response(),
            }
        }
    };
    finish(&shared, &method, &uri, &headers, r)
}

pub(super) fn with_replies(inner: &Inner, cast: &StoredCast, depth: u64) -> Value {
    let mut v = render_cast(inner, cast);
    let replies: Vec<Value> = if depth == 0 {
        Vec::new()
    } else {
        inner
            .casts
            .iter()
            .filter(|c| c.parent_hash.as_deref() == Some(&cast.hash))
            .map(|c| with_replies(inner, c, depth - 1))
            .collect()
    };
    v["direct_replies"] = json!(replies);
    v
}

pub(super) async fn conversation(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = match front(&shared, Route::Conversation, &headers) {
        Err(r) => r.response(),
        Ok(()) => {
            let depth = match q.get("reply_depth").map(|d| d.parse::<u64>()) {
                None => Ok(2),
                Some(Ok(d)) if d <= 5 => Ok(d),
                Some(_) => Err(Refusal::new(
                    400,
                    "reply_depth must be between 0 and 5",
                    "InvalidField",
                    Some("reply_depth"),
                )),
            };
            let inner = shared.lock();
            match (depth, identified(&inner, &q)) {
                (Err(r), _) | (_, Err(r)) => r.response(),
                (Ok(depth), Ok(cast)) => {
                    let mut parents = Vec::new();
                    let mut at = cast.parent_hash.clone();
                    while let Some(p) = at {
                        match inner.casts.iter().find(|c| c.hash == p) {
                            Some(parent) => {
                                parents.push(render_cast(&inner, parent));
                                at = parent.parent_hash.clone();
                            }
                            None => break,
                        }
                    }
                    parents.reverse();
                    let include_parents = q
                        .get("include_chronological_parent_casts")
                        .is_some_and(|v| v == "true");
                    let mut conversation = json!({"cast": with_replies(&inner, cast, depth)});
                    if include_parents {
                        conversation["chronological_parent_casts"] = json!(parents);
                    }
                    axum::Json(json!({"conversation": conversation, "next": {"cursor": null}}))
                        .into_response()
                }
            }
        }
    };
    finish(&shared, &method, &uri, &headers, r)
}

pub(super) async fn bulk_users(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = match front(&shared, Route::UserLookup, &headers) {
        Err(r) => r.response(),
        Ok(()) => {
            let fids: Result<Vec<u64>, _> = q
                .get("fids")
                .map(String::as_str)
                .unwrap_or("")
                .split(',')
                .map(|f| f.trim().parse::<u64>())
                .collect();
            match fids {
                Ok(fids) if !fids.is_empty() => {
                    let inner = shared.lock();
                    let users: Vec<Value> = fids
                        .iter()
                        .filter(|f| inner.users.contains_key(f))
                        .map(|f| user_json(&inner, *f))
                        .collect();
                    axum::Json(json!({"users": users})).into_response()
                }
                _ => neynar_error(
                    400,
                    "fids must be a comma separated list of integers",
                    "InvalidField",
                    Some("fids"),
                ),
            }
        }
    };
    finish(&shared, &method, &uri, &headers, r)
}

/// `GET /v2/farcaster/signer?signer_uuid=`: the fake's one managed signer, approved for
/// the bot's fid (Neynar's `Signer` object); any other uuid is Neynar's 404.
pub(super) async fn lookup_signer(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = match front(&shared, Route::UserLookup, &headers) {
        Err(r) => r.response(),
        Ok(()) => match q.get("signer_uuid") {
            Some(uuid) if *uuid == shared.config.signer_uuid => axum::Json(json!({
                "object": "signer",
                "signer_uuid": uuid,
                "public_key": format!("0x{}", "ab".repeat(32)),
                "status": "approved",
                "fid": shared.config.bot_fid,
            }))
            .into_response(),
            _ => neynar_error(404, "Signer not found", "NotFound", Some("signer_uuid")),
        },
    };
    finish(&shared, &method, &uri, &headers, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(EPOCH_SECS), "2026-11-02T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400 + 86_399), "2000-02-29T23:59:59.000Z");
    }

    #[test]
    fn cursors_round_trip() {
        assert_eq!(decode_cursor(&encode_cursor(50)), Some(50));
        assert_eq!(decode_cursor("nope"), None);
    }
}
