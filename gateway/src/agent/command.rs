//! Command: a chat command for this persona (`/mute`, `/forget`: see `rooms`) is answered
//! before the rate limits and without the model, and neither it nor its answer enters the
//! room's memory. Also the sender's rights to steer the room, as its platform says, which
//! `standing` and `act` ask too.

use std::time::Duration;
use troupe_connectors::Inbound;

use super::Agent;
use super::decide::{self, Decision, decide};
use super::outbound::Kind;
use super::turn::{Step, Turn, done};
use crate::outcome::Outcome;
use crate::rooms::Steering;

/// How long a steering command waits for the platform to say whether its sender may.
const STEER_CHECK_WAIT: Duration = Duration::from_secs(5);

impl Agent {
    /// Command: a chat command for this persona (`/mute`, `/forget`: see `rooms`) is
    /// answered here, before the rate limits and without the model, and neither it nor its
    /// answer enters the room's memory. `Ok` when the message is not a command.
    pub(super) async fn command(&self, turn: &Turn<'_>) -> Step {
        let (mind, inbound) = (&turn.mind, turn.inbound());
        let names = [mind.persona.name.as_str()];
        let Some(command) = crate::rooms::command_for(inbound, &names) else {
            return Ok(());
        };
        // Where the persona may not talk (a room outside its allowed list, DMs off), it
        // takes no commands either: `decide` ignores the message as any other.
        let switches = mind.persona.switches(inbound.platform());
        if let Decision::Ignore(
            decide::WhyNot::NotAllowedRoom
            | decide::WhyNot::DirectMessagesOff
            | decide::WhyNot::Bot,
        ) = decide(&names, &switches, inbound)
        {
            return Ok(());
        }
        tracing::info!(command = command.name(), "chat command");
        let steering = if !command.steers_room() || self.may_steer(inbound).await {
            Steering::Allowed
        } else {
            Steering::Refused
        };
        let answer = self
            .run_command(
                &command,
                inbound.room.key(),
                &inbound.author.id,
                steering,
                crate::tools::policy::RoomKind::of(inbound),
            )
            .await?;
        let outbound = self.outbound(inbound, Kind::Reply(turn.journal), answer.text.clone());
        if let Some(id) = self
            .store
            .record_command(turn.journal, &self.id, &outbound)
            .await?
        {
            self.outbox.deliver(id).await?;
        }
        done(Outcome::Replied {
            texts: vec![answer.text],
            origin: crate::outcome::Origin::Other,
        })
    }

    /// Runs `command` in `room` for `user` (of the room's platform), from the chat or from
    /// `POST …/rooms/{room}/commands`, and follows up on its effect in this process
    /// (cached facts dropped after `/forgetme`).
    pub(crate) async fn run_command(
        &self,
        command: &troupe_connectors::command::Command,
        room: troupe_connectors::RoomKey,
        user: &troupe_connectors::UserId,
        steering: Steering,
        kind: crate::tools::policy::RoomKind,
    ) -> anyhow::Result<crate::rooms::Answer> {
        let mind = self.mind();
        let platform = room.platform;
        // A missing server is named with where it is (`starting`, `failed`, `refused`),
        // never why: the why names the operator's commands, and a DM's person is its admin.
        let tools = mind.tools.as_ref().map(|t| crate::rooms::RoomTools {
            names: t.names_for(&room, kind),
            missing: t
                .missing_for(&room, kind)
                .iter()
                .map(|s| format!("{}: {}", s.name, s.state))
                .collect(),
        });
        let ctx = crate::rooms::Ctx {
            store: &self.store,
            agent: &self.id,
            persona_name: &mind.persona.name,
            model: mind.provider.describe(),
            by: format!("{platform}:{user}"),
            room,
            platform,
            user,
            steering,
            now_ms: crate::clock::now_ms(),
            meter: self.meter(),
            tools,
            direct: kind == crate::tools::policy::RoomKind::Direct,
        };
        let answer = crate::rooms::run(command, &ctx).await?;
        if answer.effect == crate::rooms::Effect::ForgotFacts {
            self.memory
                .forget_cached_facts(crate::storage::FactSubject {
                    agent_id: &self.id,
                    platform,
                    user_id: user,
                })
                .await;
        }
        if answer.effect == crate::rooms::Effect::PeopleChanged {
            self.memory.forget_all_cached_facts();
        }
        Ok(answer)
    }

    /// Whether the sender may steer the room, as its platform says; a platform that cannot
    /// tell (an error, too slow) refuses, since a mute or a forget cannot be taken back.
    pub(super) async fn may_steer(&self, inbound: &Inbound) -> bool {
        // An owner steers every room the persona is in, as its admins do (issue 44).
        if self
            .mind()
            .access
            .is_owner(inbound.platform(), inbound.author.id.as_str())
        {
            return true;
        }
        let Some(connector) = self.connector(inbound.platform()) else {
            return true;
        };
        match tokio::time::timeout(STEER_CHECK_WAIT, connector.may_steer(inbound)).await {
            Ok(Ok(allowed)) => allowed,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not check the sender's rights; refusing the command");
                false
            }
            Err(_) => {
                tracing::warn!("checking the sender's rights took too long; refusing the command");
                false
            }
        }
    }
}
