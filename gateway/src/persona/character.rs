//! The character model: one typed [`Character`] for both elizaOS formats, and the pass that
//! builds it from a positioned JSON tree, reporting every problem with its position.
//!
//! v0 ("legacy"), 1.x and 2.x files differ in a few places, and all are read the same way
//! (what only 2.x has is read by `eliza2`):
//! - example speakers: v0 `user`, 1.x `name`;
//! - secrets: v0 `settings.secrets`, 1.x top-level `secrets` (both are kept);
//! - connectors: v0 `clients`, 1.x `plugins` (`@elizaos/plugin-discord`…);
//! - client switches: v0 `clientConfig.discord`, 1.x `settings.discord`.
//!
//! Rules: unknown fields are kept (in `extra`) and warned about, never refused; a wrong type
//! is an error at the value; `null` counts as absent for every optional field.
//!
//! This file holds the top-level pass ([`from_node`]) and the fields that are only text:
//! examples, style, templates. `knowledge` (the one part that touches the file system, to
//! find knowledge files where `paths` allows) and `settings` (secrets, clients, plugins,
//! client switches) read theirs; `values` reads typed values for all three.

use std::collections::BTreeMap;
use std::path::Path;

use troupe_connectors::Platform;

use super::ClientSwitches;
use super::diag::{Diags, join, suggest, unknown_field_message};
use super::eliza2;
use super::json::{Kind, Member, Node, Pos};
use super::knowledge::KnowledgeEntry;
use super::paths::Policy;
use super::placeholder;
use super::settings::{self, Settings};
use super::values::{list_has_wrong_items, string, string_list};

/// A character file, both formats in one shape. Lists are empty when absent.
#[derive(Debug, Clone, Default)]
pub struct Character {
    pub id: Option<String>,
    pub name: String,
    pub username: Option<String>,
    pub system: Option<String>,
    /// `modelProvider` as written (v0). 1.x derives it from a provider plugin instead.
    pub model_provider: Option<String>,
    /// `imageVisionModelProvider` as written (elizaOS v0): the provider that describes
    /// images when it differs from `modelProvider` (issue 32). It names a provider the
    /// operator configured; its endpoint and key are never the file's
    /// (`provider::target::vision_target`).
    pub image_vision_model_provider: Option<String>,
    /// A string bio is kept as a one-item list: sampling three items of a one-item list gives
    /// back the whole string, which is what elizaOS does with a string bio.
    pub bio: Vec<String>,
    pub lore: Vec<String>,
    pub message_examples: Vec<Vec<ExampleMessage>>,
    pub post_examples: Vec<String>,
    pub topics: Vec<String>,
    pub adjectives: Vec<String>,
    pub style: Style,
    /// `knowledge` (v0, 1.x), or 2.x `documents` (of which `knowledge` is the alias).
    pub knowledge: Vec<KnowledgeEntry>,
    /// elizaOS 2.x `advancedPlanning`: accepted, not acted on (`eliza2`).
    pub advanced_planning: Option<bool>,
    /// elizaOS 2.x `advancedMemory`: accepted; troupe's memory is always on (`eliza2`).
    pub advanced_memory: Option<bool>,
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

/// Top-level fields troupe reads.
const USED_FIELDS: &[&str] = &[
    "id",
    "name",
    "username",
    "system",
    "modelProvider",
    "imageVisionModelProvider",
    "templates",
    "bio",
    "lore",
    "messageExamples",
    "postExamples",
    "topics",
    "adjectives",
    "knowledge",
    "documents",
    "advancedPlanning",
    "advancedMemory",
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
        c.positions.insert(m.key.clone(), m.value.pos.clone());
        if !matches!(m.value.kind, Kind::Null) {
            field(&mut c, m, d);
        }
    }
    // Required, so read after the loop: a missing one is reported too, and a `null` one is
    // a wrong type rather than absent.
    c.name = name(root, d);
    c.bio = bio(root, d);
    // `documents` (2.x) or its alias `knowledge`: one list, whichever order they come in.
    c.knowledge = eliza2::documents(root, cwd, policy, d);
    speaking_through_webhooks(&c, d);
    c
}

/// For a persona that speaks through Discord webhooks (issue 46): a name Discord refuses
/// for them, with the name used instead, and an avatar it cannot show, as warnings.
fn speaking_through_webhooks(c: &Character, d: &mut Diags) {
    if c.settings.discord_speak_as != super::SpeakAs::Webhook {
        return;
    }
    if let (Err(problem), Some(pos)) = (
        troupe_connectors::discord::webhook_name(&c.name),
        c.positions.get("name"),
    ) {
        d.warn(
            pos,
            "name",
            format!(
                "{}; on Discord this persona speaks as \"{}\" (settings.troupe.discord.speakAs)",
                problem.reason, problem.fallback
            ),
        );
    }
    if let (Some(avatar), Some(pos)) =
        (c.settings.values.get("avatar"), c.positions.get("settings"))
        && !troupe_connectors::discord::avatar_ok(avatar)
    {
        d.warn(
            pos,
            "settings.avatar",
            "Discord shows a webhook's avatar only from an http(s) URL of at most 2048 characters; \
             this persona's messages go without one",
        );
    }
}

/// One top-level member (not `null`) into its place in `c`. `name` and `bio` are read by
/// [`from_node`] itself; unknown fields are kept in `extra` with a warning.
fn field(c: &mut Character, m: &Member, d: &mut Diags) {
    let key = m.key.as_str();
    let v = &m.value;
    match key {
        "id" => c.id = string(v, key, d),
        "username" => c.username = string(v, key, d),
        "system" => c.system = string(v, key, d),
        "modelProvider" => c.model_provider = string(v, key, d),
        "imageVisionModelProvider" => c.image_vision_model_provider = string(v, key, d),
        "lore" => c.lore = eliza2::lore(v, d),
        "postExamples" => c.post_examples = string_list(v, key, d),
        "topics" => c.topics = string_list(v, key, d),
        "adjectives" => c.adjectives = string_list(v, key, d),
        "messageExamples" => c.message_examples = examples(v, d),
        "style" => c.style = style(v, d),
        "advancedPlanning" => c.advanced_planning = eliza2::flag(&m.key_pos, key, v, d),
        "advancedMemory" => c.advanced_memory = eliza2::flag(&m.key_pos, key, v, d),
        "clients" => c.clients = settings::clients(v, d),
        "plugins" => c.plugins = settings::plugins(v, d),
        "settings" => c.settings = settings::settings(v, &mut c.client_config, &mut c.positions, d),
        "secrets" => c.secrets = settings::secrets(v, key, &mut c.positions, d),
        "clientConfig" => settings::client_config(v, &mut c.client_config, d),
        "templates" => c.templates = templates(v, d),
        // `name`, `bio`, `knowledge` and `documents` are read after the loop; `extends` was
        // resolved by the loader before this pass, and only its type matters here.
        "name" | "bio" | "extends" | "knowledge" | "documents" => {}
        _ if IGNORED_FIELDS.contains(&key) => {}
        _ => {
            d.warn(&m.key_pos, key, unknown_top_level(key));
            c.extra.insert(key.to_string(), v.to_value());
        }
    }
}

/// The warning for a top-level field troupe does not know: the field it is a common name
/// for, else the nearest known one.
fn unknown_top_level(key: &str) -> String {
    match ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(key))
    {
        Some((_, field)) => {
            format!("unknown field (did you mean \"{field}\"?); it is kept but not used")
        }
        None => {
            let known: Vec<&str> = USED_FIELDS.iter().chain(IGNORED_FIELDS).copied().collect();
            unknown_field_message(key, &known)
        }
    }
}

/// The required `name`, trimmed; empty when it is missing or wrong (and reported).
fn name(root: &Node, d: &mut Diags) -> String {
    let Some(v) = root.get("name") else {
        d.error(
            &root.pos,
            "name",
            "missing; every character needs a \"name\", e.g. \"name\": \"Alice\"",
        );
        return String::new();
    };
    match &v.kind {
        Kind::String(s) if s.trim().is_empty() => d.error(
            &v.pos,
            "name",
            "is empty; write the character's name, e.g. \"name\": \"Alice\"",
        ),
        Kind::String(s) => return s.trim().to_string(),
        _ => d.wrong_type(v, "name", "a string"),
    }
    String::new()
}

/// The required `bio`: a string (kept as a one-item list) or a list of strings, blank
/// items dropped. An empty one is an error unless its items were already reported.
fn bio(root: &Node, d: &mut Diags) -> Vec<String> {
    let Some(v) = root.get("bio") else {
        d.error(
            &root.pos,
            "bio",
            "missing; every character needs a \"bio\": a string or a list of strings",
        );
        return Vec::new();
    };
    let mut bio = match &v.kind {
        Kind::String(s) => vec![s.clone()],
        Kind::Array(_) => string_list(v, "bio", d),
        _ => {
            d.wrong_type(v, "bio", "a string or a list of strings");
            Vec::new()
        }
    };
    bio.retain(|b| !b.trim().is_empty());
    let typed_ok = matches!(v.kind, Kind::String(_) | Kind::Array(_));
    if bio.is_empty() && typed_ok && !list_has_wrong_items(v) {
        d.error(
            &v.pos,
            "bio",
            "is empty; write at least one sentence about who the character is",
        );
    }
    bio
}

fn examples(v: &Node, d: &mut Diags) -> Vec<Vec<ExampleMessage>> {
    let Kind::Array(convs) = &v.kind else {
        d.wrong_type(
            v,
            "messageExamples",
            "a list of conversations (each a list of messages, or 2.x { \"examples\": [...] })",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, conv) in convs.iter().enumerate() {
        let mut path = format!("messageExamples[{i}]");
        let msgs: &[Node] = match &conv.kind {
            Kind::Array(msgs) => msgs,
            // elizaOS 2.x groups a conversation's messages: `{ "examples": [...] }`.
            Kind::Object(_) => match eliza2::example_group(conv, &path, d) {
                Some(msgs) => {
                    path.push_str(".examples");
                    msgs
                }
                None => continue,
            },
            _ => {
                d.error(
                    &conv.pos,
                    &path,
                    format!("expected a list of messages, found {}", conv.describe()),
                );
                continue;
            }
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
    let (text, action) = example_content(content, &join(path, "content"), d)?;
    Some(ExampleMessage {
        speaker: speaker?,
        text,
        action,
    })
}

/// An example message's `content` (at `path`): its text, empty when absent, and its action
/// (v0 `action`, or 1.x `actions` joined with ", ").
fn example_content(content: &Node, path: &str, d: &mut Diags) -> Option<(String, Option<String>)> {
    if content.members().is_none() {
        d.wrong_type(content, path, "an object { \"text\": … }");
        return None;
    }
    let text = match content.get("text") {
        Some(t) => match &t.kind {
            Kind::String(s) => s.clone(),
            Kind::Null => String::new(),
            _ => {
                d.wrong_type(t, &join(path, "text"), "a string");
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
    Some((text, action))
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
    for (byte_at, name) in placeholder::placeholders(text) {
        if placeholder::is_known_placeholder(name) {
            continue;
        }
        let at = text[..byte_at].chars().count();
        let hint = suggest(name, placeholder::FILLED_PLACEHOLDERS)
            .map(|s| format!(" (did you mean {{{{{s}}}}}?)"))
            .unwrap_or_default();
        d.error(
            &node.pos_in_string(at),
            path,
            format!("{{{{{name}}}}} is not a placeholder troupe fills{hint}; see docs/personas.md for the list"),
        );
    }
}
