//! `/follow` and `/unfollow`: answer every message in the room, or only when addressed.
//! With several personas in one room, an unaddressed message still gets at most one
//! answer (docs/rooms.md).

use crate::storage::RoomControl;

use super::{Answer, Ctx};

pub(super) async fn run(ctx: &Ctx<'_>, on: bool) -> anyhow::Result<Answer> {
    ctx.store
        .set_room_control(ctx.agent, &ctx.room, RoomControl::Follow(on), &ctx.by)
        .await?;
    Ok(Answer::text(if on {
        "Okay, I'll join in on everything said here."
    } else {
        "Okay, I'll only answer here when someone addresses me."
    }))
}
