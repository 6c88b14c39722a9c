//! Who a persona lets in, as its settings say (issue 44): the DM policy and allowlist of
//! each platform, its owners, the group rooms it answers in and the ones it only listens
//! to, and whether its tools follow trust in DMs. Read once per persona (at load and at each
//! reload) from its character and the environment, like every per-persona setting
//! (`persona::Persona::secret`: `CHARACTER.<ID>.<KEY>`, the file's `secrets`,
//! `settings.secrets` and `settings`, then the environment, then troupe.toml). A list may be
//! written as a JSON array (elizaOS's `TELEGRAM_ALLOWED_CHATS`) or as text separated by
//! commas or spaces. Pure: nothing here touches the database.

use serde_json::Value;
use troupe_connectors::Platform;

use crate::persona::{Env, Persona};

/// Who may open a direct conversation (`<PLATFORM>_DM_POLICY`, elizaOS 2.x's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    /// Anyone (troupe's default, so that community characters keep working).
    #[default]
    Open,
    /// A stranger gets a code; an owner (or the operator) approves it.
    Pairing,
    /// Only the senders in `<PLATFORM>_ALLOW_FROM` (and owners, and people approved).
    Allowlist,
    /// Nobody but owners.
    Disabled,
}

impl DmPolicy {
    /// Parses a policy word, ignoring case and surrounding space; `None` when unknown.
    pub fn parse(text: &str) -> Option<DmPolicy> {
        match text.trim().to_ascii_lowercase().as_str() {
            "open" => Some(DmPolicy::Open),
            "pairing" => Some(DmPolicy::Pairing),
            "allowlist" => Some(DmPolicy::Allowlist),
            "disabled" => Some(DmPolicy::Disabled),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DmPolicy::Open => "open",
            DmPolicy::Pairing => "pairing",
            DmPolicy::Allowlist => "allowlist",
            DmPolicy::Disabled => "disabled",
        }
    }
}

/// One platform's rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlatformRules {
    pub dm: DmPolicy,
    /// Whether `<PLATFORM>_DM_POLICY` was written somewhere, rather than defaulted.
    pub dm_set: bool,
    /// `<PLATFORM>_ALLOW_FROM`: user ids, and `@usernames` (lower-cased) on Telegram.
    pub allow_from: Vec<String>,
    /// The group rooms it answers in (`TELEGRAM_ALLOWED_CHATS`, Discord's `CHANNEL_IDS`);
    /// `None`: every room.
    pub rooms: Option<Vec<String>>,
    /// Rooms it reads and remembers and never answers (`DISCORD_LISTEN_CHANNEL_IDS`).
    pub listen_only: Vec<String>,
}

/// A persona's access rules, every platform's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    pub telegram: PlatformRules,
    pub discord: PlatformRules,
    /// `platform:user_id` entries (`TROUPE_OWNERS`, `settings.troupe.owners`).
    pub owners: Vec<String>,
    /// `settings.troupe.tools.dm = "everyone"`: tools in DMs for anyone let in, not only
    /// the trusted.
    pub tools_for_everyone: bool,
    /// What could not be read, for `troupe check` and the start log.
    pub problems: Vec<String>,
    /// The `allowedChats` of each Telegram account that lists them (elizaOS 2.x's
    /// `settings.telegram.accounts`, issue 46), by account id: in that account's rooms they
    /// take the place of `TELEGRAM_ALLOWED_CHATS`.
    pub account_rooms: Vec<(String, Vec<String>)>,
}

impl Rules {
    /// The rules `persona` runs with under `env`.
    pub fn of(persona: &Persona, env: &Env) -> Rules {
        let mut problems = Vec::new();
        let telegram_rooms = some_list(persona, env, "TELEGRAM_ALLOWED_CHATS");
        // elizaOS's `TELEGRAM_ALLOWED_CHATS` restricts every chat, DMs too (a DM's chat id is
        // its sender's id). So, with the list set and no DM policy of its own, a DM is let in
        // as under `allowlist`: a listed chat, an owner, an approved person. A policy set
        // explicitly governs DMs instead (docs/access.md, "Groups").
        let telegram_dm = match telegram_rooms.as_deref() {
            Some(rooms)
                if !rooms.is_empty() && persona.secret("TELEGRAM_DM_POLICY", env).is_none() =>
            {
                DmPolicy::Allowlist
            }
            _ => policy(persona, env, "TELEGRAM_DM_POLICY", &mut problems),
        };
        let telegram = PlatformRules {
            dm: telegram_dm,
            dm_set: persona.secret("TELEGRAM_DM_POLICY", env).is_some(),
            allow_from: list(persona, env, "TELEGRAM_ALLOW_FROM")
                .into_iter()
                .map(|u| {
                    if u.starts_with('@') {
                        u.to_ascii_lowercase()
                    } else {
                        u
                    }
                })
                .collect(),
            rooms: telegram_rooms,
            listen_only: Vec::new(),
        };
        let discord = PlatformRules {
            dm: policy(persona, env, "DISCORD_DM_POLICY", &mut problems),
            dm_set: persona.secret("DISCORD_DM_POLICY", env).is_some(),
            allow_from: list(persona, env, "DISCORD_ALLOW_FROM"),
            rooms: some_list(persona, env, "CHANNEL_IDS"),
            listen_only: list(persona, env, "DISCORD_LISTEN_CHANNEL_IDS"),
        };
        let mut owners = list(persona, env, "TROUPE_OWNERS");
        if let Some(Value::Array(items)) = persona.raw.pointer("/settings/troupe/owners") {
            owners.extend(items.iter().filter_map(text_of));
        }
        owners.retain(|o| match o.split_once(':') {
            Some((p, u)) if p.parse::<Platform>().is_ok() && !u.is_empty() => true,
            _ => {
                problems.push(format!(
                    "owner `{o}`: expected `platform:user_id` (telegram:123, discord:456)"
                ));
                false
            }
        });
        owners.dedup();
        let tools_for_everyone = persona
            .raw
            .pointer("/settings/troupe/tools/dm")
            .and_then(Value::as_str)
            .is_some_and(|v| v.eq_ignore_ascii_case("everyone"));
        let account_rooms = persona
            .character
            .settings
            .telegram
            .accounts
            .iter()
            .filter_map(|a| Some((a.id.clone(), a.allowed_chats.clone()?)))
            .collect();
        Rules {
            telegram,
            discord,
            owners,
            tools_for_everyone,
            problems,
            account_rooms,
        }
    }

    /// The group rooms answered in through the account whose ids carry `tag` (`None`: the
    /// `default` account, or the persona's one bot): that account's `allowedChats`, else
    /// the platform's list; `None`: every room.
    pub fn rooms_of(&self, platform: Platform, tag: Option<&str>) -> Option<&[String]> {
        let on = self.on(platform)?;
        if platform == Platform::Telegram {
            let id = tag.unwrap_or("default");
            if let Some((_, rooms)) = self.account_rooms.iter().find(|(a, _)| a == id) {
                return Some(rooms);
            }
        }
        on.rooms.as_deref()
    }

    /// The DM policy in a room of the account whose ids carry `tag`: an account's own
    /// `allowedChats` closes its DMs as `TELEGRAM_ALLOWED_CHATS` does (elizaOS's lists hold
    /// every chat), unless a DM policy is written.
    pub fn dm_of(&self, platform: Platform, tag: Option<&str>) -> DmPolicy {
        let Some(on) = self.on(platform) else {
            return DmPolicy::Open;
        };
        let listed = self.rooms_of(platform, tag).is_some_and(|r| !r.is_empty());
        if platform == Platform::Telegram && !on.dm_set && listed {
            DmPolicy::Allowlist
        } else {
            on.dm
        }
    }

    /// The rules of `platform`; `None` where troupe has no DM gate (the HTTP API, whose
    /// callers hold a token, and Farcaster, whose conversations are public casts).
    pub fn on(&self, platform: Platform) -> Option<&PlatformRules> {
        match platform {
            Platform::Telegram => Some(&self.telegram),
            Platform::Discord => Some(&self.discord),
            _ => None,
        }
    }

    /// Whether `platform:user` is one of the persona's owners.
    pub fn is_owner(&self, platform: Platform, user: &str) -> bool {
        self.owners.iter().any(|o| {
            o.split_once(':')
                .is_some_and(|(p, u)| p.parse::<Platform>().ok() == Some(platform) && u == user)
        })
    }
}

impl PlatformRules {
    /// Whether the sender is on `<PLATFORM>_ALLOW_FROM`, by id or by `@username`.
    pub fn allows(&self, user: &str, username: Option<&str>) -> bool {
        self.allow_from.iter().any(|a| {
            a == user
                || username.is_some_and(|n| {
                    a.strip_prefix('@')
                        .is_some_and(|a| a.eq_ignore_ascii_case(n.trim_start_matches('@')))
                })
        })
    }
}

fn policy(persona: &Persona, env: &Env, key: &str, problems: &mut Vec<String>) -> DmPolicy {
    let Some(text) = persona.secret(key, env) else {
        return DmPolicy::Open;
    };
    DmPolicy::parse(&text).unwrap_or_else(|| {
        // elizaOS fails closed on a word it does not know; so does troupe.
        problems.push(format!(
            "{key}: `{}` is not open, pairing, allowlist or disabled; using pairing",
            text.trim()
        ));
        DmPolicy::Pairing
    })
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A list setting: a JSON array in the file, or text (a JSON array, or words separated by
/// commas or spaces) wherever a setting may be.
fn some_list(persona: &Persona, env: &Env, key: &str) -> Option<Vec<String>> {
    for at in [
        format!("/secrets/{key}"),
        format!("/settings/secrets/{key}"),
        format!("/settings/{key}"),
        // elizaOS 2.x keeps the settings it has no name for in `settings.extra`.
        format!("/settings/extra/{key}"),
    ] {
        if let Some(Value::Array(items)) = persona.raw.pointer(&at) {
            return Some(items.iter().filter_map(text_of).collect());
        }
    }
    let text = persona.secret(key, env)?;
    Some(split_list(&text))
}

fn list(persona: &Persona, env: &Env, key: &str) -> Vec<String> {
    some_list(persona, env, key).unwrap_or_default()
}

/// `["1","2"]`, `[1, 2]`, `1,2` or `1 2`.
pub fn split_list(text: &str) -> Vec<String> {
    if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text.trim()) {
        return items.iter().filter_map(text_of).collect();
    }
    text.split(|c: char| c == ',' || c.is_whitespace())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persona::test_support::{env, from_json};
    use serde_json::json;

    #[test]
    fn defaults_are_open_and_names_are_elizas() {
        let p = from_json(json!({"name": "A", "bio": "x"}));
        let r = Rules::of(&p, &Env::new());
        assert_eq!(r.telegram.dm, DmPolicy::Open);
        assert_eq!(r.discord.rooms, None);
        assert!(r.owners.is_empty());

        let p = from_json(json!({"name": "A", "bio": "x", "settings": {
            "TELEGRAM_DM_POLICY": "Pairing",
            "TELEGRAM_ALLOWED_CHATS": ["-100", 7],
            "TELEGRAM_ALLOW_FROM": "501, @Ann",
            "secrets": {"DISCORD_DM_POLICY": "nonsense"},
            "troupe": {"owners": ["telegram:9", "bad"], "tools": {"dm": "everyone"}}}}));
        let env = env(&[
            ("DISCORD_LISTEN_CHANNEL_IDS", "[\"c1\"]"),
            ("TROUPE_OWNERS", "discord:5"),
        ]);
        let r = Rules::of(&p, &env);
        assert_eq!(r.telegram.dm, DmPolicy::Pairing);
        assert_eq!(r.telegram.rooms, Some(vec!["-100".into(), "7".into()]));
        assert!(r.telegram.allows("501", None) && r.telegram.allows("2", Some("ann")));
        assert!(!r.telegram.allows("2", Some("bob")));
        // An unknown word fails closed, and says so.
        assert_eq!(r.discord.dm, DmPolicy::Pairing);
        assert_eq!(r.discord.listen_only, vec!["c1".to_string()]);
        assert!(r.is_owner(Platform::Telegram, "9") && r.is_owner(Platform::Discord, "5"));
        assert!(!r.is_owner(Platform::Discord, "9"));
        assert!(r.tools_for_everyone);
        assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
    }

    #[test]
    fn allowed_chats_without_a_dm_policy_close_unlisted_dms_as_in_eliza() {
        let listed = json!({"name": "A", "bio": "x", "settings": {"TELEGRAM_ALLOWED_CHATS": "[\"-100\", \"7\"]"}});
        let r = Rules::of(&from_json(listed.clone()), &Env::new());
        assert_eq!(r.telegram.dm, DmPolicy::Allowlist);
        // An explicit policy wins over the list's reading.
        let mut open = listed;
        open["settings"]["TELEGRAM_DM_POLICY"] = json!("open");
        assert_eq!(
            Rules::of(&from_json(open), &Env::new()).telegram.dm,
            DmPolicy::Open
        );
        // An empty list restricts nothing.
        let empty = json!({"name": "A", "bio": "x", "settings": {"TELEGRAM_ALLOWED_CHATS": []}});
        assert_eq!(
            Rules::of(&from_json(empty), &Env::new()).telegram.dm,
            DmPolicy::Open
        );
        // An account's own list closes that account's DMs the same way, and only its.
        let accounts = json!({"name": "A", "bio": "x", "settings": {"telegram": {"accounts": {
            "support": {"botToken": "1:a", "allowedChats": ["-5"]}, "sales": {"botToken": "2:b"}}}}});
        let r = Rules::of(&from_json(accounts), &Env::new());
        assert_eq!(
            r.dm_of(Platform::Telegram, Some("support")),
            DmPolicy::Allowlist
        );
        assert_eq!(r.dm_of(Platform::Telegram, Some("sales")), DmPolicy::Open);
        // Discord's channel list is about guild channels only: its DMs stay open.
        let discord = json!({"name": "A", "bio": "x", "settings": {"CHANNEL_IDS": ["c"]}});
        assert_eq!(
            Rules::of(&from_json(discord), &Env::new()).discord.dm,
            DmPolicy::Open
        );
    }
}
