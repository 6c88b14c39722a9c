//! Approval before posting (issue 47, docs/posts.md "Approval"): what the API, the console
//! and an owner's DM commands share about drafts. The runner holds a run's post as a draft
//! when its schedule says `approve: true`; here a draft is approved (queued in the outbox
//! once, `storage::drafts`, then delivered), edited (the text checked as a post is: no
//! room-control marker survives, and the schedule's length rule applies), or rejected.
//!
//! An owner (`TROUPE_OWNERS`, docs/access.md) is told of each new draft in a DM
//! (`notices`, queued with the draft), and may decide it there: `/drafts` lists the
//! waiting drafts, `/approve-post ID` and `/reject-post ID` decide one.
//!
//! A module of its own, below both `posts` (whose runner holds drafts) and `agent` (whose
//! access step runs an owner's commands), so that neither imports the other.

use troupe_connectors::{AgentId, Outbound, Platform, RoomId, RoomRef};

use crate::outbox::Outbox;
use crate::storage::{Decided, Draft, RunState, Store};

/// The longest post when neither the schedule nor the platform says (a Discord message
/// is 2,000 characters, a Telegram one 4,096; a post is shorter).
pub const DEFAULT_MAX_LENGTH: usize = 1_000;
/// A Farcaster cast (elizaOS's `MAX_CAST_LENGTH` default).
pub const FARCASTER_MAX_LENGTH: usize = 320;
/// Decided drafts the API lists after the waiting ones.
pub const DECIDED_LISTED: i64 = 20;

/// A post's length limit: the schedule's `maxLength`, else the platform's default.
pub fn max_length(schedule_max: Option<usize>, platform: Platform) -> usize {
    schedule_max.unwrap_or(if platform == Platform::Farcaster {
        FARCASTER_MAX_LENGTH
    } else {
        DEFAULT_MAX_LENGTH
    })
}

/// The outbox entry of a run's post; its key is the run's, so a post is one entry
/// (and one Neynar `idem`) however it was queued.
pub fn outbound(
    agent: &AgentId,
    schedule_id: &str,
    run_at_ms: i64,
    room: &troupe_connectors::RoomKey,
    text: String,
) -> Outbound {
    Outbound {
        key: format!("{agent}:post:{schedule_id}:{run_at_ms}"),
        room: RoomRef::new(room.platform, room.room.clone()),
        text,
        reply_to: None,
        replaces: Vec::new(),
    }
}

/// What tells the persona's owners that a draft waits: one DM each, on the platforms where
/// a DM can be opened from the owner's id alone. On Telegram a private chat's id is its
/// user's id; on Discord the connector opens the DM channel (`send_to` `user:ID`). Owners
/// on Farcaster are not told (a cast is public); they use the console or the API. Each
/// notice's key is the draft's and the owner's, so it is one message however it is sent.
pub fn notices(
    run: &crate::storage::ClaimedRun,
    text: &str,
    expires_at_ms: i64,
    owners: &[String],
) -> Vec<Outbound> {
    let left = (expires_at_ms - crate::clock::now_ms()).max(0) / 60_000;
    let shown: String = text.chars().take(1_500).collect();
    let body = format!(
        "{agent}: a post waits for your approval, draft #{id} for {room} (expires in {left} min).\n\n{shown}\n\n/approve-post {id} · /reject-post {id}",
        agent = run.agent_id,
        id = run.id,
        room = run.room,
    );
    owners
        .iter()
        .filter_map(|owner| {
            let (platform, user) = owner.split_once(':')?;
            let room = match platform.parse::<Platform>().ok()? {
                Platform::Telegram => RoomRef::new(Platform::Telegram, RoomId::new(user)),
                Platform::Discord => {
                    let id = RoomId::new(format!("dm-user:{user}"));
                    let mut room = RoomRef::new(Platform::Discord, id);
                    room.send_to = Some(format!("user:{user}"));
                    room
                }
                _ => return None,
            };
            Some(Outbound {
                key: format!("{}:draft:{}:{owner}", run.agent_id, run.id),
                room,
                text: body.clone(),
                reply_to: None,
                replaces: Vec::new(),
            })
        })
        .collect()
}

/// Why an edit was refused (400).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadEdit(pub String);

/// An edited text as it would be posted: markers removed (a marker in a post never acts),
/// trimmed, not empty, and within `max` characters.
pub fn checked_edit(text: &str, max: usize) -> Result<String, BadEdit> {
    let text = crate::rooms::actions::strip_every(text).trim().to_string();
    if text.is_empty() {
        return Err(BadEdit("the post is empty".into()));
    }
    let n = text.chars().count();
    if n > max {
        return Err(BadEdit(format!(
            "the post is {n} characters; this schedule posts at most {max}"
        )));
    }
    Ok(text)
}

/// The length limit of `draft`'s schedule (the platform's default when it is gone).
pub async fn limit_of(store: &Store, agent: &AgentId, draft: &Draft) -> anyhow::Result<usize> {
    let schedules = store.posts_schedules(agent).await?;
    // The schedule's `maxLength`, read from its stored JSON (`posts::schedule::Spec`).
    let schedule_max = schedules
        .iter()
        .find(|s| s.id == draft.schedule_id)
        .and_then(|s| s.spec.get("maxLength").and_then(serde_json::Value::as_u64))
        .map(|n| n as usize);
    Ok(max_length(schedule_max, draft.room.platform))
}

/// Approves draft `id` of `agent` for `by` and delivers it.
pub async fn approve(
    store: &Store,
    outbox: &Outbox,
    agent: &AgentId,
    id: i64,
    by: &str,
) -> anyhow::Result<Decided> {
    let now = crate::clock::now_ms();
    let decided = store
        .draft_approve(agent, id, by, now, |d| {
            outbound(
                agent,
                &d.schedule_id,
                d.run_at_ms,
                &d.room,
                d.text.clone().unwrap_or_default(),
            )
        })
        .await?;
    if let Decided::Done(Some(outbox_id)) = decided {
        tracing::info!(persona = %agent, draft = id, %by, "posts: a draft was approved; queued");
        if let Err(error) = outbox.deliver(outbox_id).await {
            tracing::warn!(%error, "posts: the first delivery failed; the outbox retries it");
        }
    }
    Ok(decided)
}

/// An owner's command in a DM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftCommand {
    List,
    Approve(i64),
    Reject(i64),
}

/// `/drafts`, `/approve-post ID`, `/reject-post ID` (Telegram's `/cmd@bot` too).
pub fn command(text: &str) -> Option<DraftCommand> {
    let mut words = text.split_whitespace();
    let name = words.next()?.split('@').next()?;
    let id = || {
        words
            .clone()
            .next()
            .and_then(|w| w.trim_start_matches('#').parse().ok())
    };
    match name {
        "/drafts" => Some(DraftCommand::List),
        "/approve-post" | "/approve_post" => id().map(DraftCommand::Approve),
        "/reject-post" | "/reject_post" => id().map(DraftCommand::Reject),
        _ => None,
    }
}

/// Runs an owner's command and says what came of it.
pub async fn run_command(
    store: &Store,
    outbox: &Outbox,
    agent: &AgentId,
    by: &str,
    command: DraftCommand,
) -> anyhow::Result<String> {
    let now = crate::clock::now_ms();
    let decided = match command {
        DraftCommand::List => return list_text(store, agent, now).await,
        DraftCommand::Approve(id) => (id, approve(store, outbox, agent, id, by).await?),
        DraftCommand::Reject(id) => (id, store.draft_reject(agent, id, by, now).await?),
    };
    Ok(match (command, decided) {
        (DraftCommand::Approve(_), (id, Decided::Done(_))) => {
            format!("Draft {id} approved: it is being posted.")
        }
        (_, (id, Decided::Done(_))) => format!("Draft {id} rejected: it will not be posted."),
        (_, (id, Decided::NotFound)) => format!("There is no draft {id}."),
        (_, (id, Decided::Conflict(state))) => {
            format!("Draft {id} is {}; nothing was done.", state_words(state))
        }
    })
}

fn state_words(state: RunState) -> &'static str {
    match state {
        RunState::Queued => "already approved and sent",
        RunState::Rejected => "rejected",
        RunState::Expired => "expired",
        _ => "not waiting for approval",
    }
}

async fn list_text(store: &Store, agent: &AgentId, now: i64) -> anyhow::Result<String> {
    let waiting: Vec<Draft> = store
        .drafts(agent, now, 0)
        .await?
        .into_iter()
        .filter(|d| d.state == RunState::Draft)
        .collect();
    if waiting.is_empty() {
        return Ok("No drafts are waiting for approval.".into());
    }
    let mut out = format!("{} draft(s) waiting:", waiting.len());
    for d in waiting.iter().take(10) {
        let text: String = d.text.as_deref().unwrap_or("").chars().take(300).collect();
        let left = (d.expires_at_ms.unwrap_or(now) - now) / 60_000;
        out.push_str(&format!(
            "\n\n#{} for {} (expires in {left} min):\n{text}\n/approve-post {} · /reject-post {}",
            d.id, d.room, d.id, d.id
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read() {
        assert_eq!(command("/drafts"), Some(DraftCommand::List));
        assert_eq!(command("/drafts@ada_bot"), Some(DraftCommand::List));
        assert_eq!(command("/approve-post 12"), Some(DraftCommand::Approve(12)));
        assert_eq!(command("/reject_post #7"), Some(DraftCommand::Reject(7)));
        assert_eq!(command("/approve-post"), None);
        assert_eq!(command("/approve-post x"), None);
        assert_eq!(command("hello /drafts"), None);
    }

    #[test]
    fn an_edit_loses_its_markers_and_keeps_the_length_rule() {
        assert_eq!(
            checked_edit("Tide at six. [[action: mute]]", 100).unwrap(),
            "Tide at six."
        );
        assert!(checked_edit("[[action: mute]]", 100).is_err());
        assert!(checked_edit(&"a".repeat(101), 100).is_err());
        assert_eq!(max_length(None, Platform::Farcaster), 320);
        assert_eq!(max_length(Some(50), Platform::Discord), 50);
    }
}
