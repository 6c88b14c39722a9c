//! `/follow` and `/unfollow`: answer every message in the room, or only when addressed.
//! With several personas in one room, an unaddressed message still gets at most one
//! answer (docs/rooms.md).

use crate::storage::RoomControl;

use super::{Answer, Ctx};

/// `/follow`: answer every message in the room.
pub(super) async fn follow(ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    set(ctx, true).await
}

/// `/unfollow`: answer only when addressed.
pub(super) async fn unfollow(ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    set(ctx, false).await
}

async fn set(ctx: &Ctx<'_>, on: bool) -> anyhow::Result<Answer> {
    ctx.store
        .set_room_control(ctx.agent, &ctx.room, RoomControl::Follow(on), &ctx.by)
        .await?;
    Ok(Answer::text(if on {
        "Okay, I'll join in on everything said here."
    } else {
        "Okay, I'll only answer here when someone addresses me."
    }))
}
