//! Personas: elizaOS character files (v0, 1.x and 2.x) loaded into one model, checked with
//! positions, composed into prompts, and watched for edits.
//!
//! Layout:
//! - `json`: a JSON parser that keeps the line and column of every value;
//! - `diag`: [`Diagnostic`] (`file:line:col: field.path: reason`) and its wording helpers;
//! - `character`: the typed [`Character`] and the pass that builds it, with the fields of
//!   its own (examples, style, templates); it reads the rest through
//!   - `values`: a string, a boolean, a list of strings, each wrong type reported;
//!   - `knowledge`: [`KnowledgeEntry`], `knowledge` entries and where their files are;
//!   - `eliza2`: what only elizaOS 2.x files have (`documents`, example groups, lore
//!     entries, `advancedPlanning`, `advancedMemory`);
//!   - `settings`: `settings`, `secrets`, `clients`, `plugins` and `clientConfig`;
//! - `load`: files, `extends`, [`load_file`] and [`load_dir`];
//! - `check`: [`check_files`] for `troupe check`, with the cross-file checks;
//! - `secrets`: per-persona secrets and their precedence;
//! - `prompt`: [`compose`], elizaOS's sampling and templates;
//! - `prepared`: what composing needs that depends only on the persona (parsed templates,
//!   the system prompt, directions), built when the persona is loaded;
//! - `quote`: how names and text from rooms are put into any prompt (reply, summary, facts)
//!   so that they cannot open a section;
//! - `paths`: where a character's `knowledge` files may live;
//! - `watch`: [`watch`], hot reload.
//!
//! This module reads files and the [`Env`] snapshot it is given; it never reads the process
//! environment, talks to a platform or calls a model. The rest of the gateway uses only what
//! is re-exported here. The format is documented for authors in `docs/personas.md`.

mod accounts;
mod character;
mod check;
mod diag;
mod eliza2;
mod json;
mod knowledge;
mod load;
mod paths;
mod prepared;
mod prompt;
pub(crate) mod quote;
#[cfg(test)]
mod reference;
mod secrets;
mod settings;
#[cfg(test)]
pub(crate) mod test_support;
mod values;
mod watch;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;

use troupe_connectors::{AgentId, Platform};

pub use accounts::refuse_shared_bots;
pub use character::Character;
pub use check::{CheckReport, check_files};
pub use diag::{Diagnostic, Severity};
pub use knowledge::KnowledgeEntry;
pub use load::load_dir;
// The console lists and checks the personas directory as `troupe check` does.
pub(crate) use load::persona_files;
#[cfg(test)]
pub use load::{load_file, load_file_with};
pub use paths::LoadOptions;
pub use prompt::compose;
pub(crate) use prompt::{render as render_template, system_prompt};
pub use secrets::{SecretSource, Withheld, credential_key, is_stored_name, stored_name, token_key};
pub use settings::SpeakAs;
pub use watch::{PersonaEvent, watch};

/// The process environment, snapshotted once by `config`; personas read secrets from it.
pub type Env = HashMap<String, String>;

/// A loaded character file.
#[derive(Debug, Clone)]
pub struct Persona {
    /// The character's `id` when it has one, else a slug of its name (`LP Manager` →
    /// `lp-manager`). Stable across edits that keep the name.
    pub id: AgentId,
    pub name: String,
    /// The file it came from.
    pub source: PathBuf,
    /// The merged JSON (after `extends`), as written: unknown fields included.
    pub raw: serde_json::Value,
    /// The same, typed.
    pub character: Character,
    /// The parent files it `extends` (canonical paths), directly or not.
    pub depends_on: Vec<PathBuf>,
    /// What its prompts need that no message changes, built with it (`prepared`): a
    /// persona is built again whenever its file changes, so this is never stale.
    pub(crate) prepared: std::sync::Arc<prepared::Prepared>,
}

/// Per-platform switches from `clientConfig.<platform>` (v0) or `settings.<platform>` (1.x).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSwitches {
    /// `shouldRespondOnlyToMentions`: in groups, answer only when mentioned (DMs, replies to
    /// the bot and its name still count as mentions).
    pub respond_only_to_mentions: bool,
    /// `shouldIgnoreBotMessages`: troupe's default is true, unlike elizaOS, because two bots
    /// answering each other loop forever. Set it to false to talk to other bots.
    pub ignore_bot_messages: bool,
    /// `shouldIgnoreDirectMessages`.
    pub ignore_direct_messages: bool,
    /// `allowedChannelIds` (Discord) / `allowedGroupIds` (Telegram): when set, only these
    /// rooms (channel or group ids) are served.
    pub allowed_rooms: Option<Vec<String>>,
    /// `shouldOnlyJoinInAllowedGroups` (Telegram): leave groups not in `allowed_rooms`.
    pub only_join_allowed_groups: bool,
}

impl Default for ClientSwitches {
    fn default() -> Self {
        ClientSwitches {
            respond_only_to_mentions: false,
            ignore_bot_messages: true,
            ignore_direct_messages: false,
            allowed_rooms: None,
            only_join_allowed_groups: false,
        }
    }
}

impl Persona {
    /// `modelProvider`, lower-cased (`openai`, `anthropic`, `ollama`…); for 1.x files, the
    /// first provider plugin (`@elizaos/plugin-anthropic` → `anthropic`).
    pub fn model_provider(&self) -> Option<String> {
        let c = &self.character;
        c.model_provider
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_ascii_lowercase)
            .or_else(|| {
                c.plugins
                    .iter()
                    .find_map(|p| settings::plugin_provider(p))
                    .map(str::to_string)
            })
    }

    /// `imageVisionModelProvider`, lower-cased: the provider a vision model is called on
    /// when it is not the persona's own (`provider::target::vision_target`).
    pub fn image_vision_model_provider(&self) -> Option<String> {
        self.character
            .image_vision_model_provider
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_ascii_lowercase)
    }

    /// `settings.model`.
    pub fn model_name(&self) -> Option<String> {
        self.character
            .settings
            .model
            .clone()
            .filter(|s| !s.trim().is_empty())
    }

    /// A secret for this persona: `CHARACTER.<ID>.<KEY>` env, then 1.x `secrets`, then
    /// `settings.secrets`, then `settings.<KEY>`, then the process environment. Empty values
    /// count as unset (see docs/personas.md, "Secrets"). A credential from the environment
    /// is `None` when the file names its own endpoint for it ([`Persona::withheld`]).
    pub fn secret(&self, key: &str, env: &Env) -> Option<String> {
        secrets::lookup(self, key, env).map(|(v, _)| v)
    }

    /// [`Persona::secret`] with where it was found (for the console; never shown whole).
    pub fn secret_with_source(&self, key: &str, env: &Env) -> Option<(String, SecretSource)> {
        secrets::lookup(self, key, env)
    }

    /// The credentials held back because the file names its own endpoint for them
    /// (`OPENAI_BASE_URL` in the file, `OPENAI_API_KEY` from the environment), for the
    /// endpoint named by `endpoint_key` (`OPENAI_BASE_URL`, `TELEGRAM_API_ROOT`…), or for
    /// every endpoint when `None`.
    pub fn withheld(&self, endpoint_key: Option<&str>, env: &Env) -> Vec<Withheld> {
        secrets::PAIRINGS
            .iter()
            .filter(|p| endpoint_key.is_none_or(|k| p.endpoints.contains(&k)))
            .flat_map(|p| secrets::withheld(self, p, env))
            .collect()
    }

    /// [`Persona::withheld`] for the endpoint a platform's connector talks to.
    pub fn withheld_on(&self, platform: Platform, env: &Env) -> Vec<Withheld> {
        secrets::PAIRINGS
            .iter()
            .filter(|p| p.platform == Some(platform))
            .flat_map(|p| secrets::withheld(self, p, env))
            .collect()
    }

    /// Whether the persona speaks on Discord through channel webhooks, sharing its bot
    /// with the other personas that do (`settings.troupe.discord.speakAs: "webhook"`).
    pub fn speaks_through_webhooks(&self) -> bool {
        self.shares_bot_on(Platform::Discord)
    }

    /// The persona's avatar: `settings.avatar` (where elizaOS's own client keeps it), when
    /// it is a URL Discord takes for a webhook message.
    pub fn avatar(&self) -> Option<&str> {
        self.character
            .settings
            .values
            .get("avatar")
            .map(String::as_str)
            .filter(|a| troupe_connectors::discord::avatar_ok(a))
    }

    /// Whether the persona speaks on `platform` in a way that lets it share a bot with the
    /// other personas that do (issue 46): on Discord through webhooks, on Telegram with its
    /// name in front (`settings.troupe.telegram.speakAs: "prefix"`).
    pub fn shares_bot_on(&self, platform: Platform) -> bool {
        let settings = &self.character.settings;
        match platform {
            Platform::Discord => settings.discord_speak_as == SpeakAs::Webhook,
            Platform::Telegram => settings.telegram_speak_as == SpeakAs::Prefix,
            _ => false,
        }
    }

    /// Whether `troupe run` puts the persona on a bot it shares with others on `platform`:
    /// it says so, and logs in with its one token (a persona with Telegram accounts logs in
    /// with those, each its own).
    pub fn joins_shared_bot(&self, platform: Platform, env: &Env) -> bool {
        self.shares_bot_on(platform)
            && (platform != Platform::Telegram || self.telegram_accounts(env).is_none())
    }

    /// Whether `self` and `other` may log in to `platform` with one token: when both say
    /// they share their bot there (docs/discord.md and docs/telegram.md "A troupe on one
    /// bot").
    pub fn may_share_bot_with(&self, other: &Persona, platform: Platform) -> bool {
        self.shares_bot_on(platform) && other.shares_bot_on(platform)
    }

    /// The platform's bot token for this persona (`DISCORD_API_TOKEN`, `TELEGRAM_BOT_TOKEN`,
    /// `FARCASTER_NEYNAR_SIGNER_UUID`), resolved like [`Persona::secret`].
    pub fn platform_token(&self, platform: Platform, env: &Env) -> Option<String> {
        self.secret(token_key(platform)?, env)
    }

    /// [`Persona::platforms`], plus each platform whose token the console stored in the
    /// secrets file (issue 47): connecting one from the console needs no edit of the file.
    /// An explicit `settings.troupe.platforms` stays the whole answer.
    pub fn platforms_in(&self, env: &Env) -> Vec<Platform> {
        let mut out = self.platforms();
        if self.character.settings.troupe_platforms.is_some() {
            return out;
        }
        for platform in [Platform::Discord, Platform::Telegram, Platform::Farcaster] {
            let stored = secrets::credential_key(platform)
                .and_then(|key| secrets::lookup(self, key, env))
                .is_some_and(|(_, source)| source == SecretSource::SecretsFile);
            if stored && !out.contains(&platform) {
                out.push(platform);
            }
        }
        out.sort();
        out
    }

    /// The switches for a platform, troupe's defaults where the file says nothing.
    pub fn switches(&self, platform: Platform) -> ClientSwitches {
        self.character
            .client_config
            .get(&platform)
            .cloned()
            .unwrap_or_default()
    }

    /// The platforms this persona runs on:
    /// - `settings.troupe.platforms`, when present, is the whole answer;
    /// - otherwise the platforms named by v0 `clients` (`discord`, `telegram`, `farcaster`;
    ///   `direct` is the HTTP API) and by 1.x connector plugins (`@elizaos/plugin-discord`…),
    ///   plus [`Platform::Web`] always, since every persona answers on the HTTP API.
    ///
    /// A platform is only served when its connector is configured (its token is set).
    pub fn platforms(&self) -> Vec<Platform> {
        let c = &self.character;
        if let Some(list) = &c.settings.troupe_platforms {
            return list.clone();
        }
        let from_clients = c
            .clients
            .iter()
            .filter_map(|n| settings::client_platform(n));
        let from_plugins = c
            .plugins
            .iter()
            .filter_map(|p| settings::plugin_client(p))
            .filter_map(settings::client_platform);
        // elizaOS 2.x's `settings.telegram.accounts` are Telegram bots of the persona.
        let from_accounts =
            (!c.settings.telegram.accounts.is_empty()).then_some(Platform::Telegram);
        let mut out: Vec<Platform> = Vec::new();
        for p in from_clients
            .chain(from_plugins)
            .chain(from_accounts)
            .chain([Platform::Web])
        {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out.sort();
        out
    }

    /// Knowledge entries from the file: inline strings, and files and directories resolved
    /// to where they were found.
    pub fn knowledge(&self) -> &[KnowledgeEntry] {
        &self.character.knowledge
    }
}

/// A persona and the warnings its file raised.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub persona: Persona,
    pub warnings: Vec<Diagnostic>,
}

/// One line of room history for the prompt.
#[derive(Debug, Clone)]
pub struct HistoryLine<'a> {
    pub author_name: &'a str,
    pub text: &'a str,
}

/// A retrieved knowledge chunk for the prompt.
#[derive(Debug, Clone)]
pub struct KnowledgeItem<'a> {
    pub source: &'a str,
    pub text: &'a str,
}

/// What the prompt is composed from, besides the persona.
#[derive(Debug, Clone)]
pub struct PromptInput<'a> {
    pub platform: Platform,
    pub sender_name: &'a str,
    /// The room's recent messages, oldest first, ending with the message being answered.
    pub history: &'a [HistoryLine<'a>],
    /// Retrieved knowledge, most relevant first.
    pub knowledge: &'a [KnowledgeItem<'a>],
    /// Seeds the random sampling of bio, lore, examples, topics and adjective.
    pub seed: u64,
    /// The whole prompt's budget in characters; the oldest history goes first.
    pub budget_chars: usize,
    /// The room's rolling summary of the conversation before `history`, when there is one.
    pub summary: Option<&'a str>,
    /// Facts known about the sender, newest first.
    pub facts: &'a [&'a str],
}

/// A composed prompt: a system message and one user message, as elizaOS sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub system: String,
    pub user: String,
    /// Images the message carries, sent as image parts next to `user` (issue 32,
    /// `crate::media`); empty for a text message, which then costs nothing more.
    pub images: Vec<PromptImage>,
}

/// One image of a prompt: its sniffed type and its bytes in base64, shared (the why panel
/// keeps a copy of the prompt; the bytes are not copied with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptImage {
    pub mime: &'static str,
    pub base64: std::sync::Arc<str>,
}
