//! Several Telegram bots for one persona: elizaOS 2.x's `settings.telegram` multi-account
//! shape (plugin-telegram's `accounts.ts`), read with positions (issue 46).
//!
//! ```json
//! "settings": { "telegram": {
//!     "botToken": "…", "enabled": true,
//!     "accounts": { "support": { "botToken": "…", "allowedChats": ["-100123"] } } } }
//! ```
//!
//! As in elizaOS: when `accounts` has entries, those accounts run, and only those (sorted by
//! id); an account's `botToken` falls back to `settings.telegram.botToken`, and the account
//! named `default` also to `TELEGRAM_BOT_TOKEN`; `enabled: false` (on the account or on
//! `settings.telegram`) turns it off. Without `accounts`, nothing changes: the persona's one
//! bot is `TELEGRAM_BOT_TOKEN` as before. `settings.telegram.botToken` and `.apiRoot` are
//! read as the file's `TELEGRAM_BOT_TOKEN` and `TELEGRAM_API_ROOT` (by `settings`), so the
//! pairing of endpoints and credentials (`secrets`) covers them.
//!
//! Each account keeps its own `allowedChats`; the persona's memory and budgets stay one,
//! because every account feeds the same persona. Where the accounts run is
//! `troupe_connectors::telegram::accounts`.

use std::collections::BTreeMap;

use super::diag::{Diags, join, unknown_field_message};
use super::json::{Kind, Node, Pos};
use super::values::{boolean, scalar_text, string};

/// `settings.telegram` keys of the multi-account shape (the rest are client switches).
pub(super) const MULTI_FIELDS: &[&str] = &["accounts", "botToken", "enabled", "apiRoot"];

const ACCOUNT_FIELDS: &[&str] = &[
    "name",
    "enabled",
    "botToken",
    "allowedChats",
    "apiRoot",
    "autoReply",
    "personal",
];

/// `settings.telegram`'s multi-account part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TelegramAccounts {
    /// `settings.telegram.enabled`: `false` turns every account off.
    pub enabled: Option<bool>,
    /// `settings.telegram.botToken`: every account's token unless it has its own.
    pub bot_token: Option<String>,
    /// `settings.telegram.apiRoot`.
    pub api_root: Option<String>,
    /// `settings.telegram.accounts`, sorted by id.
    pub accounts: Vec<TelegramAccount>,
}

/// One entry of `settings.telegram.accounts`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TelegramAccount {
    /// Its key: letters, digits, `_` and `-` (it names the account's rooms, `support/-100…`).
    pub id: String,
    pub name: Option<String>,
    pub enabled: Option<bool>,
    pub bot_token: Option<String>,
    /// `apiRoot`: the account's own Bot API root (with its own token only).
    pub api_root: Option<String>,
    /// `allowedChats`: the chats this account answers in; `None`: the persona's rules.
    pub allowed_chats: Option<Vec<String>>,
}

/// Whether an account id can name rooms: 1 to 64 of `A-Z a-z 0-9 _ -`.
pub fn valid_account_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Reads the multi-account part of `settings.telegram` (at `path`); the positions of the
/// tokens are kept (`settings.telegram.accounts.<id>.botToken`) for later diagnostics.
pub(super) fn telegram_settings(
    v: &Node,
    path: &str,
    positions: &mut BTreeMap<String, Pos>,
    d: &mut Diags,
) -> TelegramAccounts {
    let mut out = TelegramAccounts::default();
    let Some(members) = v.members() else {
        return out;
    };
    for m in members
        .iter()
        .filter(|m| !matches!(m.value.kind, Kind::Null))
    {
        let p = join(path, &m.key);
        match m.key.as_str() {
            "enabled" => out.enabled = boolean(&m.value, &p, d),
            "botToken" => {
                positions.insert(p.clone(), m.value.pos.clone());
                out.bot_token = string(&m.value, &p, d);
            }
            "apiRoot" => out.api_root = string(&m.value, &p, d),
            "accounts" => out.accounts = telegram_accounts(&m.value, &p, positions, d),
            _ => {}
        }
    }
    out
}

fn telegram_accounts(
    v: &Node,
    path: &str,
    positions: &mut BTreeMap<String, Pos>,
    d: &mut Diags,
) -> Vec<TelegramAccount> {
    let Some(members) = v.members() else {
        d.wrong_type(
            v,
            path,
            "an object of accounts { \"<id>\": { \"botToken\": … } }",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in members {
        let p = join(path, &m.key);
        if !valid_account_id(&m.key) {
            d.error(
                &m.key_pos,
                &p,
                "an account id is 1 to 64 letters, digits, `_` or `-` (it names the account's \
                 rooms)",
            );
            continue;
        }
        if let Some(a) = telegram_account(&m.key, &m.value, &p, positions, d) {
            out.push(a);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

fn telegram_account(
    id: &str,
    v: &Node,
    path: &str,
    positions: &mut BTreeMap<String, Pos>,
    d: &mut Diags,
) -> Option<TelegramAccount> {
    let Some(members) = v.members() else {
        d.wrong_type(
            v,
            path,
            "an object { \"botToken\": …, \"allowedChats\": [...] }",
        );
        return None;
    };
    let mut a = TelegramAccount {
        id: id.to_string(),
        ..TelegramAccount::default()
    };
    for m in members
        .iter()
        .filter(|m| !matches!(m.value.kind, Kind::Null))
    {
        let p = join(path, &m.key);
        let val = &m.value;
        match m.key.as_str() {
            "name" => a.name = string(val, &p, d),
            "enabled" => a.enabled = boolean(val, &p, d),
            "botToken" => {
                positions.insert(p.clone(), val.pos.clone());
                a.bot_token = string(val, &p, d);
            }
            "allowedChats" => a.allowed_chats = Some(chat_ids(val, &p, d)),
            "apiRoot" => {
                positions.insert(p.clone(), val.pos.clone());
                a.api_root = string(val, &p, d);
            }
            "autoReply" => {
                boolean(val, &p, d);
            }
            "personal" => d.warn(
                &m.key_pos,
                &p,
                "ignored: troupe runs bot accounts only, not personal (MTProto) ones",
            ),
            other => d.warn(&m.key_pos, &p, unknown_field_message(other, ACCOUNT_FIELDS)),
        }
    }
    Some(a)
}

/// Chat ids, written as strings or numbers (`-100123`, `"@channel"`).
fn chat_ids(v: &Node, path: &str, d: &mut Diags) -> Vec<String> {
    let Kind::Array(items) = &v.kind else {
        d.wrong_type(v, path, "a list of chat ids");
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match (&item.kind, scalar_text(item)) {
            (Kind::String(_) | Kind::Number(_), Some(id)) => out.push(id.trim().to_string()),
            _ => d.wrong_type(item, &format!("{path}[{i}]"), "a chat id"),
        }
    }
    out
}

impl super::Persona {
    /// The persona's Telegram bots when its file lists `settings.telegram.accounts`, each
    /// with its token resolved (see the module doc); `None` without accounts: the persona's
    /// one bot is `TELEGRAM_BOT_TOKEN`, as before. An account that is off, has no token, or
    /// would send the operator's token to the file's own `apiRoot` is left out (`troupe
    /// check` says why).
    pub fn telegram_accounts(
        &self,
        env: &super::Env,
    ) -> Option<Vec<troupe_connectors::accounts::AccountSpec>> {
        let t = &self.character.settings.telegram;
        if t.accounts.is_empty() {
            return None;
        }
        if t.enabled == Some(false) {
            return Some(Vec::new());
        }
        let specs = t
            .accounts
            .iter()
            .filter(|a| a.enabled != Some(false))
            .filter_map(|a| self.resolve_account(a, env).ok())
            .collect();
        Some(specs)
    }

    /// One account, or why it will not connect. Its token: its own `botToken`; else, for
    /// `default`, `TELEGRAM_BOT_TOKEN` wherever it is set (the operator's
    /// `CHARACTER.<ID>.TELEGRAM_BOT_TOKEN` first), for another account
    /// `settings.telegram.botToken`. Its own `apiRoot` is used only with a token from the
    /// file: the operator's token never goes to an endpoint a file names (docs/security.md).
    fn resolve_account(
        &self,
        a: &TelegramAccount,
        env: &super::Env,
    ) -> Result<troupe_connectors::accounts::AccountSpec, String> {
        use super::secrets::{Origin, lookup};
        let own = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let token = match own(&a.bot_token) {
            Some(t) => Some((t, Origin::File)),
            None if a.id == "default" => {
                lookup(self, "TELEGRAM_BOT_TOKEN", env).map(|(v, src)| (v, src.origin()))
            }
            None => own(&self.character.settings.telegram.bot_token).map(|t| (t, Origin::File)),
        };
        let Some((token, origin)) = token else {
            return Err(format!(
                "the telegram account \"{}\" has no botToken (nor settings.telegram.botToken{}): \
                 it will not connect",
                a.id,
                if a.id == "default" {
                    ", nor TELEGRAM_BOT_TOKEN"
                } else {
                    ""
                }
            ));
        };
        let api_root = own(&a.api_root);
        if api_root.is_some() && origin == Origin::Operator {
            return Err(format!(
                "the telegram account \"{}\" names its own apiRoot but its token is the \
                 operator's TELEGRAM_BOT_TOKEN, which goes only to the operator's endpoint: \
                 give the account its own botToken, or drop its apiRoot; it will not connect",
                a.id
            ));
        }
        Ok(troupe_connectors::accounts::AccountSpec {
            id: a.id.clone(),
            token,
            api_root,
            allowed_chats: a.allowed_chats.clone(),
        })
    }

    /// The `allowedChats` of the account whose ids carry `tag` (`None`: the `default`
    /// account, whose ids are untagged); `None` when that account lists none, and then the
    /// persona's `TELEGRAM_ALLOWED_CHATS` applies to it.
    pub fn account_allowed_chats(&self, tag: Option<&str>) -> Option<Vec<String>> {
        let id = tag.unwrap_or("default");
        self.character
            .settings
            .telegram
            .accounts
            .iter()
            .find(|a| a.id == id)
            .and_then(|a| a.allowed_chats.clone())
    }
}

/// `troupe check`'s errors on `a` for an account token `b` uses too (as one of its accounts
/// or as its one bot): one bot account serves one persona.
pub(super) fn shared_account_tokens(
    a: &super::Persona,
    b: &super::Persona,
    env: &super::Env,
) -> Vec<super::Diagnostic> {
    let Some(mine) = a.telegram_accounts(env) else {
        return Vec::new();
    };
    let theirs: Vec<String> = match b.telegram_accounts(env) {
        Some(list) => list.into_iter().map(|s| s.token).collect(),
        None => b
            .platform_token(troupe_connectors::Platform::Telegram, env)
            .into_iter()
            .collect(),
    };
    mine.iter()
        .filter(|s| theirs.contains(&s.token))
        .map(|s| {
            account_diagnostic(
                a,
                &s.id,
                format!(
                    "the telegram account \"{}\" has the same bot token as {}; one bot account \
                     can serve one persona",
                    s.id,
                    b.source.display()
                ),
            )
        })
        .collect()
}

/// A diagnostic on the account `id` of `p`, at its entry when the file has it.
fn account_diagnostic(p: &super::Persona, id: &str, message: String) -> super::Diagnostic {
    let at = format!("settings.telegram.accounts.{id}");
    let field = [format!("{at}.botToken"), at.clone()]
        .into_iter()
        .find(|f| p.character.positions.contains_key(f))
        .unwrap_or_else(|| "settings".to_string());
    let mut d = super::Diagnostic::at_field(p, &field, message);
    d.path = at;
    d
}

/// `troupe check`'s diagnostics on the accounts of one file: an account that will not
/// connect (a warning; an error when it would send the operator's token to the file's
/// endpoint), two accounts with one token (an error).
pub(super) fn account_warnings(p: &super::Persona, env: &super::Env) -> Vec<super::Diagnostic> {
    let t = &p.character.settings.telegram;
    let mut out = Vec::new();
    if t.enabled == Some(false) {
        return out;
    }
    for a in t.accounts.iter().filter(|a| a.enabled != Some(false)) {
        if let Err(why) = p.resolve_account(a, env) {
            let mut d = account_diagnostic(p, &a.id, why);
            if a.api_root.is_none() {
                d.severity = super::Severity::Warning;
            }
            out.push(d);
        }
    }
    let specs = p.telegram_accounts(env).unwrap_or_default();
    for (i, s) in specs.iter().enumerate() {
        if let Some(first) = specs[..i].iter().find(|f| f.token == s.token) {
            out.push(account_diagnostic(
                p,
                &s.id,
                format!(
                    "the telegram accounts \"{}\" and \"{}\" have the same botToken; each account \
                     is its own bot",
                    first.id, s.id
                ),
            ));
        }
    }
    out
}

/// One bot account a persona logs in to: its platform and token, and which of
/// `settings.telegram.accounts` it is when it is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotClaim {
    pub platform: troupe_connectors::Platform,
    pub token: String,
    pub account: Option<String>,
}

impl BotClaim {
    /// `file` or `file (its telegram account "id")`.
    fn owner(&self, p: &super::Persona) -> String {
        match &self.account {
            Some(id) => format!(
                "{} (its {} account \"{id}\")",
                p.source.display(),
                self.platform
            ),
            None => p.source.display().to_string(),
        }
    }
}

impl super::Persona {
    /// Every bot account the persona logs in to, as `troupe run` starts them: on each of
    /// its platforms the platform's token, and on Telegram each of its accounts instead when
    /// it lists `settings.telegram.accounts`.
    pub fn bot_claims(&self, env: &super::Env) -> Vec<BotClaim> {
        use troupe_connectors::Platform;
        let mut out = Vec::new();
        for platform in self.platforms_in(env) {
            let accounts = match platform {
                Platform::Telegram => self.telegram_accounts(env),
                _ => None,
            };
            match accounts {
                Some(specs) => out.extend(specs.into_iter().map(|s| BotClaim {
                    platform,
                    token: s.token,
                    account: Some(s.id),
                })),
                None => out.extend(self.platform_token(platform, env).map(|token| BotClaim {
                    platform,
                    token,
                    account: None,
                })),
            }
        }
        out
    }
}

/// How personas may share a bot on `platform`, for the errors that refuse a shared token.
pub(crate) fn share_hint(platform: troupe_connectors::Platform) -> &'static str {
    match platform {
        troupe_connectors::Platform::Discord => {
            ", or let them share the bot with settings.troupe.discord.speakAs: \"webhook\" in \
             each (docs/discord.md)"
        }
        troupe_connectors::Platform::Telegram => {
            ", or let them share the bot with settings.troupe.telegram.speakAs: \"prefix\" in \
             each (docs/telegram.md)"
        }
        _ => "",
    }
}

/// `troupe run`'s refusal of two personas (or two accounts of one) logging in to one bot
/// account, which would both answer every message: the first such pair, naming both files
/// (and accounts), and how to share where sharing is allowed.
pub fn refuse_shared_bots(personas: &[&super::Persona], env: &super::Env) -> Result<(), String> {
    let mut claimed: Vec<(&super::Persona, BotClaim)> = Vec::new();
    for &p in personas {
        for claim in p.bot_claims(env) {
            let first = claimed
                .iter()
                .find(|(_, c)| c.platform == claim.platform && c.token == claim.token);
            // A bot is shared by personas that say so, each logging in with its one token
            // (not an account of `settings.telegram.accounts`, which stays one persona's).
            let shared = |first: &super::Persona, earlier: &BotClaim| {
                first.source != p.source
                    && earlier.account.is_none()
                    && claim.account.is_none()
                    && first.may_share_bot_with(p, claim.platform)
            };
            if let Some((first, earlier)) = first
                && !shared(first, earlier)
            {
                let platform = claim.platform;
                return Err(format!(
                    "{} and {} use the same {platform} token; one bot account can serve one \
                     persona: give each its own token (settings.secrets, CHARACTER.<ID>.<KEY>, \
                     or an account's botToken){}",
                    earlier.owner(first),
                    claim.owner(p),
                    share_hint(platform),
                ));
            }
            claimed.push((p, claim));
        }
    }
    Ok(())
}
