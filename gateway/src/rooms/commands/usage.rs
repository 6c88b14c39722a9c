//! `/usage`: tokens used today in this room and by the sender. Spend accounting is built
//! separately (issue 16); until it is wired in, [`usage_today`] answers `None` and the
//! command says so. Wiring it is this one function: make `usage_today` read the accounting.

use troupe_connectors::{AgentId, RoomKey, UserId};

use super::{Answer, Ctx};
use crate::storage::Store;

/// Tokens used today (UTC), for the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UsageToday {
    pub room_tokens: u64,
    pub user_tokens: u64,
}

/// The spend of `room` and of `user` today; `None` in a build without usage accounting.
pub(crate) async fn usage_today(
    _store: &Store,
    _agent: &AgentId,
    _room: &RoomKey,
    _user: &UserId,
) -> anyhow::Result<Option<UsageToday>> {
    Ok(None)
}

pub(super) async fn run(ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    let usage = usage_today(ctx.store, ctx.agent, &ctx.room, ctx.user).await?;
    Ok(Answer::text(match usage {
        Some(u) => format!(
            "Today: {} tokens in this room, {} for you.",
            u.room_tokens, u.user_tokens
        ),
        None => "Usage accounting is not available in this build yet.".to_string(),
    }))
}
