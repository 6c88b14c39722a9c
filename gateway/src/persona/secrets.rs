//! Secrets per persona: where a persona's API keys and bot tokens come from.
//!
//! Precedence, first non-empty value wins (empty strings count as unset, because elizaOS
//! character files ship with `"OPENAI_API_KEY": ""` placeholders):
//! 1. the environment variable `CHARACTER.<NAME>.<KEY>` (or `CHARACTER__<NAME>__<KEY>` for
//!    shells that cannot export dots), where `<NAME>` is the character's name upper-cased
//!    with every non-alphanumeric character replaced by `_` (`LP Manager` → `LP_MANAGER`).
//!    elizaOS's own spelling (only spaces replaced) and the persona id are accepted too;
//! 2. the character's 1.x top-level `secrets`;
//! 3. the character's v0 `settings.secrets`;
//! 4. a scalar `settings.<KEY>` (elizaOS's `getSetting` reads those as well);
//! 5. the process environment `<KEY>`.
//!
//! The operator's per-character variable comes first so a deployment can override a file
//! without editing it. Nothing here reads the process environment itself: it is handed in
//! as an [`Env`] snapshot by `config`.

use troupe_connectors::Platform;

use super::{Env, Persona};

/// Where a secret was found, for messages (never the value itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `CHARACTER.<NAME>.<KEY>`: the variable's name.
    CharacterEnv(String),
    /// `secrets.<KEY>` in the character file (1.x).
    Secrets,
    /// `settings.secrets.<KEY>` in the character file (v0).
    SettingsSecrets,
    /// `settings.<KEY>` in the character file.
    Settings,
    /// The process environment.
    Env,
}

impl SecretSource {
    pub fn describe(&self, key: &str) -> String {
        match self {
            SecretSource::CharacterEnv(var) => format!("environment variable {var}"),
            SecretSource::Secrets => format!("secrets.{key}"),
            SecretSource::SettingsSecrets => format!("settings.secrets.{key}"),
            SecretSource::Settings => format!("settings.{key}"),
            SecretSource::Env => format!("environment variable {key}"),
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

/// The `<NAME>`s a `CHARACTER.<NAME>.<KEY>` variable may use for this persona.
pub(crate) fn env_prefixes(persona: &Persona) -> Vec<String> {
    let mut out = vec![env_name(&persona.name)];
    // elizaOS v0 upper-cases the id (or name) and replaces only spaces.
    let eliza = persona
        .character
        .id
        .as_deref()
        .unwrap_or(&persona.name)
        .to_uppercase()
        .replace(' ', "_");
    for p in [eliza, env_name(persona.id.as_str())] {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn non_empty(v: Option<&String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty()).cloned()
}

/// The secret and where it came from; see the module doc for the order.
pub fn lookup(persona: &Persona, key: &str, env: &Env) -> Option<(String, SecretSource)> {
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
    let c = &persona.character;
    if let Some(v) = non_empty(c.secrets.get(key)) {
        return Some((v, SecretSource::Secrets));
    }
    if let Some(v) = non_empty(c.settings.secrets.get(key)) {
        return Some((v, SecretSource::SettingsSecrets));
    }
    if let Some(v) = non_empty(c.settings.values.get(key)) {
        return Some((v, SecretSource::Settings));
    }
    non_empty(env.get(key)).map(|v| (v, SecretSource::Env))
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
