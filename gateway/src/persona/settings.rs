//! Where and how a character runs: `settings` (v0 secrets, model, the 1.x client switches,
//! `settings.troupe`), the 1.x top-level `secrets`, and the platforms it names: `clients`
//! (v0), connector `plugins` (1.x) and `clientConfig` (v0). A client or plugin troupe has no
//! connector for is a warning, never an error: the persona still runs where troupe can.

use std::collections::BTreeMap;

use troupe_connectors::Platform;

use super::ClientSwitches;
use super::accounts::{self, TelegramAccounts};
use super::diag::{Diags, join, suggest, unknown_field_message};
use super::json::{Kind, Node, Pos};
use super::values::{boolean, scalar_text, string, string_list};

/// A character's `settings`, as [`settings`] reads them.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// v0 `settings.secrets`.
    pub secrets: BTreeMap<String, String>,
    pub model: Option<String>,
    pub embedding_model: Option<String>,
    pub rag_knowledge: bool,
    /// `settings.troupe.platforms`: when present, exactly the platforms the persona runs on.
    pub troupe_platforms: Option<Vec<Platform>>,
    /// `settings.troupe.discord.speakAs`: how the persona speaks on Discord (issue 46).
    pub discord_speak_as: SpeakAs,
    /// `settings.troupe.telegram.speakAs`: how the persona speaks on Telegram (issue 46).
    pub telegram_speak_as: SpeakAs,
    /// Other scalar settings (`settings.SOME_KEY: "…"`, and 2.x's `settings.extra.SOME_KEY`),
    /// which elizaOS's `getSetting` also reads; troupe's [`super::Persona::secret`] does too.
    pub values: BTreeMap<String, String>,
    /// `settings.telegram`'s accounts (elizaOS 2.x): several bots for the persona.
    pub telegram: TelegramAccounts,
}

/// How a persona speaks on a platform (`settings.troupe.<platform>.speakAs`, docs/discord.md
/// and docs/telegram.md "A troupe on one bot").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SpeakAs {
    /// As its bot: one bot account, one persona (the default).
    #[default]
    Bot,
    /// Discord: through each channel's webhook, under its own name and avatar: several
    /// personas that all say so may share one bot token.
    Webhook,
    /// Telegram: as the bot, with its name in bold in front: several personas that all say
    /// so may share one bot token.
    Prefix,
}

/// `clientConfig.<platform>` keys troupe reads.
const SWITCH_FIELDS: &[&str] = &[
    "shouldRespondOnlyToMentions",
    "shouldIgnoreBotMessages",
    "shouldIgnoreDirectMessages",
    "shouldOnlyJoinInAllowedGroups",
    "allowedChannelIds",
    "allowedGroupIds",
];

/// Other elizaOS `clientConfig.<platform>` keys, accepted and ignored.
const IGNORED_SWITCH_FIELDS: &[&str] = &[
    "messageSimilarityThreshold",
    "isPartOfTeam",
    "teamAgentIds",
    "teamLeaderId",
    "teamMemberInterestKeywords",
    "autoPost",
    "pinnedMessagesGroups",
];

/// elizaOS clients and connector plugins troupe has no connector for. Naming one is a
/// warning: the rest of the persona still runs on the platforms troupe has.
const UNSUPPORTED_CLIENTS: &[&str] = &[
    "twitter",
    "slack",
    "auto",
    "alexa",
    "lens",
    "github",
    "instagram",
    "simsai",
    "xmtp",
    "deva",
    "telegram-account",
    "gitbook",
];

/// A client name (`clients` entry or `clientConfig` key) as a troupe platform.
pub(super) fn client_platform(name: &str) -> Option<Platform> {
    match name.to_ascii_lowercase().as_str() {
        "discord" => Some(Platform::Discord),
        "telegram" => Some(Platform::Telegram),
        "farcaster" => Some(Platform::Farcaster),
        // elizaOS's direct client is its REST API: troupe's HTTP API plays that part.
        "direct" | "web" => Some(Platform::Web),
        _ => None,
    }
}

/// The client a plugin package provides, if it is a connector plugin: `@elizaos/plugin-discord`,
/// `@elizaos/client-discord`, `@elizaos-plugins/client-discord` all give `discord`.
pub(super) fn plugin_client(plugin: &str) -> Option<&str> {
    let name = plugin.rsplit('/').next().unwrap_or(plugin);
    name.strip_prefix("plugin-")
        .or_else(|| name.strip_prefix("client-"))
        .filter(|_| plugin.starts_with("@elizaos"))
}

/// The model provider a 1.x plugin package names (`@elizaos/plugin-openai` → `openai`).
pub(super) fn plugin_provider(plugin: &str) -> Option<&'static str> {
    const PROVIDERS: &[&str] = &[
        "openai",
        "anthropic",
        "ollama",
        "groq",
        "openrouter",
        "google-genai",
        "local-ai",
    ];
    let client = plugin_client(plugin)?;
    PROVIDERS.iter().copied().find(|p| *p == client)
}

pub(super) fn clients(v: &Node, d: &mut Diags) -> Vec<String> {
    let list = string_list(v, "clients", d);
    if let Kind::Array(items) = &v.kind {
        for (i, item) in items.iter().enumerate() {
            if let Some(name) = item.as_str() {
                check_client(name, &item.pos, &format!("clients[{i}]"), d);
            }
        }
    }
    list.into_iter().map(|s| s.to_ascii_lowercase()).collect()
}

fn check_client(name: &str, pos: &Pos, path: &str, d: &mut Diags) {
    if client_platform(name).is_some() {
        return;
    }
    let lower = name.to_ascii_lowercase();
    if UNSUPPORTED_CLIENTS.contains(&lower.as_str()) {
        d.warn(
            pos,
            path,
            format!("troupe has no {lower} connector; this client is ignored (troupe runs discord, telegram, farcaster and direct)"),
        );
    } else {
        let hint = suggest(name, &["discord", "telegram", "farcaster", "direct"])
            .map(|s| format!(" (did you mean \"{s}\"?)"))
            .unwrap_or_default();
        d.warn(
            pos,
            path,
            format!("unknown client \"{name}\"{hint}; it is ignored"),
        );
    }
}

pub(super) fn plugins(v: &Node, d: &mut Diags) -> Vec<String> {
    let Kind::Array(items) = &v.kind else {
        d.wrong_type(v, "plugins", "a list of plugin package names");
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("plugins[{i}]");
        match item.as_str() {
            Some(name) => {
                // troupe runs no JavaScript plugins; only connector and provider plugins
                // mean something here. A connector plugin for a platform troupe lacks is
                // worth a warning, the way an unsupported client is.
                if let Some(client) = plugin_client(name)
                    && UNSUPPORTED_CLIENTS.contains(&client)
                {
                    d.warn(
                        &item.pos,
                        &path,
                        format!("troupe has no {client} connector; this plugin is ignored"),
                    );
                }
                out.push(name.to_string());
            }
            None => d.warn(
                &item.pos,
                &path,
                format!(
                    "expected a plugin package name, found {}; ignored",
                    item.describe()
                ),
            ),
        }
    }
    out
}

pub(super) fn secrets(
    v: &Node,
    path: &str,
    positions: &mut BTreeMap<String, Pos>,
    d: &mut Diags,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(members) = v.members() else {
        d.wrong_type(v, path, "an object of \"NAME\": \"value\" pairs");
        return out;
    };
    for m in members {
        let p = join(path, &m.key);
        match scalar_text(&m.value) {
            Some(s) => {
                positions.insert(p.clone(), m.value.pos.clone());
                out.insert(m.key.clone(), s);
            }
            None if matches!(m.value.kind, Kind::Null) => {}
            None => d.wrong_type(&m.value, &p, "a string"),
        }
    }
    out
}

pub(super) fn settings(
    v: &Node,
    switches: &mut BTreeMap<Platform, ClientSwitches>,
    positions: &mut BTreeMap<String, Pos>,
    d: &mut Diags,
) -> Settings {
    let mut s = Settings::default();
    let Some(members) = v.members() else {
        d.wrong_type(v, "settings", "an object");
        return s;
    };
    let mut at = Reading {
        settings: &mut s,
        switches,
        positions,
    };
    // elizaOS 2.x folds the settings it has no name for into `settings.extra`: they are read
    // as if written in `settings`, and one written in `settings` itself wins, as in 2.x.
    if let Some(extra) = v.get("extra").filter(|e| !matches!(e.kind, Kind::Null)) {
        match extra.members() {
            Some(inner) => {
                for m in inner.iter().filter(|m| m.key != "extra") {
                    setting(&mut at, m, "settings.extra", d);
                }
            }
            None => d.wrong_type(extra, "settings.extra", "an object"),
        }
    }
    // `settings` is an open map in every elizaOS version (plugins read their own keys from
    // it), so unknown keys are not warned about; only the keys troupe reads are typed.
    for m in members.iter().filter(|m| m.key != "extra") {
        setting(&mut at, m, "settings", d);
    }
    let telegram = &s.telegram;
    // 2.x's `settings.telegram.botToken` and `.apiRoot` are the file's own values of the
    // settings troupe names `TELEGRAM_BOT_TOKEN` and `TELEGRAM_API_ROOT`.
    for (key, value) in [
        ("TELEGRAM_BOT_TOKEN", telegram.bot_token.clone()),
        ("TELEGRAM_API_ROOT", telegram.api_root.clone()),
    ] {
        if let Some(value) = value {
            s.values.entry(key.to_string()).or_insert(value);
        }
    }
    s
}

/// Where [`setting`] puts what it reads.
struct Reading<'a> {
    settings: &'a mut Settings,
    switches: &'a mut BTreeMap<Platform, ClientSwitches>,
    positions: &'a mut BTreeMap<String, Pos>,
}

/// One member of `settings` (or of `settings.extra`, `parent`).
fn setting(at: &mut Reading<'_>, m: &super::json::Member, parent: &str, d: &mut Diags) {
    let path = join(parent, &m.key);
    let val = &m.value;
    let s = &mut *at.settings;
    if matches!(val.kind, Kind::Null) {
        return;
    }
    match m.key.as_str() {
        "secrets" => s.secrets = secrets(val, &path, at.positions, d),
        "model" => s.model = string(val, &path, d),
        "embeddingModel" => s.embedding_model = string(val, &path, d),
        "ragKnowledge" => s.rag_knowledge = boolean(val, &path, d).unwrap_or(false),
        "voice" => {
            if val.members().is_none() {
                d.wrong_type(val, &path, "an object");
            }
        }
        "troupe" => s.troupe_platforms = troupe_settings(val, s, d),
        // MCP servers: read and checked by `tools::servers` and `tools::policy`; their
        // fields' positions are kept here, so that a refusal points at the line.
        "mcp" => positions_under(val, &path, at.positions, 4),
        key @ ("discord" | "telegram" | "farcaster") if val.members().is_some() => {
            // 1.x keeps client switches here; `clientConfig` (v0) wins when both exist,
            // because `clientConfig` is read after `settings`. 2.x's Telegram accounts
            // live here too (`accounts`).
            let skip: &[&str] = if key == "telegram" {
                s.telegram = accounts::telegram_settings(val, &path, at.positions, d);
                accounts::MULTI_FIELDS
            } else {
                &[]
            };
            if let Some(platform) = client_platform(key) {
                let sw = parse_switches(val, &path, skip, d);
                at.switches.insert(platform, sw);
            }
        }
        key => {
            if let Some(text) = scalar_text(val) {
                s.values.insert(key.to_string(), text);
            }
        }
    }
}

/// The position of every member of `v` down to `depth` levels, by its path
/// (`settings.mcp.servers.files.env.BASH_ENV`).
fn positions_under(v: &Node, path: &str, positions: &mut BTreeMap<String, Pos>, depth: usize) {
    let Some(members) = v.members() else {
        return;
    };
    for m in members {
        let p = join(path, &m.key);
        positions.insert(p.clone(), m.value.pos.clone());
        if depth > 0 {
            positions_under(&m.value, &p, positions, depth - 1);
        }
    }
}

fn troupe_settings(v: &Node, s: &mut Settings, d: &mut Diags) -> Option<Vec<Platform>> {
    let Some(members) = v.members() else {
        d.wrong_type(v, "settings.troupe", "an object { \"platforms\": [...] }");
        return None;
    };
    let mut platforms = None;
    for m in members {
        let path = join("settings.troupe", &m.key);
        match m.key.as_str() {
            "platforms" => {
                // Type errors (not a list, an item not a string) are reported here.
                string_list(&m.value, &path, d);
                let mut list = Vec::new();
                if let Kind::Array(items) = &m.value.kind {
                    for (i, item) in items.iter().enumerate() {
                        let Some(name) = item.as_str() else { continue };
                        match client_platform(name) {
                            Some(p) if !list.contains(&p) => list.push(p),
                            Some(_) => {}
                            None => d.error(
                                &item.pos,
                                &format!("{path}[{i}]"),
                                format!("unknown platform \"{name}\"; use discord, telegram, farcaster or web"),
                            ),
                        }
                    }
                }
                platforms = Some(list);
            }
            // Schedules of autonomous posts: read and checked by `posts::settings`, which
            // reports a bad one at load and in `troupe check`.
            "posts" => {}
            // Which rooms may use the persona's tools: read by `tools::policy` (issue 33).
            "tools" => {}
            // Owners, `platform:user_id` entries: read by `access::rules` (issue 44).
            "owners" => {
                string_list(&m.value, &path, d);
            }
            // How the persona speaks on a bot it may share (issue 46).
            "discord" => s.discord_speak_as = speak_as(&m.value, &path, DISCORD_VOICES, d),
            "telegram" => s.telegram_speak_as = speak_as(&m.value, &path, TELEGRAM_VOICES, d),
            other => d.warn(
                &m.key_pos,
                &path,
                unknown_field_message(
                    other,
                    &[
                        "platforms",
                        "posts",
                        "tools",
                        "owners",
                        "discord",
                        "telegram",
                    ],
                ),
            ),
        }
    }
    platforms
}

/// The `speakAs` values of one platform: the value, what it means, and what it says (for
/// the error on any other); the first is the one that shares a bot.
type Voices = [(&'static str, SpeakAs, &'static str); 2];

const DISCORD_VOICES: Voices = [
    (
        "webhook",
        SpeakAs::Webhook,
        "personas share one bot and speak through channel webhooks",
    ),
    ("bot", SpeakAs::Bot, "the default"),
];

const TELEGRAM_VOICES: Voices = [
    (
        "prefix",
        SpeakAs::Prefix,
        "personas share one bot and speak with their name in bold in front",
    ),
    ("bot", SpeakAs::Bot, "the default"),
];

/// `settings.troupe.<platform>`: `{"speakAs": …}`, one of the platform's `voices`.
fn speak_as(v: &Node, path: &str, voices: Voices, d: &mut Diags) -> SpeakAs {
    let [(shared, ..), (default, ..)] = voices;
    let Some(members) = v.members() else {
        d.wrong_type(
            v,
            path,
            &format!("an object {{ \"speakAs\": \"{shared}\" }}"),
        );
        return SpeakAs::Bot;
    };
    let mut speak_as = SpeakAs::Bot;
    for m in members {
        let p = join(path, &m.key);
        match m.key.as_str() {
            "speakAs" => match voices
                .iter()
                .find(|(name, ..)| Some(*name) == m.value.as_str())
            {
                Some((_, voice, _)) => speak_as = *voice,
                None => d.error(
                    &m.value.pos,
                    &p,
                    format!(
                        "expected \"{shared}\" ({}) or \"{default}\" ({})",
                        voices[0].2, voices[1].2
                    ),
                ),
            },
            other => d.warn(&m.key_pos, &p, unknown_field_message(other, &["speakAs"])),
        }
    }
    speak_as
}

pub(super) fn client_config(
    v: &Node,
    switches: &mut BTreeMap<Platform, ClientSwitches>,
    d: &mut Diags,
) {
    let Some(members) = v.members() else {
        d.wrong_type(v, "clientConfig", "an object { \"discord\": {…}, … }");
        return;
    };
    for m in members {
        let path = join("clientConfig", &m.key);
        if matches!(m.value.kind, Kind::Null) {
            continue;
        }
        match client_platform(&m.key) {
            Some(p) if p != Platform::Web => {
                let sw = parse_switches(&m.value, &path, &[], d);
                switches.insert(p, sw);
            }
            _ => check_client(&m.key, &m.key_pos, &path, d),
        }
    }
}

/// One platform's switches. troupe ignores other bots unless told otherwise: two bots that
/// answer each other loop forever, and elizaOS users rarely want that either.
fn parse_switches(v: &Node, path: &str, skip: &[&str], d: &mut Diags) -> ClientSwitches {
    let mut sw = ClientSwitches::default();
    let Some(members) = v.members() else {
        d.wrong_type(v, path, "an object of switches");
        return sw;
    };
    for m in members.iter().filter(|m| !skip.contains(&m.key.as_str())) {
        let p = join(path, &m.key);
        let val = &m.value;
        match m.key.as_str() {
            "shouldRespondOnlyToMentions" => {
                sw.respond_only_to_mentions = boolean(val, &p, d).unwrap_or(false)
            }
            "shouldIgnoreBotMessages" => {
                sw.ignore_bot_messages = boolean(val, &p, d).unwrap_or(true)
            }
            "shouldIgnoreDirectMessages" => {
                sw.ignore_direct_messages = boolean(val, &p, d).unwrap_or(false)
            }
            "shouldOnlyJoinInAllowedGroups" => {
                sw.only_join_allowed_groups = boolean(val, &p, d).unwrap_or(false)
            }
            "allowedChannelIds" | "allowedGroupIds" => {
                if matches!(val.kind, Kind::Null) {
                    continue;
                }
                let Kind::Array(items) = &val.kind else {
                    d.wrong_type(val, &p, "a list of ids");
                    continue;
                };
                let rooms = sw.allowed_rooms.get_or_insert_with(Vec::new);
                for (i, item) in items.iter().enumerate() {
                    // Telegram group ids are often written as numbers; both are fine.
                    match &item.kind {
                        Kind::String(_) | Kind::Number(_) => {
                            if let Some(id) = scalar_text(item) {
                                rooms.push(id);
                            }
                        }
                        _ => d.wrong_type(item, &format!("{p}[{i}]"), "an id (a string)"),
                    }
                }
            }
            key if IGNORED_SWITCH_FIELDS.contains(&key) => {}
            key => {
                let known: Vec<&str> = SWITCH_FIELDS
                    .iter()
                    .chain(IGNORED_SWITCH_FIELDS)
                    .copied()
                    .collect();
                d.warn(&m.key_pos, &p, unknown_field_message(key, &known));
            }
        }
    }
    sw
}
