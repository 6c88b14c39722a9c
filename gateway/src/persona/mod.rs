//! Personas: elizaOS character files (v0 and 1.x) loaded into one model, checked with
//! positions, and composed into prompts. (INTERFACE STUB — the persona helper fills it in.)
//!
//! The rest of the gateway uses only what is re-exported here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use troupe_connectors::Platform;

/// The process environment, snapshotted once by `config`; personas read secrets from it.
pub type Env = HashMap<String, String>;

/// A parsed character file.
#[derive(Debug, Clone)]
pub struct Persona {
    /// The character's `id` when it has one, else a slug of its name. Stable across edits.
    pub id: String,
    pub name: String,
    /// The file it came from.
    pub source: PathBuf,
    pub raw: serde_json::Value,
}

/// Per-platform switches from `clientConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientSwitches {
    pub respond_only_to_mentions: bool,
    pub ignore_bot_messages: bool,
    pub ignore_direct_messages: bool,
    /// When set, only these rooms (channel or group ids) are served.
    pub allowed_rooms: Option<Vec<String>>,
    /// `shouldOnlyJoinInAllowedGroups`.
    pub only_join_allowed: bool,
}

impl Persona {
    /// `modelProvider`, lower-cased (`openai`, `anthropic`, `ollama`…).
    pub fn model_provider(&self) -> Option<String> {
        self.raw
            .get("modelProvider")
            .and_then(|v| v.as_str())
            .map(str::to_ascii_lowercase)
    }
    /// `settings.model`.
    pub fn model_name(&self) -> Option<String> {
        self.raw
            .pointer("/settings/model")
            .and_then(|v| v.as_str())
            .map(str::to_string)
    }
    /// A secret for this persona: `CHARACTER.<NAME>.<KEY>` env, then `settings.secrets`
    /// (or 1.x top-level `secrets`), then the process environment.
    pub fn secret(&self, key: &str, env: &Env) -> Option<String> {
        let _ = (key, env);
        None
    }
    pub fn switches(&self, platform: Platform) -> ClientSwitches {
        let _ = platform;
        ClientSwitches {
            ignore_bot_messages: true,
            ..Default::default()
        }
    }
    /// The platforms this persona runs on (from `clients`, 1.x `plugins`, or troupe settings).
    pub fn platforms(&self) -> Vec<Platform> {
        Vec::new()
    }
}

/// One problem found in a character file, printed as `file:line:col: field.path: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
    pub path: String,
    pub message: String,
    pub severity: Severity,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Error => "",
            Severity::Warning => "warning: ",
        };
        write!(
            f,
            "{}:{}:{}: {}{}: {}",
            self.file.display(),
            self.line,
            self.col,
            sev,
            self.path,
            self.message
        )
    }
}

/// A persona and the warnings its file raised.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub persona: Persona,
    pub warnings: Vec<Diagnostic>,
}

pub fn load_file(path: &Path) -> Result<Loaded, Vec<Diagnostic>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![Diagnostic {
            file: path.into(),
            line: 1,
            col: 1,
            path: "(file)".into(),
            message: e.to_string(),
            severity: Severity::Error,
        }]
    })?;
    let raw: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        vec![Diagnostic {
            file: path.into(),
            line: e.line(),
            col: e.column(),
            path: "(json)".into(),
            message: e.to_string(),
            severity: Severity::Error,
        }]
    })?;
    let name = raw
        .get("name")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let id = raw
        .get("id")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| name.to_lowercase());
    Ok(Loaded {
        persona: Persona {
            id,
            name,
            source: path.into(),
            raw,
        },
        warnings: vec![],
    })
}

/// Every `*.json` character file directly in `dir`.
pub fn load_dir(dir: &Path) -> (Vec<Loaded>, Vec<Diagnostic>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut paths: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        paths.sort();
        for p in paths {
            match load_file(&p) {
                Ok(l) => ok.push(l),
                Err(d) => bad.extend(d),
            }
        }
    }
    (ok, bad)
}

/// One line of room history for the prompt.
#[derive(Debug, Clone)]
pub struct HistoryLine<'a> {
    pub author_name: &'a str,
    pub text: &'a str,
    pub from_agent: bool,
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
    pub knowledge: &'a [KnowledgeItem<'a>],
    /// Seeds the random sampling of bio, lore, examples, topics and adjective.
    pub seed: u64,
    /// The whole prompt's budget in characters; the oldest history goes first.
    pub budget_chars: usize,
}

/// A composed prompt: a system message and one user message, as elizaOS sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub system: String,
    pub user: String,
}

pub fn compose(persona: &Persona, input: &PromptInput<'_>) -> Prompt {
    let bio = persona
        .raw
        .get("bio")
        .map(|b| b.to_string())
        .unwrap_or_default();
    let mut user = format!("# About {}\n{}\n\n# Conversation\n", persona.name, bio);
    for h in input.history {
        user.push_str(&format!("{}: {}\n", h.author_name, h.text));
    }
    Prompt {
        system: persona
            .raw
            .get("system")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string(),
        user,
    }
}

/// A change in the personas directory (hot reload).
#[derive(Debug)]
pub enum PersonaEvent {
    Upsert(Loaded),
    Removed { source: PathBuf },
    Invalid(Vec<Diagnostic>),
}

pub fn watch(
    dir: PathBuf,
    env: Env,
    shutdown: tokio_util::sync::CancellationToken,
) -> tokio::sync::mpsc::Receiver<PersonaEvent> {
    let _ = (dir, env);
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        shutdown.cancelled().await;
        drop(tx);
    });
    rx
}

/// The result of `troupe check`.
pub struct CheckReport {
    pub diagnostics: Vec<Diagnostic>,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.diagnostics
            .iter()
            .all(|d| d.severity != Severity::Error)
    }
}

pub fn check_files(paths: &[PathBuf], env: &Env) -> CheckReport {
    let _ = env;
    let mut diagnostics = Vec::new();
    for p in paths {
        match load_file(p) {
            Ok(l) => diagnostics.extend(l.warnings),
            Err(d) => diagnostics.extend(d),
        }
    }
    CheckReport { diagnostics }
}
