//! Rooms people steer from the chat (issue 15, docs/rooms.md): the chat commands, the room
//! controls they set, and the plain-language actions a persona's reply may carry.
//!
//! A message that is a command (`connectors::command::parse`) is answered here and never
//! reaches the model, the room's memory or the reply budget. The room's controls (muted,
//! following, forgotten) live in the database (`storage::rooms`), so that replicas agree
//! and a restart or a persona reload keeps them; the agent reads them when it decides.
//! Layout:
//! - this file: which messages are commands for this persona, and running one;
//! - `commands`: one file per command;
//! - `actions`: the structured action a reply may end with (`[[mute]]`), and the prompt
//!   line that teaches it.

pub(crate) mod actions;
pub(crate) mod arbiter;
mod commands;

use troupe_connectors::command::{self, Command};
use troupe_connectors::{AgentId, Inbound, Platform, RoomKey, UserId};

use crate::storage::Store;

/// What a command runs with: the room, who gave it, and the persona it is for.
pub(crate) struct Ctx<'a> {
    pub store: &'a Store,
    pub agent: &'a AgentId,
    pub persona_name: &'a str,
    /// The model, as `GET /agents` describes it.
    pub model: String,
    pub room: RoomKey,
    pub platform: Platform,
    pub user: &'a UserId,
    /// Who gave it, as `platform:user`, for the stored row.
    pub by: String,
    /// Whether the sender may steer the room.
    pub steering: Steering,
    pub now_ms: i64,
    /// The persona's spend meter (`/usage`), when spend accounting is on.
    pub meter: Option<crate::spend::Meter>,
    /// The tools this room may use (`/tools`); `None` when the persona has none.
    pub tools: Option<RoomTools>,
}

/// What `/tools` lists: the tools this room may use, and the persona's MCP servers whose
/// tools are missing, each with where it is (`mute: starting`), issue 43.
#[derive(Debug, Clone, Default)]
pub struct RoomTools {
    pub names: Vec<String>,
    pub missing: Vec<String>,
}

/// Whether the sender of a command may steer the room: change it for everyone (mute,
/// follow, forget the room). An administrator in a group, anyone in a DM, and the operator
/// through the HTTP API may; a command that steers nothing needs no right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    Allowed,
    Refused,
}

/// What a command did besides its answer, for the agent to follow up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    None,
    /// The sender's facts are gone: cached copies must go too.
    ForgotFacts,
}

/// A command's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub text: String,
    pub effect: Effect,
}

impl Answer {
    fn text(text: impl Into<String>) -> Self {
        Answer {
            text: text.into(),
            effect: Effect::None,
        }
    }
}

/// The refusal a sender gets for a steering command they may not give.
pub(crate) const NOT_ALLOWED: &str = "Sorry, only the room's admins can change how I behave here.";

/// The refusal on Farcaster, where a room is a thread and only the person who cast its root
/// steers it (docs/farcaster.md, "Who steers a thread").
pub(crate) const NOT_THREAD_OWNER: &str =
    "Sorry, only the person who started this thread can change how I behave in it.";

/// The refusal for `platform`'s rooms.
pub(crate) fn not_allowed(platform: Platform) -> &'static str {
    match platform {
        Platform::Farcaster => NOT_THREAD_OWNER,
        _ => NOT_ALLOWED,
    }
}

/// The command in `inbound` that is for this persona, if any. A DM or an API message is
/// always for it. In a group, a command is for it when it names it (`/mute@bot`, an
/// @mention or a reply to it, its name after the `@`), or, on Telegram, when it names no
/// bot at all (Telegram hands a bare `/cmd` to every bot in the group, as its users
/// expect). A leading @mention is skipped first (`@tess /mute`, Farcaster's form). A
/// message from a bot is never a command.
pub(crate) fn command_for(inbound: &Inbound, names: &[&str]) -> Option<Command> {
    if inbound.author.is_bot {
        return None;
    }
    let line = command::parse(skip_mentions(&inbound.text))?;
    let named = |bot: &str| names.iter().any(|n| n.eq_ignore_ascii_case(bot));
    let addressed = inbound.mentions_self
        || inbound.reply_to.as_ref().is_some_and(|r| r.to_self)
        || line.to.as_deref().is_some_and(named);
    let for_me = inbound.is_direct
        || inbound.platform() == Platform::Web
        || addressed
        || (inbound.platform() == Platform::Telegram && line.to.is_none());
    for_me.then_some(line.command)
}

/// `text` without the @mentions it starts with (`@tess`, Discord's `<@123>`).
fn skip_mentions(text: &str) -> &str {
    let mut rest = text.trim_start();
    loop {
        let token_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let token = &rest[..token_end];
        let mention = token.starts_with('@') || (token.starts_with("<@") && token.ends_with('>'));
        if !mention || token_end == rest.len() {
            return rest;
        }
        rest = rest[token_end..].trim_start();
    }
}

/// `name` appears in `text` as a whole word, ignoring case: "hey Eliza!" names Eliza,
/// "elizabeth" does not.
pub(crate) fn names_in(text: &str, name: &str) -> bool {
    let name = name.trim();
    if name.is_empty() {
        return false;
    }
    let text = text.to_lowercase();
    let name = name.to_lowercase();
    let mut from = 0;
    while let Some(pos) = text[from..].find(&name) {
        let start = from + pos;
        let end = start + name.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '_');
        if boundary(before) && boundary(after) {
            return true;
        }
        from = start + name.chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// Runs `command` in `ctx`'s room. A steering command from someone who may not steer the
/// room is refused politely, and changes nothing.
pub(crate) async fn run(command: &Command, ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    if command.steers_room() && ctx.steering == Steering::Refused {
        return Ok(Answer::text(not_allowed(ctx.platform)));
    }
    commands::run(command, ctx).await
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use troupe_connectors::{MessageId, ReplyTo, RoomId, RoomRef, UserRef};

    /// A person's message in a group room of `platform`, addressed to nobody: what the
    /// decision tests start from (`agent::decide` uses it too).
    pub(crate) fn msg(platform: Platform, text: &str) -> Inbound {
        Inbound {
            id: MessageId::new("1"),
            room: RoomRef::new(platform, RoomId::new("room")),
            author: UserRef {
                id: UserId::new("u"),
                name: "Sam".into(),
                is_bot: false,
                username: None,
            },
            text: text.into(),
            attachments: vec![],
            reply_to: None,
            is_direct: false,
            mentions_self: false,
            sent_at_ms: 0,
            client: None,
            revises: None,
        }
    }

    #[test]
    fn a_command_in_a_group_is_taken_when_it_is_for_this_persona() {
        let names = ["Tess"];
        // Telegram hands a bare /cmd to every bot; /cmd@other is another bot's.
        assert_eq!(
            command_for(&msg(Platform::Telegram, "/mute"), &names),
            Some(Command::Mute { for_: None })
        );
        assert_eq!(
            command_for(&msg(Platform::Telegram, "/mute@other_bot"), &names),
            None
        );
        let mut aimed = msg(Platform::Telegram, "/mute@tess_bot");
        aimed.mentions_self = true;
        assert!(command_for(&aimed, &names).is_some());
        // Elsewhere a group command must address the persona.
        assert_eq!(
            command_for(&msg(Platform::Discord, "/forget"), &names),
            None
        );
        let mut mention = msg(Platform::Farcaster, "@tess /forget");
        mention.mentions_self = true;
        assert_eq!(command_for(&mention, &names), Some(Command::Forget));
        let mut discord = msg(Platform::Discord, "<@123> /whoami");
        discord.reply_to = Some(ReplyTo {
            message: MessageId::new("0"),
            to_self: true,
        });
        assert_eq!(command_for(&discord, &names), Some(Command::WhoAmI));
        assert_eq!(
            command_for(&msg(Platform::Discord, "/mute@Tess"), &names),
            Some(Command::Mute { for_: None })
        );
        // The API and DMs are always the persona's.
        assert_eq!(
            command_for(&msg(Platform::Web, "/help"), &names),
            Some(Command::Help)
        );
        let mut dm = msg(Platform::Discord, "/help");
        dm.is_direct = true;
        assert_eq!(command_for(&dm, &names), Some(Command::Help));
    }

    #[test]
    fn bots_give_no_commands_and_text_is_not_a_command() {
        let mut bot = msg(Platform::Web, "/mute");
        bot.author.is_bot = true;
        assert_eq!(command_for(&bot, &["Tess"]), None);
        assert_eq!(
            command_for(&msg(Platform::Web, "mute please"), &["Tess"]),
            None
        );
        assert_eq!(skip_mentions("@a @b /x y"), "/x y");
        assert_eq!(skip_mentions("@a"), "@a");
        assert_eq!(skip_mentions("  hi"), "hi");
    }
}
