//! Discord application (slash) commands: registering them, receiving them, answering them.
//!
//! - At start, with `DISCORD_APPLICATION_ID` set, the commands of `crate::command::COMMANDS`
//!   replace the application's global commands in one bulk overwrite
//!   (`PUT /applications/{app}/commands`), which is idempotent: the same list again changes
//!   nothing, and a command troupe dropped goes away.
//! - An INTERACTION_CREATE of type APPLICATION_COMMAND is acknowledged at once with a
//!   deferred response (`POST /interactions/{id}/{token}/callback`, type 5), well within
//!   Discord's 3-second window and before it is journaled, and becomes an `Inbound` whose
//!   text is the command as typed (`/mute 10m`), addressed to the bot.
//! - The answer follows up through the interaction's webhook
//!   (`POST /webhooks/{app}/{token}`), which Discord accepts for 15 minutes.
//! - Steering in a guild (mute, follow, forget) needs Manage Messages (or Administrator),
//!   read from the permissions Discord computed for the member in the interaction, or one
//!   of the roles named in `DISCORD_STEER_ROLES` (the guild's roles are read with
//!   `GET /guilds/{guild}/roles` only for a member without the permission).
//!
//! Interaction tokens are secrets for their 15 minutes: they stay in this module's table and
//! never reach a log line or an error (paths are shown without them).

use crate::sync::Locked;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::rest::Rest;
use crate::command::COMMANDS;
use crate::connector::{ConnectorError, Delivery, InboundSink};
use crate::model::{Inbound, MessageId, Outbound, Platform, RoomId, RoomRef, UserId, UserRef};

/// Discord's permission bits that allow steering a room.
const ADMINISTRATOR: u64 = 1 << 3;
const MANAGE_MESSAGES: u64 = 1 << 13;
/// How long Discord accepts follow-ups on an interaction token.
const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// Interactions remembered at most (the oldest go first); each is answered in seconds.
const MAX_PENDING: usize = 1_000;
/// The longest follow-up Discord takes.
const MAX_CONTENT: usize = 2_000;
/// The prefix of an interaction's message id in an `Inbound`.
const PREFIX: &str = "interaction:";

/// A slash command as received, out of serenity's types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlashCommand {
    pub id: u64,
    pub token: String,
    pub application: u64,
    pub channel: u64,
    pub guild: Option<u64>,
    pub user_id: u64,
    pub user_name: String,
    pub is_bot: bool,
    /// The member's permissions in the channel, as Discord computed them (guilds only).
    pub permissions: Option<u64>,
    /// The member's role ids (guilds only).
    pub roles: Vec<u64>,
    pub name: String,
    /// The options' values, in order (`/mute` has one: the duration).
    pub args: Vec<String>,
}

impl SlashCommand {
    /// Reads serenity's command interaction.
    pub(crate) fn of(i: &serenity::all::CommandInteraction) -> Self {
        use serenity::all::CommandDataOptionValue as V;
        let args = i
            .data
            .options
            .iter()
            .filter_map(|o| match &o.value {
                V::String(s) => Some(s.clone()),
                V::Integer(n) => Some(n.to_string()),
                _ => None,
            })
            .collect();
        Self {
            id: i.id.get(),
            token: i.token.clone(),
            application: i.application_id.get(),
            channel: i.channel_id.get(),
            guild: i.guild_id.map(|g| g.get()),
            user_id: i.user.id.get(),
            user_name: i
                .member
                .as_ref()
                .and_then(|m| m.nick.clone())
                .or_else(|| i.user.global_name.clone())
                .unwrap_or_else(|| i.user.name.clone()),
            is_bot: i.user.bot,
            permissions: i
                .member
                .as_ref()
                .and_then(|m| m.permissions)
                .map(|p| p.bits()),
            roles: i
                .member
                .as_ref()
                .map(|m| m.roles.iter().map(|r| r.get()).collect())
                .unwrap_or_default(),
            name: i.data.name.clone(),
            args,
        }
    }

    /// The command as a message to the bot: `/name args`, from its user, in its channel.
    pub(crate) fn to_inbound(&self, sent_at_ms: i64) -> Inbound {
        let mut text: String = format!("/{}", self.name).chars().take(40).collect();
        for arg in &self.args {
            text.push(' ');
            text.extend(arg.chars().take(100));
        }
        Inbound {
            id: MessageId::new(format!("{PREFIX}{}", self.id)),
            room: RoomRef::new(Platform::Discord, RoomId::new(self.channel.to_string())),
            author: UserRef {
                id: UserId::new(self.user_id.to_string()),
                name: self.user_name.chars().take(100).collect(),
                is_bot: self.is_bot,
                username: None,
            },
            text,
            attachments: vec![],
            reply_to: None,
            is_direct: self.guild.is_none(),
            mentions_self: true,
            sent_at_ms,
            client: None,
            revises: None,
        }
    }

    /// Whether the member may steer the channel: anyone in a DM; in a guild, Manage
    /// Messages or Administrator.
    pub(crate) fn may_steer(&self) -> bool {
        match (self.guild, self.permissions) {
            (None, _) => true,
            (Some(_), Some(bits)) => bits & (MANAGE_MESSAGES | ADMINISTRATOR) != 0,
            (Some(_), None) => false,
        }
    }
}

/// An interaction waiting for its answer.
struct Pending {
    token: String,
    application: u64,
    may_steer: bool,
    at: Instant,
    /// The follow-up sent, so that a second `send` of the answer posts nothing.
    answered: Option<Delivery>,
}

/// The interactions received and not yet answered, by their `Inbound` id.
#[derive(Default)]
pub(crate) struct Interactions(Mutex<HashMap<String, Pending>>);

impl Interactions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.0.locked()
    }

    pub(crate) fn remember(&self, command: &SlashCommand, may_steer: bool) {
        let mut map = self.lock();
        map.retain(|_, p| p.at.elapsed() < TOKEN_LIFETIME);
        if map.len() >= MAX_PENDING
            && let Some(oldest) = map.iter().min_by_key(|(_, p)| p.at).map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            format!("{PREFIX}{}", command.id),
            Pending {
                token: command.token.clone(),
                application: command.application,
                may_steer,
                at: Instant::now(),
                answered: None,
            },
        );
    }

    /// Whether the sender of interaction `message` may steer its room; `None` when the
    /// message is not an interaction this process received.
    pub(crate) fn may_steer(&self, message: &Inbound) -> Option<bool> {
        self.lock().get(message.id.as_str()).map(|p| p.may_steer)
    }

    /// The follow-up target of a reply to an interaction: (application, token), or the
    /// follow-up already sent.
    pub(super) fn target(&self, reply: &Outbound) -> Option<Result<(u64, String), Delivery>> {
        let id = reply.reply_to.as_ref()?;
        if !id.as_str().starts_with(PREFIX) {
            return None;
        }
        let map = self.lock();
        let pending = map
            .get(id.as_str())
            .filter(|p| p.at.elapsed() < TOKEN_LIFETIME)?;
        Some(match &pending.answered {
            Some(delivery) => Err(delivery.clone()),
            None => Ok((pending.application, pending.token.clone())),
        })
    }

    fn answered(&self, reply: &Outbound, delivery: &Delivery) {
        if let Some(id) = &reply.reply_to
            && let Some(pending) = self.lock().get_mut(id.as_str())
        {
            pending.answered = Some(delivery.clone());
        }
    }
}

/// Whether `message` is a slash command (its id is an interaction's).
pub(crate) fn is_interaction(message: &Inbound) -> bool {
    message.id.as_str().starts_with(PREFIX)
}

/// The application commands, as the bulk overwrite takes them: one CHAT_INPUT command per
/// chat command; `/mute` has an optional string option, the duration.
pub(crate) fn definitions() -> Value {
    let list: Vec<Value> = COMMANDS
        .iter()
        .map(|(name, description)| {
            let mut command = json!({"name": name, "type": 1, "description": description});
            if *name == "mute" {
                command["options"] = json!([{
                    "type": 3,
                    "name": "duration",
                    "description": "For how long: 10m, 2h, 1d (default: until /unmute)",
                    "required": false,
                }]);
            }
            command
        })
        .collect();
    Value::Array(list)
}

impl Rest {
    /// `PUT /applications/{app}/commands`: the application's global commands become
    /// [`definitions`].
    pub(crate) async fn register_commands(&self, application: u64) -> Result<(), ConnectorError> {
        let path = format!("/applications/{application}/commands");
        self.call(reqwest::Method::PUT, &path, Some(&definitions()))
            .await
            .map(|_| ())
            .map_err(ConnectorError::from)
    }

    /// `POST /interactions/{id}/{token}/callback` with a deferred channel message (type 5):
    /// "thinking…" until the follow-up.
    pub(crate) async fn defer(&self, command: &SlashCommand) -> Result<(), ConnectorError> {
        let path = format!("/interactions/{}/{}/callback", command.id, command.token);
        let shown = format!("/interactions/{}/…/callback", command.id);
        self.call(reqwest::Method::POST, &path, Some(&json!({"type": 5})))
            .await
            .map(|_| ())
            .map_err(|e| hide(ConnectorError::from(e), &command.token, &shown, &path))
    }

    /// Whether the member of `command` holds one of `roles` (lower-cased names), by the
    /// guild's roles (`GET /guilds/{guild}/roles`).
    async fn holds_role(
        &self,
        command: &SlashCommand,
        roles: &[String],
    ) -> Result<bool, ConnectorError> {
        let Some(guild) = command.guild else {
            return Ok(false);
        };
        if command.roles.is_empty() || roles.is_empty() {
            return Ok(false);
        }
        let path = format!("/guilds/{guild}/roles");
        let (resp, _) = self.call(reqwest::Method::GET, &path, None).await?;
        let list: Vec<Value> = resp.json().await.map_err(|e| {
            ConnectorError::Transient(format!("{path}: unreadable answer: {}", e.without_url()))
        })?;
        Ok(list.iter().any(|role| {
            let id = role
                .get("id")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<u64>().ok());
            let name = role.get("name").and_then(Value::as_str).unwrap_or_default();
            id.is_some_and(|id| command.roles.contains(&id))
                && roles.iter().any(|r| r.eq_ignore_ascii_case(name.trim()))
        }))
    }

    /// `POST /webhooks/{app}/{token}`: the follow-up message, the interaction's answer.
    async fn follow_up(
        &self,
        application: u64,
        token: &str,
        text: &str,
    ) -> Result<Delivery, ConnectorError> {
        let path = format!("/webhooks/{application}/{token}");
        let shown = format!("/webhooks/{application}/…");
        let content: String = text.chars().take(MAX_CONTENT).collect();
        let (resp, _) = self
            .call(
                reqwest::Method::POST,
                &path,
                Some(&json!({"content": content})),
            )
            .await
            .map_err(|e| hide(ConnectorError::from(e), token, &shown, &path))?;
        let sent: Value = resp.json().await.unwrap_or(Value::Null);
        let id = sent.get("id").and_then(Value::as_str).unwrap_or_default();
        Ok(Delivery {
            message_ids: vec![MessageId::new(id)],
        })
    }
}

/// `error` with the interaction token taken out of its text.
fn hide(error: ConnectorError, token: &str, shown: &str, path: &str) -> ConnectorError {
    let clean = |s: String| s.replace(path, shown).replace(token, "…");
    match error {
        ConnectorError::RateLimited { retry_after } => ConnectorError::RateLimited { retry_after },
        ConnectorError::Unauthorized(s) => ConnectorError::Unauthorized(clean(s)),
        ConnectorError::Transient(s) => ConnectorError::Transient(clean(s)),
        ConnectorError::Fatal(s) => ConnectorError::Fatal(clean(s)),
    }
}

/// A slash command from the gateway: deferred at once, then journaled. One whose deferral
/// fails is dropped (Discord shows the user that it failed): it could not be answered anyway.
pub(crate) async fn receive(
    rest: &Rest,
    interactions: &Interactions,
    sink: &dyn InboundSink,
    steer_roles: &[String],
    command: SlashCommand,
) {
    if let Err(e) = rest.defer(&command).await {
        tracing::warn!(error = %e, command = %command.name, "could not acknowledge a Discord slash command");
        return;
    }
    let may_steer = command.may_steer()
        || match rest.holds_role(&command, steer_roles).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the guild's roles; the member may not steer");
                false
            }
        };
    interactions.remember(&command, may_steer);
    let inbound = command.to_inbound(now_ms());
    if let Err(e) = sink.accept(inbound).await {
        tracing::error!(error = %e, command = %command.name, "could not journal a Discord slash command");
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Delivers `reply` as the follow-up of its interaction, when it answers one this process
/// received; `None` for any other reply (sent to the channel as usual).
pub(crate) async fn answer(
    rest: &Rest,
    interactions: &Interactions,
    reply: &Outbound,
) -> Option<Result<Delivery, ConnectorError>> {
    let (application, token) = match interactions.target(reply)? {
        Ok(target) => target,
        Err(sent) => return Some(Ok(sent)),
    };
    let result = rest.follow_up(application, &token, &reply.text).await;
    if let Ok(delivery) = &result {
        interactions.answered(reply, delivery);
    }
    Some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(guild: Option<u64>, permissions: Option<u64>) -> SlashCommand {
        SlashCommand {
            id: 77,
            token: "tok".into(),
            application: 9,
            channel: 5,
            guild,
            user_id: 3,
            user_name: "Ann".into(),
            is_bot: false,
            permissions,
            roles: vec![],
            name: "mute".into(),
            args: vec!["10m".into()],
        }
    }

    #[test]
    fn a_slash_command_is_the_typed_command_addressed_to_the_bot() {
        let inbound = command(Some(1), Some(0)).to_inbound(5);
        assert_eq!(inbound.text, "/mute 10m");
        assert_eq!(inbound.id.as_str(), "interaction:77");
        assert!(inbound.mentions_self && !inbound.is_direct);
        assert!(crate::command::parse(&inbound.text).is_some());
        assert!(is_interaction(&inbound));
    }

    #[test]
    fn steering_in_a_guild_needs_manage_messages() {
        assert!(!command(Some(1), Some(1 << 10)).may_steer());
        assert!(command(Some(1), Some(MANAGE_MESSAGES)).may_steer());
        assert!(command(Some(1), Some(ADMINISTRATOR)).may_steer());
        assert!(!command(Some(1), None).may_steer());
        assert!(command(None, None).may_steer());
    }

    #[test]
    fn every_command_is_registered_once_with_a_valid_name() {
        let defs = definitions();
        let names: Vec<&str> = defs
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), COMMANDS.len());
        for n in names {
            assert!(
                n.len() <= 32
                    && n.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            );
        }
    }

    #[test]
    fn a_documented_interaction_payload_reads() {
        let payload = json!({
            "id": "77", "application_id": "9", "type": 2, "token": "tok", "version": 1,
            "channel_id": "5", "guild_id": "1", "locale": "en-US", "entitlements": [],
            "attachment_size_limit": 8388608,
            "data": {"id": "100", "name": "mute", "type": 1,
                     "options": [{"name": "duration", "type": 3, "value": "10m"}]},
            "member": {"user": {"id": "3", "username": "ann", "discriminator": "0"},
                       "roles": [], "joined_at": "2026-01-01T00:00:00.000000+00:00",
                       "deaf": false, "mute": false, "flags": 0, "permissions": "8192"},
        });
        let interaction: serenity::all::Interaction = serde_json::from_value(payload).unwrap();
        let serenity::all::Interaction::Command(i) = interaction else {
            panic!("not a command interaction")
        };
        let command = SlashCommand::of(&i);
        assert_eq!(command.args, ["10m"]);
        assert_eq!(command.permissions, Some(MANAGE_MESSAGES));
        assert!(command.may_steer());
    }
}
