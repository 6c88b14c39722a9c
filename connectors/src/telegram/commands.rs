//! Chat commands on Telegram: the command menu (`setMyCommands`, at start), and who may
//! steer a group (`getChatMember`: its owner and administrators). Parsing `/cmd` and
//! `/cmd@bot` is `crate::command`'s, shared by every platform; normalize already marks a
//! `/cmd@this_bot` as addressed to the bot.

use teloxide::prelude::Requester;
use teloxide::types::{BotCommand, ChatId, UserId};

use super::TelegramConnector;
use super::errors;
use super::send::Target;
use crate::command::COMMANDS;
use crate::connector::ConnectorError;
use crate::model::Inbound;

impl TelegramConnector {
    /// Registers the command menu. Best effort: a bot without a menu still takes commands.
    pub(super) async fn register_commands(&self) {
        let commands = COMMANDS
            .iter()
            .map(|(name, description)| BotCommand::new(*name, *description));
        match self.bot.set_my_commands(commands).await {
            Ok(_) => tracing::info!(commands = COMMANDS.len(), "registered the command menu"),
            Err(e) => tracing::warn!(
                error = %errors::classify(&e, &self.config.token),
                "could not register the command menu (setMyCommands)"
            ),
        }
    }

    /// In a private chat, anyone may steer it; in a group, its owner and administrators.
    pub(super) async fn is_admin(&self, message: &Inbound) -> Result<bool, ConnectorError> {
        if message.is_direct {
            return Ok(true);
        }
        let chat = Target::of(&message.room)?.chat;
        let Ok(user) = message.author.id.as_str().parse::<u64>() else {
            return Ok(false);
        };
        let member = self
            .bot
            .get_chat_member(ChatId(chat), UserId(user))
            .await
            .map_err(|e| errors::classify(&e, &self.config.token))?;
        Ok(member.kind.is_privileged())
    }
}
