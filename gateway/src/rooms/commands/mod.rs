//! One file per chat command; this file only dispatches. Each command answers with the
//! text the room sees, and changes only what it names.

mod follow;
mod forget;
mod forgetme;
mod help;
mod link;
mod mute;
mod tools;
mod unknown;
mod usage;
mod whoami;

use troupe_connectors::command::Command;

use super::{Answer, Ctx};

pub(super) async fn run(command: &Command, ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    match command {
        Command::Help => Ok(help::run(ctx)),
        Command::Mute { for_ } => mute::mute(ctx, *for_).await,
        Command::Unmute => mute::unmute(ctx).await,
        Command::Follow => follow::follow(ctx).await,
        Command::Unfollow => follow::unfollow(ctx).await,
        Command::Forget => forget::run(ctx).await,
        Command::ForgetMe => forgetme::run(ctx).await,
        Command::WhoAmI => Ok(whoami::run(ctx)),
        Command::Usage => usage::run(ctx).await,
        Command::Tools => Ok(tools::run(ctx)),
        Command::Link { arg } => link::link(ctx, arg.as_deref()).await,
        Command::Unlink => link::unlink(ctx).await,
        Command::Invalid { problem, .. } => Ok(unknown::invalid(problem)),
        Command::Unknown(word) => Ok(unknown::unknown(word)),
    }
}
