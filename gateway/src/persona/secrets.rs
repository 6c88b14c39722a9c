//! Secrets per persona: where a persona's API keys and bot tokens come from, and which
//! endpoint each may be sent to.
//!
//! Precedence, first non-empty value wins (empty strings count as unset, because elizaOS
//! character files ship with `"OPENAI_API_KEY": ""` placeholders):
//! 1. the environment variable `CHARACTER.<ID>.<KEY>` (or `CHARACTER__<ID>__<KEY>` for
//!    shells that cannot export dots), where `<ID>` is the persona's id upper-cased with
//!    every non-alphanumeric character replaced by `_` (`lp-manager` → `LP_MANAGER`; a file
//!    without an `id` gets its id from its name, so `LP Manager` lands on the same variable).
//!    elizaOS's spelling of an `id` (only spaces replaced) is accepted too. The display name
//!    is never used: anyone who may save a file may pick any name (issue 30, finding 1);
//! 2. the secrets file (`TROUPE_SECRETS_FILE`, `crate::secrets_file`): what the operator
//!    stored from the console for this persona, unless the environment has `<KEY>` itself:
//!    the environment always wins over the secrets file (issue 47);
//! 3. the character's 1.x top-level `secrets`;
//! 4. the character's v0 `settings.secrets`;
//! 5. a scalar `settings.<KEY>` (elizaOS's `getSetting` reads those as well);
//! 6. the process environment `<KEY>`; where it has none, troupe.toml's key for it, which
//!    `config` puts in the snapshot (`config::table::fill_env`): the operator's either way.
//!
//! **Secrets and endpoints travel together** (docs/security.md, "Character files"; issue 30,
//! finding 1). Every
//! credential is sent to one endpoint ([`PAIRINGS`]: the model providers, the Bot API, the
//! Discord API, Neynar). Values from 1, 2 and 6 were chosen by the operator; values from 3–5 by
//! whoever wrote the file, which includes anyone who may call `PUT /api/characters/…`. When
//! the file names the endpoint itself (and it is neither the operator's endpoint nor the
//! vendor's default), a credential the operator chose is withheld: [`lookup`] answers
//! `None` for it and [`withheld`] says so, naming both keys, so `troupe check`, the console
//! and the provider report it instead of falling back. A file's own credential may go to
//! the operator's endpoint: that discloses nothing of the operator's.
//!
//! The operator's per-character variable comes first so a deployment can override a file
//! without editing it. Nothing here reads the process environment itself: it is handed in
//! as an [`Env`] snapshot by `config`.

use troupe_connectors::Platform;

use super::{Env, Persona};

/// Where a secret was found, for messages (never the value itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `CHARACTER.<ID>.<KEY>`: the variable's name.
    CharacterEnv(String),
    /// `secrets.<KEY>` in the character file (1.x).
    Secrets,
    /// `settings.secrets.<KEY>` in the character file (v0).
    SettingsSecrets,
    /// `settings.<KEY>` in the character file.
    Settings,
    /// The process environment.
    Env,
    /// The secrets file the console writes (`TROUPE_SECRETS_FILE`).
    SecretsFile,
}

/// Who chose a value: the operator (through the environment) or whoever wrote the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Operator,
    File,
}

impl SecretSource {
    pub fn describe(&self, key: &str) -> String {
        match self {
            SecretSource::CharacterEnv(var) => format!("environment variable {var}"),
            SecretSource::Secrets => format!("secrets.{key}"),
            SecretSource::SettingsSecrets => format!("settings.secrets.{key}"),
            SecretSource::Settings => format!("settings.{key}"),
            SecretSource::Env => format!("environment variable {key}"),
            SecretSource::SecretsFile => format!("{key} in the secrets file (TROUPE_SECRETS_FILE)"),
        }
    }

    /// Who chose the value.
    pub fn origin(&self) -> Origin {
        match self {
            SecretSource::CharacterEnv(_) | SecretSource::Env | SecretSource::SecretsFile => {
                Origin::Operator
            }
            SecretSource::Secrets | SecretSource::SettingsSecrets | SecretSource::Settings => {
                Origin::File
            }
        }
    }

    /// The field path in the character file, when the secret came from the file.
    pub fn field(&self, key: &str) -> Option<String> {
        match self {
            SecretSource::Secrets => Some(format!("secrets.{key}")),
            SecretSource::SettingsSecrets => Some(format!("settings.secrets.{key}")),
            SecretSource::Settings => Some(format!("settings.{key}")),
            _ => None,
        }
    }
}

/// `LP Manager` → `LP_MANAGER`.
pub fn env_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The `<ID>`s a `CHARACTER.<ID>.<KEY>` variable may use for this persona: its id, and
/// elizaOS's spelling of the file's `id` when it has one. Never its name: the id is unique
/// among the files on disk (a second file with the same id is refused), a name is not.
pub(crate) fn env_prefixes(persona: &Persona) -> Vec<String> {
    let mut out = vec![env_name(persona.id.as_str())];
    // elizaOS v0 upper-cases the id and replaces only spaces.
    if let Some(id) = persona.character.id.as_deref() {
        let eliza = id.trim().to_uppercase().replace(' ', "_");
        if !eliza.is_empty() && !out.contains(&eliza) {
            out.push(eliza);
        }
    }
    out
}

fn non_empty(v: Option<&String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty()).cloned()
}

/// The value in the precedence order of the module doc, before the pairing rule.
fn first_set(persona: &Persona, key: &str, env: &Env) -> Option<(String, SecretSource)> {
    operator_override(persona, key, env)
        .or_else(|| stored(persona, key, env))
        .or_else(|| from_file(persona, key))
        .or_else(|| non_empty(env.get(key)).map(|v| (v, SecretSource::Env)))
}

/// `CHARACTER.<ID>.<KEY>`.
fn operator_override(persona: &Persona, key: &str, env: &Env) -> Option<(String, SecretSource)> {
    for prefix in env_prefixes(persona) {
        for var in [
            format!("CHARACTER.{prefix}.{key}"),
            format!("CHARACTER__{prefix}__{key}"),
        ] {
            if let Some(v) = non_empty(env.get(&var)) {
                return Some((v, SecretSource::CharacterEnv(var)));
            }
        }
    }
    None
}

/// The name a secrets-file value has in the [`Env`] snapshot: `=` cannot be part of an
/// environment variable's name, so no variable can pose as one.
pub fn stored_name(persona: &str, key: &str) -> String {
    format!("=secrets-file={persona}={key}")
}

/// Whether an [`Env`] name is a secrets-file value's ([`stored_name`]).
pub fn is_stored_name(name: &str) -> bool {
    name.starts_with("=secrets-file=")
}

/// The secrets file's value, unless the environment sets `<KEY>` itself (it wins).
fn stored(persona: &Persona, key: &str, env: &Env) -> Option<(String, SecretSource)> {
    if non_empty(env.get(key)).is_some() {
        return None;
    }
    non_empty(env.get(&stored_name(persona.id.as_str(), key)))
        .map(|v| (v, SecretSource::SecretsFile))
}

/// The file's own value: `secrets`, `settings.secrets`, then `settings`.
fn from_file(persona: &Persona, key: &str) -> Option<(String, SecretSource)> {
    let c = &persona.character;
    if let Some(v) = non_empty(c.secrets.get(key)) {
        return Some((v, SecretSource::Secrets));
    }
    if let Some(v) = non_empty(c.settings.secrets.get(key)) {
        return Some((v, SecretSource::SettingsSecrets));
    }
    non_empty(c.settings.values.get(key)).map(|v| (v, SecretSource::Settings))
}

/// Settings elizaOS 2.x renamed, as (the name troupe reads, 2.x's name): a value under the
/// new name counts when the old one is set nowhere (issue 46).
pub const RENAMED: &[(&str, &str)] = &[("FARCASTER_NEYNAR_SIGNER_UUID", "FARCASTER_SIGNER_UUID")];

/// The secret and where it came from; see the module doc for the order. A credential the
/// operator chose is `None` when the file names its own endpoint for it ([`withheld`]).
/// A setting elizaOS 2.x renamed ([`RENAMED`]) is also found under its new name.
pub fn lookup(persona: &Persona, key: &str, env: &Env) -> Option<(String, SecretSource)> {
    lookup_one(persona, key, env).or_else(|| {
        let (_, new) = RENAMED.iter().find(|(old, _)| *old == key)?;
        lookup_one(persona, new, env)
    })
}

fn lookup_one(persona: &Persona, key: &str, env: &Env) -> Option<(String, SecretSource)> {
    let found = first_set(persona, key, env)?;
    match PAIRINGS.iter().find(|p| p.credentials.contains(&key)) {
        Some(pairing) if withheld_from(persona, pairing, key, &found.1, env).is_some() => None,
        _ => Some(found),
    }
}

/// One endpoint and the credentials sent to it.
#[derive(Debug)]
pub struct Pairing {
    /// What the endpoint is, for messages (`the OpenAI-compatible API`).
    pub what: &'static str,
    /// The keys naming the endpoint, the first set one wins (`ANTHROPIC_BASE_URL`, then
    /// elizaOS's `ANTHROPIC_API_URL`).
    pub endpoints: &'static [&'static str],
    /// The vendor's own endpoint, used when no key names one. A file may name it again.
    pub default: &'static str,
    /// The keys whose values are sent there.
    pub credentials: &'static [&'static str],
    /// The platform whose connector talks to it, if one does.
    pub platform: Option<Platform>,
}

/// Every endpoint a persona's file may name, with the credentials that go to it. Ollama has
/// no credential, and the embedding API is configured by the operator only
/// (`TROUPE_EMBEDDING_URL` and `TROUPE_EMBEDDING_API_KEY`, never read from a persona).
pub const PAIRINGS: &[Pairing] = &[
    Pairing {
        what: "the OpenAI-compatible API",
        endpoints: &["OPENAI_BASE_URL"],
        default: "https://api.openai.com/v1",
        credentials: &["OPENAI_API_KEY"],
        platform: None,
    },
    Pairing {
        what: "the Anthropic API",
        endpoints: &["ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL"],
        default: "https://api.anthropic.com/v1",
        credentials: &["ANTHROPIC_API_KEY"],
        platform: None,
    },
    Pairing {
        what: "the Telegram Bot API",
        endpoints: &["TELEGRAM_API_ROOT"],
        default: "https://api.telegram.org",
        // The webhook secret is handed to the Bot API by `setWebhook`.
        credentials: &["TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET"],
        platform: Some(Platform::Telegram),
    },
    Pairing {
        what: "the Discord API",
        endpoints: &["DISCORD_API_URL"],
        default: "https://discord.com",
        credentials: &["DISCORD_API_TOKEN"],
        platform: Some(Platform::Discord),
    },
    Pairing {
        what: "the Neynar API",
        endpoints: &["NEYNAR_API_URL"],
        default: "https://api.neynar.com",
        credentials: &[
            "FARCASTER_NEYNAR_API_KEY",
            "FARCASTER_NEYNAR_SIGNER_UUID",
            "FARCASTER_SIGNER_UUID",
        ],
        platform: Some(Platform::Farcaster),
    },
];

/// A credential held back from a persona: its file names its own endpoint, and the
/// credential was chosen by the operator. Names keys and sources, never values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    pub what: &'static str,
    /// The endpoint key the file set, and where.
    pub endpoint: &'static str,
    pub endpoint_source: SecretSource,
    /// The credential key, and where the operator set it.
    pub credential: &'static str,
    pub credential_source: SecretSource,
}

impl Withheld {
    /// The sentence for `troupe check`, the console and the provider's error.
    pub fn message(&self) -> String {
        format!(
            "{} names its own endpoint for {}, but {} comes from the operator ({}); a              credential from the environment is only sent to the environment's endpoint:              put this persona's own {} in the file next to {}, or remove {} from the file",
            self.endpoint_source.describe(self.endpoint),
            self.what,
            self.credential,
            self.credential_source.describe(self.credential),
            self.credential,
            self.endpoint,
            self.endpoint,
        )
    }

    /// Where the error belongs in the file: the endpoint's field.
    pub fn field(&self) -> String {
        self.endpoint_source
            .field(self.endpoint)
            .unwrap_or_else(|| "settings".to_string())
    }
}

/// `https://x/v1/` and `https://x/v1` are the same endpoint.
fn same_endpoint(a: &str, b: &str) -> bool {
    a.trim().trim_end_matches('/') == b.trim().trim_end_matches('/')
}

/// Whether `credential` (found at `source`) is held back from `persona` under `pairing`.
fn withheld_from(
    persona: &Persona,
    pairing: &'static Pairing,
    credential: &str,
    source: &SecretSource,
    env: &Env,
) -> Option<Withheld> {
    if source.origin() == Origin::File {
        return None;
    }
    let (endpoint, (url, endpoint_source)) = pairing
        .endpoints
        .iter()
        .find_map(|k| first_set(persona, k, env).map(|found| (*k, found)))?;
    if endpoint_source.origin() == Origin::Operator {
        return None;
    }
    // Naming the operator's own endpoint (or the vendor's) again sends nothing elsewhere.
    let operators = pairing
        .endpoints
        .iter()
        .find_map(|k| {
            operator_override(persona, k, env)
                .or_else(|| non_empty(env.get(*k)).map(|v| (v, SecretSource::Env)))
        })
        .map(|(v, _)| v)
        .unwrap_or_else(|| pairing.default.to_string());
    if same_endpoint(&url, &operators) || same_endpoint(&url, pairing.default) {
        return None;
    }
    Some(Withheld {
        what: pairing.what,
        endpoint,
        endpoint_source,
        credential: pairing.credentials.iter().find(|c| **c == credential)?,
        credential_source: source.clone(),
    })
}

/// Every credential held back from `persona` under `pairing` (see the module doc).
pub fn withheld(persona: &Persona, pairing: &'static Pairing, env: &Env) -> Vec<Withheld> {
    pairing
        .credentials
        .iter()
        .filter_map(|key| {
            let (_, source) = first_set(persona, key, env)?;
            withheld_from(persona, pairing, key, &source, env)
        })
        .collect()
}

/// The secret that identifies the bot account on a platform (one account, one persona).
pub fn token_key(platform: Platform) -> Option<&'static str> {
    match platform {
        Platform::Discord => Some("DISCORD_API_TOKEN"),
        Platform::Telegram => Some("TELEGRAM_BOT_TOKEN"),
        // A Farcaster account acts through its Neynar signer.
        Platform::Farcaster => Some("FARCASTER_NEYNAR_SIGNER_UUID"),
        Platform::Web => None,
    }
}

/// The credential the console connects a platform with (issue 47): the bot token, or for
/// Farcaster the Neynar API key (the signer comes with it, and may be absent in dry runs).
pub fn credential_key(platform: Platform) -> Option<&'static str> {
    match platform {
        Platform::Farcaster => Some("FARCASTER_NEYNAR_API_KEY"),
        other => token_key(other),
    }
}
