//! `/forget`: the room's memory (its recent messages and its summary) is deleted. The next
//! prompt in the room starts from nothing; documents uploaded for the room stay.

use super::{Answer, Ctx};

pub(super) async fn run(ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    let gone = ctx.store.forget_room(ctx.agent, &ctx.room, &ctx.by).await?;
    tracing::info!(messages = gone, "forgot the room's memory");
    Ok(Answer::text(
        "Done: I've forgotten our conversation in this room.",
    ))
}
