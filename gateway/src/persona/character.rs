//! The character model: one typed [`Character`] for both elizaOS formats, and the pass that
//! builds it from a positioned JSON tree, reporting every problem with its position.
//!
//! v0 ("legacy") and 1.x files differ in a few places, and both are read the same way:
//! - example speakers: v0 `user`, 1.x `name`;
//! - secrets: v0 `settings.secrets`, 1.x top-level `secrets` (both are kept);
//! - connectors: v0 `clients`, 1.x `plugins` (`@elizaos/plugin-discord`…);
//! - client switches: v0 `clientConfig.discord`, 1.x `settings.discord`.
//!
//! Rules: unknown fields are kept (in `extra`) and warned about, never refused; a wrong type
//! is an error at the value; `null` counts as absent for every optional field. This module
//! does not touch the file system except to check that knowledge paths exist and stay where
//! `paths` allows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use troupe_connectors::Platform;

use super::ClientSwitches;
use super::diag::{Diags, join, suggest, unknown_field_message};
use super::json::{Kind, Node, Pos};
use super::paths::Policy;
use super::prompt;

/// A character file, both formats in one shape. Lists are empty when absent.
#[derive(Debug, Clone, Default)]
pub struct Character {
    pub id: Option<String>,
    pub name: String,
    pub username: Option<String>,
    pub system: Option<String>,
    /// `modelProvider` as written (v0). 1.x derives it from a provider plugin instead.
    pub model_provider: Option<String>,
    /// A string bio is kept as a one-item list: sampling three items of a one-item list gives
    /// back the whole string, which is what elizaOS does with a string bio.
    pub bio: Vec<String>,
    pub lore: Vec<String>,
    pub message_examples: Vec<Vec<ExampleMessage>>,
    pub post_examples: Vec<String>,
    pub topics: Vec<String>,
    pub adjectives: Vec<String>,
    pub style: Style,
    pub knowledge: Vec<KnowledgeEntry>,
    /// v0 `clients`, lower-cased.
    pub clients: Vec<String>,
    /// Plugin package names (1.x uses them to name connectors and the model provider).
    pub plugins: Vec<String>,
    pub settings: Settings,
    /// 1.x top-level `secrets`.
    pub secrets: BTreeMap<String, String>,
    /// Switches per platform, from `clientConfig.<platform>` over 1.x `settings.<platform>`.
    pub client_config: BTreeMap<Platform, ClientSwitches>,
    /// Templates by name (`messageHandlerTemplate`, `discordMessageHandlerTemplate`…).
    pub templates: BTreeMap<String, String>,
    /// Where some values were written, for diagnostics raised after loading (duplicate
    /// tokens across files): keys such as `name`, `clients`, `secrets.DISCORD_API_TOKEN`.
    pub positions: BTreeMap<String, Pos>,
    /// Fields troupe does not know, kept as written.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One line of an example conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExampleMessage {
    /// `user` (v0) or `name` (1.x): `{{user1}}`, `{{name1}}` or the character's name.
    pub speaker: String,
    pub text: String,
    /// v0 `content.action`, or 1.x `content.actions` joined with ", ".
    pub action: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Style {
    pub all: Vec<String>,
    pub chat: Vec<String>,
    pub post: Vec<String>,
}

/// A `knowledge` entry. Paths are resolved at load time to the location that exists, with
/// symlinks resolved, and are under the personas directory or an allowed root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnowledgeEntry {
    Text(String),
    File { path: PathBuf, shared: bool },
    Directory { path: PathBuf, shared: bool },
}

#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// v0 `settings.secrets`.
    pub secrets: BTreeMap<String, String>,
    pub model: Option<String>,
    pub embedding_model: Option<String>,
    pub rag_knowledge: bool,
    /// `settings.troupe.platforms`: when present, exactly the platforms the persona runs on.
    pub troupe_platforms: Option<Vec<Platform>>,
    /// Other scalar settings (`settings.SOME_KEY: "…"`), which elizaOS's `getSetting` also
    /// reads; troupe's [`super::Persona::secret`] does too.
    pub values: BTreeMap<String, String>,
}

/// Top-level fields troupe reads.
const USED_FIELDS: &[&str] = &[
    "id",
    "name",
    "username",
    "system",
    "modelProvider",
    "templates",
    "bio",
    "lore",
    "messageExamples",
    "postExamples",
    "topics",
    "adjectives",
    "knowledge",
    "clients",
    "plugins",
    "settings",
    "secrets",
    "clientConfig",
    "style",
    "extends",
];

/// Top-level fields of the elizaOS types that troupe accepts silently and ignores.
const IGNORED_FIELDS: &[&str] = &[
    "email",
    "imageModelProvider",
    "imageVisionModelProvider",
    "modelEndpointOverride",
    "postProcessors",
    "twitterProfile",
    "instagramProfile",
    "simsaiProfile",
    "nft",
    "twitterSpaces",
];

/// Names people use for character fields in other formats, and the field they mean.
const ALIASES: &[(&str, &str)] = &[
    ("examples", "messageExamples"),
    ("description", "bio"),
    ("biography", "bio"),
    ("background", "lore"),
    ("backstory", "lore"),
    ("interests", "topics"),
    ("traits", "adjectives"),
    ("personality", "adjectives"),
    ("model", "settings.model"),
    ("systemPrompt", "system"),
];

/// Message handler templates troupe composes prompts from, by platform.
pub(crate) const HANDLER_TEMPLATES: &[&str] = &[
    "messageHandlerTemplate",
    "discordMessageHandlerTemplate",
    "telegramMessageHandlerTemplate",
    "farcasterMessageHandlerTemplate",
];

/// Other elizaOS template names: kept without a warning, but troupe does not use them.
const ELIZA_TEMPLATES: &[&str] = &[
    "goalsTemplate",
    "factsTemplate",
    "shouldRespondTemplate",
    "continueMessageHandlerTemplate",
    "evaluationTemplate",
    "twitterSearchTemplate",
    "twitterActionTemplate",
    "twitterPostTemplate",
    "twitterMessageHandlerTemplate",
    "twitterShouldRespondTemplate",
    "twitterVoiceHandlerTemplate",
    "instagramPostTemplate",
    "instagramMessageHandlerTemplate",
    "instagramShouldRespondTemplate",
    "farcasterPostTemplate",
    "lensPostTemplate",
    "lensMessageHandlerTemplate",
    "farcasterShouldRespondTemplate",
    "lensShouldRespondTemplate",
    "telegramShouldRespondTemplate",
    "telegramAutoPostTemplate",
    "telegramPinnedMessageTemplate",
    "discordAutoPostTemplate",
    "discordAnnouncementHypeTemplate",
    "discordVoiceHandlerTemplate",
    "discordShouldRespondTemplate",
    "slackMessageHandlerTemplate",
    "slackShouldRespondTemplate",
    "jeeterPostTemplate",
    "jeeterSearchTemplate",
    "jeeterInteractionTemplate",
    "jeeterMessageHandlerTemplate",
    "jeeterShouldRespondTemplate",
    "devaPostTemplate",
    "postCreationTemplate",
    "replyTemplate",
    "reflectionTemplate",
];

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
pub(crate) fn client_platform(name: &str) -> Option<Platform> {
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
pub(crate) fn plugin_client(plugin: &str) -> Option<&str> {
    let name = plugin.rsplit('/').next().unwrap_or(plugin);
    name.strip_prefix("plugin-")
        .or_else(|| name.strip_prefix("client-"))
        .filter(|_| plugin.starts_with("@elizaos"))
}

/// The model provider a 1.x plugin package names (`@elizaos/plugin-openai` → `openai`).
pub(crate) fn plugin_provider(plugin: &str) -> Option<&'static str> {
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

/// Builds the character from a (merged) tree. Knowledge paths are resolved from the file
/// each entry was written in; `cwd` is the last place looked, as elizaOS does, and `policy`
/// says where they may lead.
pub(crate) fn from_node(root: &Node, cwd: &Path, policy: &Policy, d: &mut Diags) -> Character {
    let mut c = Character::default();
    let Some(members) = root.members() else {
        d.error(
            &root.pos,
            "(file)",
            format!(
                "a character file is one JSON object `{{ \"name\": …, \"bio\": … }}`, found {}",
                root.describe()
            ),
        );
        return c;
    };

    for m in members {
        let key = m.key.as_str();
        let v = &m.value;
        c.positions.insert(key.to_string(), v.pos.clone());
        if matches!(v.kind, Kind::Null) && key != "name" && key != "bio" {
            continue;
        }
        match key {
            "id" => c.id = string(v, key, d),
            "name" => {}
            "username" => c.username = string(v, key, d),
            "system" => c.system = string(v, key, d),
            "modelProvider" => c.model_provider = string(v, key, d),
            "bio" => {}
            "lore" => c.lore = string_list(v, key, d),
            "postExamples" => c.post_examples = string_list(v, key, d),
            "topics" => c.topics = string_list(v, key, d),
            "adjectives" => c.adjectives = string_list(v, key, d),
            "messageExamples" => c.message_examples = examples(v, d),
            "style" => c.style = style(v, d),
            "knowledge" => c.knowledge = knowledge(v, cwd, policy, d),
            "clients" => c.clients = clients(v, d),
            "plugins" => c.plugins = plugins(v, d),
            "settings" => c.settings = settings(v, &mut c.client_config, &mut c.positions, d),
            "secrets" => c.secrets = secrets(v, key, &mut c.positions, d),
            "clientConfig" => client_config(v, &mut c.client_config, d),
            "templates" => c.templates = templates(v, d),
            // Resolved by the loader before this pass; only its type matters here.
            "extends" => {}
            _ if IGNORED_FIELDS.contains(&key) => {}
            _ => {
                let message = match ALIASES
                    .iter()
                    .find(|(alias, _)| alias.eq_ignore_ascii_case(key))
                {
                    Some((_, field)) => {
                        format!(
                            "unknown field (did you mean \"{field}\"?); it is kept but not used"
                        )
                    }
                    None => {
                        let known: Vec<&str> =
                            USED_FIELDS.iter().chain(IGNORED_FIELDS).copied().collect();
                        unknown_field_message(key, &known)
                    }
                };
                d.warn(&m.key_pos, key, message);
                c.extra.insert(key.to_string(), v.to_value());
            }
        }
    }

    match root.get("name") {
        None => d.error(
            &root.pos,
            "name",
            "missing; every character needs a \"name\", e.g. \"name\": \"Alice\"",
        ),
        Some(v) => match &v.kind {
            Kind::String(s) if s.trim().is_empty() => d.error(
                &v.pos,
                "name",
                "is empty; write the character's name, e.g. \"name\": \"Alice\"",
            ),
            Kind::String(s) => c.name = s.trim().to_string(),
            _ => d.wrong_type(v, "name", "a string"),
        },
    }

    match root.get("bio") {
        None => d.error(
            &root.pos,
            "bio",
            "missing; every character needs a \"bio\": a string or a list of strings",
        ),
        Some(v) => {
            c.bio = match &v.kind {
                Kind::String(s) => vec![s.clone()],
                Kind::Array(_) => string_list(v, "bio", d),
                _ => {
                    d.wrong_type(v, "bio", "a string or a list of strings");
                    Vec::new()
                }
            };
            c.bio.retain(|b| !b.trim().is_empty());
            let typed_ok = matches!(v.kind, Kind::String(_) | Kind::Array(_));
            if c.bio.is_empty() && typed_ok && !list_has_wrong_items(v) {
                d.error(
                    &v.pos,
                    "bio",
                    "is empty; write at least one sentence about who the character is",
                );
            }
        }
    }
    c
}

fn list_has_wrong_items(v: &Node) -> bool {
    match &v.kind {
        Kind::Array(items) => items.iter().any(|i| !matches!(i.kind, Kind::String(_))),
        _ => false,
    }
}

fn string(v: &Node, path: &str, d: &mut Diags) -> Option<String> {
    match &v.kind {
        Kind::String(s) => Some(s.clone()),
        _ => {
            d.wrong_type(v, path, "a string");
            None
        }
    }
}

fn boolean(v: &Node, path: &str, d: &mut Diags) -> Option<bool> {
    match &v.kind {
        Kind::Bool(b) => Some(*b),
        Kind::Null => None,
        _ => {
            d.wrong_type(v, path, "true or false");
            None
        }
    }
}

/// A list of strings. A single string gets a hint to wrap it, since elizaOS refuses it too.
fn string_list(v: &Node, path: &str, d: &mut Diags) -> Vec<String> {
    match &v.kind {
        Kind::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match &item.kind {
                Kind::String(s) => Some(s.clone()),
                _ => {
                    d.wrong_type(item, &format!("{path}[{i}]"), "a string");
                    None
                }
            })
            .collect(),
        Kind::String(_) => {
            d.error(
                &v.pos,
                path,
                "expected a list of strings, found a string (wrap it in [ ])",
            );
            Vec::new()
        }
        _ => {
            d.wrong_type(v, path, "a list of strings");
            Vec::new()
        }
    }
}

/// Secret and id values may be written as strings, numbers or booleans (1.x allows all
/// three); they are used as strings.
fn scalar_text(v: &Node) -> Option<String> {
    match &v.kind {
        Kind::String(s) => Some(s.clone()),
        Kind::Number(n) => Some(n.clone()),
        Kind::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn examples(v: &Node, d: &mut Diags) -> Vec<Vec<ExampleMessage>> {
    let Kind::Array(convs) = &v.kind else {
        d.wrong_type(
            v,
            "messageExamples",
            "a list of conversations (each a list of messages)",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, conv) in convs.iter().enumerate() {
        let path = format!("messageExamples[{i}]");
        let Kind::Array(msgs) = &conv.kind else {
            let hint = if matches!(conv.kind, Kind::Object(_)) {
                " (each example is a conversation: wrap its messages in [ ])"
            } else {
                ""
            };
            d.error(
                &conv.pos,
                &path,
                format!(
                    "expected a list of messages, found {}{hint}",
                    conv.describe()
                ),
            );
            continue;
        };
        let mut lines = Vec::new();
        for (j, msg) in msgs.iter().enumerate() {
            let path = format!("{path}[{j}]");
            if let Some(line) = example_message(msg, &path, d) {
                lines.push(line);
            }
        }
        if !lines.is_empty() {
            out.push(lines);
        }
    }
    out
}

fn example_message(msg: &Node, path: &str, d: &mut Diags) -> Option<ExampleMessage> {
    let Some(members) = msg.members() else {
        d.wrong_type(
            msg,
            path,
            "a message object { \"user\": …, \"content\": { \"text\": … } }",
        );
        return None;
    };
    let mut speaker = None;
    let mut content = None;
    for m in members {
        match m.key.as_str() {
            "user" | "name" => speaker = string(&m.value, &join(path, &m.key), d),
            "content" => content = Some(&m.value),
            // Extra keys on an example message are harmless; say so once per key.
            other => d.warn(
                &m.key_pos,
                &join(path, other),
                unknown_field_message(other, &["user", "name", "content"]),
            ),
        }
    }
    if speaker.is_none() && msg.get("user").is_none() && msg.get("name").is_none() {
        d.error(
            &msg.pos,
            path,
            "missing the speaker: \"user\" (v0) or \"name\" (1.x), e.g. \"{{user1}}\"",
        );
    }
    let Some(content) = content else {
        d.error(
            &msg.pos,
            &join(path, "content"),
            "missing; write \"content\": { \"text\": \"…\" }",
        );
        return None;
    };
    let cpath = join(path, "content");
    if content.members().is_none() {
        d.wrong_type(content, &cpath, "an object { \"text\": … }");
        return None;
    }
    let text = match content.get("text") {
        Some(t) => match &t.kind {
            Kind::String(s) => s.clone(),
            Kind::Null => String::new(),
            _ => {
                d.wrong_type(t, &join(&cpath, "text"), "a string");
                return None;
            }
        },
        None => String::new(),
    };
    let action = match (content.get("action"), content.get("actions")) {
        (Some(a), _) if a.as_str().is_some() => a.as_str().map(str::to_string),
        (
            _,
            Some(Node {
                kind: Kind::Array(items),
                ..
            }),
        ) => {
            let names: Vec<&str> = items.iter().filter_map(Node::as_str).collect();
            (!names.is_empty()).then(|| names.join(", "))
        }
        _ => None,
    };
    Some(ExampleMessage {
        speaker: speaker?,
        text,
        action,
    })
}

fn style(v: &Node, d: &mut Diags) -> Style {
    let mut s = Style::default();
    let Some(members) = v.members() else {
        d.wrong_type(
            v,
            "style",
            "an object { \"all\": [...], \"chat\": [...], \"post\": [...] }",
        );
        return s;
    };
    for m in members {
        let path = join("style", &m.key);
        if matches!(m.value.kind, Kind::Null) {
            continue;
        }
        match m.key.as_str() {
            "all" => s.all = string_list(&m.value, &path, d),
            "chat" => s.chat = string_list(&m.value, &path, d),
            "post" => s.post = string_list(&m.value, &path, d),
            other => d.warn(
                &m.key_pos,
                &path,
                unknown_field_message(other, &["all", "chat", "post"]),
            ),
        }
    }
    s
}

/// Knowledge entries. `{path}` and `{directory}` are looked up, in order: next to the file
/// that names them, in a `knowledge/` folder next to it (where elizaOS v0 keeps them), then
/// relative to the working directory (as elizaOS does). The first one found that `policy`
/// allows is taken; when every one found is refused, the first refusal is reported (an error
/// for `troupe check`, a warning that skips the entry when loading).
fn knowledge(v: &Node, cwd: &Path, policy: &Policy, d: &mut Diags) -> Vec<KnowledgeEntry> {
    let Kind::Array(items) = &v.kind else {
        d.wrong_type(
            v,
            "knowledge",
            "a list of strings, { \"path\": … } or { \"directory\": … }",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("knowledge[{i}]");
        match &item.kind {
            Kind::String(s) => out.push(KnowledgeEntry::Text(s.clone())),
            Kind::Object(members) => {
                let mut shared = false;
                let mut target: Option<(&str, &Node)> = None;
                for m in members {
                    let p = join(&path, &m.key);
                    match m.key.as_str() {
                        "path" | "directory" => {
                            if let Some((other, _)) = target {
                                d.error(
                                    &m.key_pos,
                                    &p,
                                    format!("an entry has either \"path\" or \"directory\", not both (\"{other}\" is already set)"),
                                );
                            } else {
                                target = Some((m.key.as_str(), &m.value));
                            }
                        }
                        "shared" => shared = boolean(&m.value, &p, d).unwrap_or(false),
                        other => d.warn(
                            &m.key_pos,
                            &p,
                            unknown_field_message(other, &["path", "directory", "shared"]),
                        ),
                    }
                }
                let Some((kind, node)) = target else {
                    d.error(
                        &item.pos,
                        &path,
                        "expected { \"path\": \"file\" } or { \"directory\": \"folder\" }",
                    );
                    continue;
                };
                let p = join(&path, kind);
                let Some(rel) = string(node, &p, d) else {
                    continue;
                };
                let want_dir = kind == "directory";
                let base = node.pos.file.parent().unwrap_or(Path::new("."));
                let candidates = [
                    base.join(&rel),
                    base.join("knowledge").join(&rel),
                    cwd.join(&rel),
                ];
                let what = if want_dir { "directory" } else { "file" };
                let mut refused = None;
                let mut found = None;
                for (n, c) in candidates.iter().enumerate() {
                    if !(if want_dir { c.is_dir() } else { c.is_file() }) {
                        continue;
                    }
                    match policy.check(&rel, c, n == candidates.len() - 1) {
                        Ok(resolved) => {
                            found = Some(resolved);
                            break;
                        }
                        Err(why) => {
                            refused.get_or_insert(why);
                        }
                    }
                }
                match (found, refused) {
                    (Some(f), _) if want_dir => {
                        out.push(KnowledgeEntry::Directory { path: f, shared })
                    }
                    (Some(f), _) => out.push(KnowledgeEntry::File { path: f, shared }),
                    (None, Some(why)) => {
                        let message = policy.message(what, &rel, &why);
                        if policy.strict {
                            d.error(&node.pos, &p, message);
                        } else {
                            d.warn(&node.pos, &p, message);
                        }
                    }
                    (None, None) => {
                        // Where it looked, without absolute paths: the console shows this
                        // to whoever checks a draft (issue 30, finding 3).
                        d.error(
                            &node.pos,
                            &p,
                            format!(
                                "{what} \"{rel}\" not found (looked next to the character \
                                 file, in its knowledge/ directory, and in the working directory)"
                            ),
                        );
                    }
                }
            }
            _ => d.wrong_type(
                item,
                &path,
                "a string, { \"path\": … } or { \"directory\": … }",
            ),
        }
    }
    out
}

fn clients(v: &Node, d: &mut Diags) -> Vec<String> {
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

fn plugins(v: &Node, d: &mut Diags) -> Vec<String> {
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

fn secrets(
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

fn settings(
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
    // `settings` is an open map in both elizaOS versions (plugins read their own keys from
    // it), so unknown keys are not warned about; only the keys troupe reads are typed.
    for m in members {
        let path = join("settings", &m.key);
        let val = &m.value;
        if matches!(val.kind, Kind::Null) {
            continue;
        }
        match m.key.as_str() {
            "secrets" => s.secrets = secrets(val, &path, positions, d),
            "model" => s.model = string(val, &path, d),
            "embeddingModel" => s.embedding_model = string(val, &path, d),
            "ragKnowledge" => s.rag_knowledge = boolean(val, &path, d).unwrap_or(false),
            "voice" => {
                if val.members().is_none() {
                    d.wrong_type(val, &path, "an object");
                }
            }
            "troupe" => s.troupe_platforms = troupe_settings(val, d),
            key @ ("discord" | "telegram" | "farcaster") if val.members().is_some() => {
                // 1.x keeps client switches here; `clientConfig` (v0) wins when both exist,
                // because `clientConfig` is read after `settings`.
                if let Some(platform) = client_platform(key) {
                    let sw = parse_switches(val, &path, d);
                    switches.insert(platform, sw);
                }
            }
            key => {
                if let Some(text) = scalar_text(val) {
                    s.values.insert(key.to_string(), text);
                }
            }
        }
    }
    s
}

fn troupe_settings(v: &Node, d: &mut Diags) -> Option<Vec<Platform>> {
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
            other => d.warn(
                &m.key_pos,
                &path,
                unknown_field_message(other, &["platforms"]),
            ),
        }
    }
    platforms
}

fn client_config(v: &Node, switches: &mut BTreeMap<Platform, ClientSwitches>, d: &mut Diags) {
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
                let sw = parse_switches(&m.value, &path, d);
                switches.insert(p, sw);
            }
            _ => check_client(&m.key, &m.key_pos, &path, d),
        }
    }
}

/// One platform's switches. troupe ignores other bots unless told otherwise: two bots that
/// answer each other loop forever, and elizaOS users rarely want that either.
fn parse_switches(v: &Node, path: &str, d: &mut Diags) -> ClientSwitches {
    let mut sw = ClientSwitches::default();
    let Some(members) = v.members() else {
        d.wrong_type(v, path, "an object of switches");
        return sw;
    };
    for m in members {
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

fn templates(v: &Node, d: &mut Diags) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(members) = v.members() else {
        d.wrong_type(
            v,
            "templates",
            "an object of \"nameTemplate\": \"text\" pairs",
        );
        return out;
    };
    for m in members {
        let path = join("templates", &m.key);
        let Some(text) = string(&m.value, &path, d) else {
            continue;
        };
        let key = m.key.as_str();
        if HANDLER_TEMPLATES.contains(&key) {
            check_placeholders(&m.value, &text, &path, d);
        } else if !ELIZA_TEMPLATES.contains(&key) {
            let known: Vec<&str> = HANDLER_TEMPLATES
                .iter()
                .chain(ELIZA_TEMPLATES)
                .copied()
                .collect();
            let hint = suggest(key, &known)
                .map(|s| format!(" (did you mean \"{s}\"?)"))
                .unwrap_or_default();
            d.warn(
                &m.key_pos,
                &path,
                format!(
                    "troupe does not use a template by this name{hint}; it is kept but ignored"
                ),
            );
        }
        out.insert(m.key.clone(), text);
    }
    out
}

/// Every `{{placeholder}}` in a template troupe fills must be one it knows; anything else
/// would reach the model as literal braces.
fn check_placeholders(node: &Node, text: &str, path: &str, d: &mut Diags) {
    for (byte_at, name) in prompt::placeholders(text) {
        if prompt::is_known_placeholder(name) {
            continue;
        }
        let at = text[..byte_at].chars().count();
        let hint = suggest(name, prompt::FILLED_PLACEHOLDERS)
            .map(|s| format!(" (did you mean {{{{{s}}}}}?)"))
            .unwrap_or_default();
        d.error(
            &node.pos_in_string(at),
            path,
            format!("{{{{{name}}}}} is not a placeholder troupe fills{hint}; see docs/personas.md for the list"),
        );
    }
}
