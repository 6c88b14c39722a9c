//! Target resolution: which vendor, base URL, key and model a persona's calls go to, from
//! its `modelProvider`, its `settings.model` and its secrets. Nothing here calls a model.

use genai::adapter::AdapterKind;

use crate::persona::{Env, Persona};

/// Which vendor protocol a persona's model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    OpenAi,
    Anthropic,
    Ollama,
}

impl Vendor {
    fn parse(name: &str) -> Option<Vendor> {
        match name.to_ascii_lowercase().as_str() {
            // elizaOS names several OpenAI-compatible services; they all speak the protocol.
            "openai" | "openrouter" | "groq" | "together" | "deepseek" | "llama_local"
            | "local" | "llamacloud" | "redpill" | "venice" | "nanogpt" => Some(Vendor::OpenAi),
            "anthropic" | "claude" => Some(Vendor::Anthropic),
            "ollama" => Some(Vendor::Ollama),
            _ => None,
        }
    }

    pub(super) fn adapter(self) -> AdapterKind {
        match self {
            Vendor::OpenAi => AdapterKind::OpenAI,
            Vendor::Anthropic => AdapterKind::Anthropic,
            Vendor::Ollama => AdapterKind::Ollama,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Vendor::OpenAi => "openai",
            Vendor::Anthropic => "anthropic",
            Vendor::Ollama => "ollama",
        }
    }
}

/// Where and how to call a model, resolved for one persona.
#[derive(Clone)]
pub struct Target {
    pub vendor: Vendor,
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("vendor", &self.vendor)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &self.model)
            .finish()
    }
}

/// Resolves the persona's model target from its `modelProvider`, `settings.model` and its
/// secrets (which fall back to the process environment). The error is the sentence an
/// operator needs: which variable to set.
pub fn resolve_target(persona: &Persona, env: &Env) -> Result<Target, String> {
    let secret = |key: &str| persona.secret(key, env).filter(|v| !v.trim().is_empty());
    let first = |keys: &[&str]| keys.iter().find_map(|k| secret(k));

    let vendor = match persona.model_provider() {
        Some(name) => Vendor::parse(&name).ok_or_else(|| {
            format!(
                "persona `{}` asks for modelProvider `{name}`, which troupe does not support; \
                 use openai (or any OpenAI-compatible server via OPENAI_BASE_URL), anthropic or ollama",
                persona.name
            )
        })?,
        // No preference: take the first vendor that has credentials.
        None if secret("OPENAI_API_KEY").is_some() || secret("OPENAI_BASE_URL").is_some() => {
            Vendor::OpenAi
        }
        None if secret("ANTHROPIC_API_KEY").is_some() => Vendor::Anthropic,
        None if secret("OLLAMA_SERVER_URL").is_some() => Vendor::Ollama,
        None => Vendor::OpenAi,
    };
    // A file that names its own endpoint must name its own key (issue 30, finding 1):
    // refuse rather than call it without the operator's key, so the reason is visible.
    let endpoint_key = match vendor {
        Vendor::OpenAi => Some("OPENAI_BASE_URL"),
        Vendor::Anthropic => Some("ANTHROPIC_BASE_URL"),
        Vendor::Ollama => None,
    };
    if let Some(w) = endpoint_key.and_then(|k| persona.withheld(Some(k), env).into_iter().next()) {
        return Err(format!("persona `{}`: {}", persona.name, w.message()));
    }
    let model = persona.model_name();
    let target = match vendor {
        Vendor::OpenAi => {
            let api_key = secret("OPENAI_API_KEY");
            let base_url = secret("OPENAI_BASE_URL");
            if api_key.is_none() && base_url.is_none() {
                return Err(format!(
                    "no model provider is configured for persona `{}`: set OPENAI_API_KEY \
                     (or OPENAI_BASE_URL for a local OpenAI-compatible server, or \
                     ANTHROPIC_API_KEY / OLLAMA_SERVER_URL with a matching modelProvider)",
                    persona.name
                ));
            }
            Target {
                vendor,
                base_url: base_url.unwrap_or_else(|| "https://api.openai.com/v1".into()),
                api_key,
                model: model
                    .or_else(|| {
                        first(&["OPENAI_LARGE_MODEL", "LARGE_OPENAI_MODEL", "OPENAI_MODEL"])
                    })
                    .unwrap_or_else(|| "gpt-4o-mini".into()),
            }
        }
        Vendor::Anthropic => {
            let api_key = secret("ANTHROPIC_API_KEY").ok_or_else(|| {
                format!(
                    "persona `{}` uses modelProvider anthropic: set ANTHROPIC_API_KEY",
                    persona.name
                )
            })?;
            Target {
                vendor,
                base_url: secret("ANTHROPIC_BASE_URL")
                    .or_else(|| secret("ANTHROPIC_API_URL"))
                    .unwrap_or_else(|| "https://api.anthropic.com/v1".into()),
                api_key: Some(api_key),
                model: model
                    .or_else(|| first(&["ANTHROPIC_LARGE_MODEL", "LARGE_ANTHROPIC_MODEL"]))
                    .unwrap_or_else(|| "claude-3-5-haiku-latest".into()),
            }
        }
        Vendor::Ollama => Target {
            vendor,
            base_url: secret("OLLAMA_SERVER_URL")
                .or_else(|| secret("OLLAMA_API_ENDPOINT"))
                .unwrap_or_else(|| "http://localhost:11434".into()),
            api_key: None,
            model: model
                .or_else(|| first(&["OLLAMA_LARGE_MODEL", "LARGE_OLLAMA_MODEL", "OLLAMA_MODEL"]))
                .unwrap_or_else(|| "llama3.2".into()),
        },
    };
    Ok(target)
}

/// The persona's small model, by elizaOS's names (`OPENAI_SMALL_MODEL`,
/// `SMALL_OPENAI_MODEL`, `ANTHROPIC_SMALL_MODEL`, `OLLAMA_SMALL_MODEL`… then `SMALL_MODEL`),
/// when one is set and differs from the model replies use: background work (summaries,
/// facts, post drafts) goes there (issue 34). The same vendor, endpoint and key.
pub fn small_target(persona: &Persona, env: &Env, large: &Target) -> Option<Target> {
    let names: &[&str] = match large.vendor {
        Vendor::OpenAi => &["OPENAI_SMALL_MODEL", "SMALL_OPENAI_MODEL", "SMALL_MODEL"],
        Vendor::Anthropic => &[
            "ANTHROPIC_SMALL_MODEL",
            "SMALL_ANTHROPIC_MODEL",
            "SMALL_MODEL",
        ],
        Vendor::Ollama => &["OLLAMA_SMALL_MODEL", "SMALL_OLLAMA_MODEL", "SMALL_MODEL"],
    };
    let small = names
        .iter()
        .find_map(|k| persona.secret(k, env).filter(|v| !v.trim().is_empty()))?;
    (small.trim() != large.model).then(|| Target {
        model: small.trim().to_string(),
        ..large.clone()
    })
}

/// The vision model for a persona whose own model is text-only (issue 32): the same vendor
/// and endpoint as `large`, the model named by `TROUPE_VISION_MODEL` or elizaOS's
/// `IMAGE_VISION_MODEL` (the character's settings or the environment).
pub fn vision_target(persona: &Persona, env: &Env, large: &Target) -> Option<Target> {
    let names = ["TROUPE_VISION_MODEL", "IMAGE_VISION_MODEL"];
    let vision = names
        .iter()
        .find_map(|k| persona.secret(k, env).filter(|v| !v.trim().is_empty()))?;
    (vision.trim() != large.model).then(|| Target {
        model: vision.trim().to_string(),
        ..large.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::persona::test_support::{env, from_json as persona};

    #[test]
    fn a_vision_model_is_named_by_troupe_or_elizaos_setting() {
        let p = persona(serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "openai"}));
        let e = env(&[("OPENAI_API_KEY", "k"), ("IMAGE_VISION_MODEL", "gpt-4o")]);
        let large = resolve_target(&p, &e).unwrap();
        let vision = vision_target(&p, &e, &large).unwrap();
        assert_eq!(
            (vision.model.as_str(), vision.base_url),
            ("gpt-4o", large.base_url)
        );
        let none = env(&[("OPENAI_API_KEY", "k")]);
        assert!(vision_target(&p, &none, &resolve_target(&p, &none).unwrap()).is_none());
    }

    #[test]
    fn a_small_model_is_the_background_target_when_it_differs() {
        let p = persona(serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "openai"}));
        let e = env(&[
            ("OPENAI_API_KEY", "k"),
            ("OPENAI_SMALL_MODEL", "gpt-4o-nano"),
        ]);
        let large = resolve_target(&p, &e).unwrap();
        let small = small_target(&p, &e, &large).unwrap();
        assert_eq!(
            (small.model.as_str(), small.base_url),
            ("gpt-4o-nano", large.base_url)
        );
        let same = env(&[("OPENAI_API_KEY", "k"), ("SMALL_MODEL", "gpt-4o-mini")]);
        assert!(small_target(&p, &same, &resolve_target(&p, &same).unwrap()).is_none());
        let none = env(&[("OPENAI_API_KEY", "k")]);
        assert!(small_target(&p, &none, &resolve_target(&p, &none).unwrap()).is_none());
    }

    #[test]
    fn nothing_configured_names_the_variable() {
        let p = persona(serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "openai"}));
        let err = resolve_target(&p, &env(&[])).unwrap_err();
        assert!(err.contains("OPENAI_API_KEY"), "{err}");
    }

    #[test]
    fn a_local_base_url_needs_no_key() {
        let p = persona(
            serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "openai",
            "settings": {"model": "smol"}}),
        );
        let t = resolve_target(&p, &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")])).unwrap();
        assert_eq!(t.vendor, Vendor::OpenAi);
        assert_eq!(t.model, "smol");
        assert_eq!(t.api_key, None);
    }

    #[test]
    fn anthropic_needs_its_key_and_keys_never_print() {
        let p =
            persona(serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "anthropic"}));
        assert!(
            resolve_target(&p, &env(&[]))
                .unwrap_err()
                .contains("ANTHROPIC_API_KEY")
        );
        let t = resolve_target(&p, &env(&[("ANTHROPIC_API_KEY", "sk-ant-123")])).unwrap();
        assert!(!format!("{t:?}").contains("sk-ant-123"));
    }

    #[test]
    fn an_unknown_provider_is_a_clear_error() {
        let p = persona(serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "myspace"}));
        let err = resolve_target(&p, &env(&[("OPENAI_API_KEY", "k")])).unwrap_err();
        assert!(err.contains("myspace"), "{err}");
    }

    /// Issue 30, finding 1: a file's own endpoint never gets the operator's key.
    #[test]
    fn a_files_own_endpoint_needs_its_own_key() {
        let operator = env(&[
            ("OPENAI_API_KEY", "sk-OPERATOR"),
            ("ANTHROPIC_API_KEY", "sk-ant-OPERATOR"),
        ]);
        for (provider, endpoint, key) in [
            ("openai", "OPENAI_BASE_URL", "OPENAI_API_KEY"),
            ("anthropic", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
            ("anthropic", "ANTHROPIC_API_URL", "ANTHROPIC_API_KEY"),
        ] {
            let p = persona(serde_json::json!({"name": "Evil", "bio": "x",
                "modelProvider": provider,
                "settings": {"secrets": {endpoint: "http://attacker.example/v1"}}}));
            let err = resolve_target(&p, &operator).unwrap_err();
            assert!(err.contains(endpoint) && err.contains(key), "{err}");
            assert!(!err.contains("OPERATOR"), "{err}");
            let own = persona(serde_json::json!({"name": "Own", "bio": "x",
                "modelProvider": provider,
                "settings": {"secrets": {endpoint: "http://mine.example/v1", key: "sk-own"}}}));
            let t = resolve_target(&own, &operator).unwrap();
            assert_eq!(t.api_key.as_deref(), Some("sk-own"));
            assert_eq!(t.base_url, "http://mine.example/v1");
        }
    }
}
