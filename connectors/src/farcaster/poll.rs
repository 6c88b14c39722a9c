//! Polling the bot's notifications (mentions and replies) and the high-water mark that
//! spares re-reading them after a restart.
//!
//! Neynar lists notifications newest first. One poll reads pages until it meets casts
//! older than what was handled, then hands the new casts to the sink oldest first and moves
//! the mark after each one the sink took. Cast timestamps are set by the author's client,
//! so the mark keeps a look-back window and the hashes handled in it; the journal remains
//! the authority on duplicates.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::api::Neynar;
use super::config::Fid;
use super::normalize::{self, Hint};
use super::publish::Authors;
use super::wire::{Cast, Notification, NotificationsPage};
use crate::connector::{Accepted, ConnectorError, ConnectorState, InboundSink};

/// Where the mark is kept in the connector's state.
pub(crate) const STATE_KEY: &str = "notifications.high_water";
/// Casts this much older than the newest one handled are taken as handled.
const LOOKBACK_MS: i64 = 10 * 60 * 1000;
/// Hashes remembered inside the look-back window.
const RECENT_CAP: usize = 256;
/// Pages read in one poll when a mark exists.
const MAX_PAGES: usize = 10;
/// Pages read on a first start (no mark): the latest casts only, not the whole history.
const FIRST_START_PAGES: usize = 1;

/// The newest cast handled and the hashes handled near it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HighWater {
    pub newest_ms: i64,
    pub recent: VecDeque<String>,
}

impl HighWater {
    /// Older than the look-back window: everything from here on was seen.
    pub(crate) fn is_behind(&self, ts_ms: i64) -> bool {
        ts_ms < self.newest_ms.saturating_sub(LOOKBACK_MS)
    }

    pub(crate) fn is_handled(&self, ts_ms: i64, hash: &str) -> bool {
        self.is_behind(ts_ms) || self.recent.iter().any(|h| h == hash)
    }

    pub(crate) fn record(&mut self, ts_ms: i64, hash: &str) {
        self.newest_ms = self.newest_ms.max(ts_ms);
        if !self.recent.iter().any(|h| h == hash) {
            self.recent.push_back(hash.to_string());
        }
        while self.recent.len() > RECENT_CAP {
            self.recent.pop_front();
        }
    }
}

/// A cast from the feed that is not handled yet.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub cast: Cast,
    pub ts_ms: i64,
    pub hint: Hint,
}

/// The new mention and reply casts of one page, and whether the page reached a cast that
/// was handled before (so older pages need not be read).
pub(crate) fn sift(page: &NotificationsPage, mark: Option<&HighWater>) -> (Vec<Candidate>, bool) {
    let mut fresh = Vec::new();
    let mut reached_old = false;
    for raw in &page.notifications {
        let notification: Notification = match serde_json::from_value(raw.clone()) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "skipping a notification Neynar sent in an unknown shape");
                continue;
            }
        };
        let hint = match notification.kind.as_str() {
            "mention" | "mentions" => Hint {
                mentioned: true,
                replied_to: false,
            },
            "reply" | "replies" => Hint {
                mentioned: false,
                replied_to: true,
            },
            _ => continue,
        };
        let Some(cast) = notification.cast else {
            continue;
        };
        let ts_ms = match normalize::timestamp_ms(&cast) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "skipping a cast");
                continue;
            }
        };
        if let Some(mark) = mark
            && mark.is_handled(ts_ms, &cast.hash)
        {
            // Newest first: what follows was read before (the rest of this page is still
            // sifted, for casts that arrived late with an older timestamp).
            reached_old = true;
            continue;
        }
        fresh.push(Candidate { cast, ts_ms, hint });
    }
    (fresh, reached_old)
}

/// What one poll did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    pub new: usize,
    pub duplicates: usize,
    pub pages: usize,
}

pub(crate) async fn load_mark(
    state: &dyn ConnectorState,
) -> Result<Option<HighWater>, ConnectorError> {
    let raw = state
        .get(STATE_KEY)
        .await
        .map_err(|e| ConnectorError::Transient(format!("reading the notification mark: {e}")))?;
    Ok(raw.and_then(|r| match serde_json::from_str(&r) {
        Ok(mark) => Some(mark),
        Err(e) => {
            tracing::warn!(error = %e, "the stored notification mark is unreadable; starting afresh");
            None
        }
    }))
}

async fn save_mark(state: &dyn ConnectorState, mark: &HighWater) -> Result<(), ConnectorError> {
    let json = serde_json::to_string(mark)
        .map_err(|e| ConnectorError::Transient(format!("encoding the notification mark: {e}")))?;
    state
        .put(STATE_KEY, &json)
        .await
        .map_err(|e| ConnectorError::Transient(format!("saving the notification mark: {e}")))
}

/// Reads new mentions and replies and hands them to the sink, oldest first.
pub(crate) async fn poll_once(
    api: &Neynar,
    state: &dyn ConnectorState,
    sink: &dyn InboundSink,
    bot: Fid,
    authors: &Authors,
) -> Result<Report, ConnectorError> {
    let mark = load_mark(state).await?;
    let max_pages = if mark.is_some() {
        MAX_PAGES
    } else {
        FIRST_START_PAGES
    };
    let mut report = Report::default();
    let mut fresh: Vec<Candidate> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = api.notifications(bot, cursor.as_deref()).await?;
        report.pages += 1;
        let (mut found, reached_old) = sift(&page, mark.as_ref());
        fresh.append(&mut found);
        match page.next_cursor() {
            Some(next) if !reached_old && report.pages < max_pages => {
                cursor = Some(next.to_string())
            }
            Some(_) if !reached_old && mark.is_some() => {
                tracing::warn!(
                    pages = report.pages,
                    "more unread notifications than one poll reads; the oldest are left"
                );
                break;
            }
            _ => break,
        }
    }
    // Oldest first, each cast once (a cast can be both a mention and a reply).
    fresh.sort_by(|a, b| {
        a.ts_ms
            .cmp(&b.ts_ms)
            .then_with(|| a.cast.hash.cmp(&b.cast.hash))
    });
    fresh.dedup_by(|a, b| a.cast.hash == b.cast.hash);

    let mut mark = mark.unwrap_or_default();
    for candidate in fresh {
        authors.remember(&candidate.cast.hash, candidate.cast.author.fid);
        match normalize::to_inbound(&candidate.cast, bot, candidate.hint) {
            Ok(Some(inbound)) => {
                match sink.accept(inbound).await {
                    Ok(Accepted::New) => report.new += 1,
                    Ok(Accepted::Duplicate) => report.duplicates += 1,
                    // Refused for good: the mark moves past it, or every poll would stop here.
                    Err(e) if !e.is_retryable() => {
                        tracing::warn!(cast = %candidate.cast.hash, error = %e,
                            "the gateway refused a cast; skipping it");
                    }
                    // For now: the mark stays before it, so the next poll hands it over again.
                    Err(e) => {
                        return Err(ConnectorError::Transient(format!(
                            "the gateway did not take a cast: {e}"
                        )));
                    }
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "skipping a cast"),
        }
        mark.record(candidate.ts_ms, &candidate.cast.hash);
        save_mark(state, &mark).await?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::farcaster::normalize::tests::cast_json;
    use serde_json::{Value, json};

    fn notification(kind: &str, hash: &str, ts: &str) -> Value {
        let mut cast = cast_json(hash, 7, "hello");
        cast["timestamp"] = json!(ts);
        json!({"object": "notification", "type": kind, "seen": false,
               "most_recent_timestamp": ts, "cast": cast})
    }

    fn page(items: Vec<Value>, cursor: Option<&str>) -> NotificationsPage {
        serde_json::from_value(json!({
            "unseen_notifications_count": 0,
            "notifications": items,
            "next": {"cursor": cursor}
        }))
        .expect("a page")
    }

    const T0: &str = "2026-11-02T10:00:00.000Z";
    const T1: &str = "2026-11-02T10:05:00.000Z";
    const T2: &str = "2026-11-02T10:30:00.000Z";
    const T3: &str = "2026-11-02T10:31:00.000Z";

    #[test]
    fn without_a_mark_every_mention_and_reply_is_new() {
        let p = page(
            vec![
                notification("mention", "0x2", T1),
                notification("likes", "0x9", T1),
                notification("reply", "0x1", T0),
                json!({"type": "mention"}),
                json!("garbage"),
            ],
            None,
        );
        let (fresh, reached_old) = sift(&p, None);
        let hashes: Vec<&str> = fresh.iter().map(|c| c.cast.hash.as_str()).collect();
        assert_eq!(hashes, ["0x2", "0x1"]);
        assert!(fresh[0].hint.mentioned && fresh[1].hint.replied_to);
        assert!(!reached_old);
        assert!(p.next_cursor().is_none());
    }

    #[test]
    fn the_mark_filters_handled_casts_and_stops_paging() {
        let mut mark = HighWater::default();
        mark.record(normalize_ts(T2), "0xa");
        let p = page(
            vec![
                notification("mention", "0xb", T3),
                notification("mention", "0xa", T2),
                // Inside the window but unseen: taken (a late cast).
                notification("mention", "0xlate", "2026-11-02T10:25:00.000Z"),
                // Far behind: the end of what is new.
                notification("mention", "0xold", T0),
            ],
            Some("next-page"),
        );
        let (fresh, reached_old) = sift(&p, Some(&mark));
        let hashes: Vec<&str> = fresh.iter().map(|c| c.cast.hash.as_str()).collect();
        assert_eq!(hashes, ["0xb", "0xlate"]);
        assert!(reached_old);
    }

    #[test]
    fn a_page_that_reaches_a_handled_cast_ends_the_paging() {
        let mut mark = HighWater::default();
        mark.record(normalize_ts(T2), "0xa");
        let p = page(
            vec![
                notification("mention", "0xb", T3),
                notification("mention", "0xa", T2),
            ],
            Some("next-page"),
        );
        let (fresh, reached_old) = sift(&p, Some(&mark));
        assert_eq!(fresh.len(), 1);
        assert!(reached_old);
        // All new: the next page must be read.
        let p = page(vec![notification("mention", "0xc", T3)], Some("next-page"));
        let (fresh, reached_old) = sift(&p, Some(&mark));
        assert_eq!(fresh.len(), 1);
        assert!(!reached_old);
    }

    fn normalize_ts(ts: &str) -> i64 {
        let mut c = cast_json("0x", 1, "");
        c["timestamp"] = json!(ts);
        normalize::timestamp_ms(&serde_json::from_value(c).unwrap()).unwrap()
    }

    #[test]
    fn the_mark_moves_forward_and_stays_bounded() {
        let mut mark = HighWater::default();
        mark.record(100, "0x1");
        mark.record(50, "0x0");
        assert_eq!(mark.newest_ms, 100);
        assert!(mark.is_handled(50, "0x0"));
        assert!(!mark.is_handled(50, "0xnew"));
        for i in 0..1000 {
            mark.record(200 + i, &format!("0x{i}"));
        }
        assert_eq!(mark.recent.len(), RECENT_CAP);
        let json = serde_json::to_string(&mark).unwrap();
        assert_eq!(serde_json::from_str::<HighWater>(&json).unwrap(), mark);
    }
}
