//! Target resolution: which vendor, base URL, key and model a persona's calls go to, from
//! its `modelProvider`, its `settings.model` and its secrets, and for its vision model
//! from `imageVisionModelProvider` and the operator's environment. Nothing here calls a
//! model.

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

    /// What the operator sets to configure this vendor (for error messages).
    fn credential(self) -> &'static str {
        match self {
            Vendor::OpenAi => "OPENAI_API_KEY (or OPENAI_BASE_URL)",
            Vendor::Anthropic => "ANTHROPIC_API_KEY",
            Vendor::Ollama => "OLLAMA_SERVER_URL",
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
    let Some((base_url, api_key)) = endpoint(vendor, secret) else {
        return Err(match vendor {
            Vendor::Anthropic => format!(
                "persona `{}` uses modelProvider anthropic: set ANTHROPIC_API_KEY",
                persona.name
            ),
            _ => format!(
                "no model provider is configured for persona `{}`: set OPENAI_API_KEY \
                 (or OPENAI_BASE_URL for a local OpenAI-compatible server, or \
                 ANTHROPIC_API_KEY / OLLAMA_SERVER_URL with a matching modelProvider)",
                persona.name
            ),
        });
    };
    let model = match vendor {
        Vendor::OpenAi => model
            .or_else(|| first(&["OPENAI_LARGE_MODEL", "LARGE_OPENAI_MODEL", "OPENAI_MODEL"]))
            .unwrap_or_else(|| "gpt-4o-mini".into()),
        Vendor::Anthropic => model
            .or_else(|| first(&["ANTHROPIC_LARGE_MODEL", "LARGE_ANTHROPIC_MODEL"]))
            .unwrap_or_else(|| "claude-3-5-haiku-latest".into()),
        Vendor::Ollama => model
            .or_else(|| first(&["OLLAMA_LARGE_MODEL", "LARGE_OLLAMA_MODEL", "OLLAMA_MODEL"]))
            .unwrap_or_else(|| "llama3.2".into()),
    };
    let target = Target {
        vendor,
        base_url,
        api_key,
        model,
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

/// The vision model for a persona whose own model is text-only (issue 32): the model named
/// by `TROUPE_VISION_MODEL` or elizaOS's `IMAGE_VISION_MODEL` (the character's settings or
/// the environment), on the persona's own provider and endpoint; or, when the character
/// names elizaOS's `imageVisionModelProvider`, on that provider as the operator configured
/// it (`operator_endpoint`), with [`default_vision_model`] when no model is named.
/// `Ok(None)`: no vision model. The error (an unknown or unconfigured provider) is the
/// sentence the operator needs; the persona then has no vision model.
pub fn vision_target(
    persona: &Persona,
    env: &Env,
    large: &Target,
) -> Result<Option<Target>, String> {
    let names = ["TROUPE_VISION_MODEL", "IMAGE_VISION_MODEL"];
    let named = names
        .iter()
        .find_map(|k| persona.secret(k, env).filter(|v| !v.trim().is_empty()))
        .map(|v| v.trim().to_string());
    let Some(provider) = persona.image_vision_model_provider() else {
        return Ok(named.filter(|m| *m != large.model).map(|model| Target {
            model,
            ..large.clone()
        }));
    };
    let vendor = Vendor::parse(&provider).ok_or_else(|| {
        format!(
            "persona `{}` asks for imageVisionModelProvider `{provider}`, which troupe does not \
             support; use openai, anthropic or ollama",
            persona.name
        )
    })?;
    let (base_url, api_key) = operator_endpoint(vendor, env).ok_or_else(|| {
        format!(
            "persona `{}` asks for imageVisionModelProvider `{provider}`, which is not \
             configured: set {} in the environment",
            persona.name,
            vendor.credential()
        )
    })?;
    let model = named.unwrap_or_else(|| default_vision_model(vendor).to_string());
    let vision = Target {
        vendor,
        base_url,
        api_key,
        model,
    };
    let same = vision.vendor == large.vendor
        && vision.base_url == large.base_url
        && vision.model == large.model;
    Ok((!same).then_some(vision))
}

/// The vision model called on `vendor` when `imageVisionModelProvider` names it and neither
/// `TROUPE_VISION_MODEL` nor `IMAGE_VISION_MODEL` is set: a small model of that vendor that
/// takes images (docs/media.md).
pub fn default_vision_model(vendor: Vendor) -> &'static str {
    match vendor {
        Vendor::OpenAi => "gpt-4o-mini",
        Vendor::Anthropic => "claude-haiku-4-5",
        Vendor::Ollama => "llama3.2-vision",
    }
}

/// `vendor`'s endpoint and key as `var` gives them (the persona's secrets, or the
/// operator's environment alone): `None` when the vendor is not configured there (OpenAI:
/// neither a key nor a base URL; Anthropic: no key). Ollama needs no key, and its server is
/// `OLLAMA_SERVER_URL`, else the local default.
fn endpoint(
    vendor: Vendor,
    var: impl Fn(&str) -> Option<String>,
) -> Option<(String, Option<String>)> {
    match vendor {
        Vendor::OpenAi => {
            let (base, key) = (var("OPENAI_BASE_URL"), var("OPENAI_API_KEY"));
            if base.is_none() && key.is_none() {
                return None;
            }
            Some((
                base.unwrap_or_else(|| "https://api.openai.com/v1".into()),
                key,
            ))
        }
        Vendor::Anthropic => {
            let key = var("ANTHROPIC_API_KEY")?;
            let base = var("ANTHROPIC_BASE_URL").or_else(|| var("ANTHROPIC_API_URL"));
            Some((
                base.unwrap_or_else(|| "https://api.anthropic.com/v1".into()),
                Some(key),
            ))
        }
        Vendor::Ollama => Some((
            var("OLLAMA_SERVER_URL")
                .or_else(|| var("OLLAMA_API_ENDPOINT"))
                .unwrap_or_else(|| "http://localhost:11434".into()),
            None,
        )),
    }
}

/// `vendor`'s endpoint and key as the operator set them: the process environment only,
/// never a character file. A file may pick a provider the operator configured, not point
/// one somewhere else or borrow its key for its own endpoint (issue 30, finding 1).
/// `None`: the operator did not configure it (for Ollama, no `OLLAMA_SERVER_URL`).
fn operator_endpoint(vendor: Vendor, env: &Env) -> Option<(String, Option<String>)> {
    let var = |k: &str| {
        env.get(k)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    if vendor == Vendor::Ollama
        && var("OLLAMA_SERVER_URL")
            .or_else(|| var("OLLAMA_API_ENDPOINT"))
            .is_none()
    {
        return None;
    }
    endpoint(vendor, var)
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
        let vision = vision_target(&p, &e, &large).unwrap().unwrap();
        assert_eq!(
            (vision.model.as_str(), vision.base_url),
            ("gpt-4o", large.base_url)
        );
        let none = env(&[("OPENAI_API_KEY", "k")]);
        let large = resolve_target(&p, &none).unwrap();
        assert!(vision_target(&p, &none, &large).unwrap().is_none());
    }

    /// elizaOS's `imageVisionModelProvider`: another provider, with the operator's endpoint
    /// and key for it, and its default vision model unless one is named.
    #[test]
    fn image_vision_model_provider_picks_another_configured_provider() {
        let p = persona(
            serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "openai",
            "imageVisionModelProvider": "Anthropic", "settings": {"model": "gpt-3.5-turbo"}}),
        );
        let e = env(&[
            ("OPENAI_API_KEY", "sk-openai"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("ANTHROPIC_BASE_URL", "http://claude.internal/v1"),
        ]);
        let large = resolve_target(&p, &e).unwrap();
        let vision = vision_target(&p, &e, &large).unwrap().unwrap();
        assert_eq!(vision.vendor, Vendor::Anthropic);
        assert_eq!(vision.base_url, "http://claude.internal/v1");
        assert_eq!(vision.api_key.as_deref(), Some("sk-ant"));
        assert_eq!(vision.model, "claude-haiku-4-5");
        let named = env(&[
            ("OPENAI_API_KEY", "sk-openai"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("TROUPE_VISION_MODEL", "claude-sonnet-4-5"),
        ]);
        let vision = vision_target(&p, &named, &large).unwrap().unwrap();
        assert_eq!(
            (vision.model.as_str(), vision.base_url.as_str()),
            ("claude-sonnet-4-5", "https://api.anthropic.com/v1")
        );
    }

    #[test]
    fn image_vision_model_provider_unknown_or_unconfigured_is_a_clear_error() {
        let ask = |provider: &str| {
            persona(
                serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "openai",
                "imageVisionModelProvider": provider}),
            )
        };
        let e = env(&[("OPENAI_API_KEY", "k")]);
        let p = ask("myspace");
        let err = vision_target(&p, &e, &resolve_target(&p, &e).unwrap()).unwrap_err();
        assert!(err.contains("imageVisionModelProvider `myspace`"), "{err}");
        let p = ask("anthropic");
        let err = vision_target(&p, &e, &resolve_target(&p, &e).unwrap()).unwrap_err();
        assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
    }

    /// The file picks a provider; the endpoint and key are the operator's, never the
    /// file's, and the file's own endpoint never gets the operator's key.
    #[test]
    fn the_vision_provider_is_never_pointed_by_the_file() {
        let p = persona(
            serde_json::json!({"name": "Own", "bio": "x", "modelProvider": "openai",
            "imageVisionModelProvider": "openai",
            "settings": {"model": "gpt-3.5-turbo", "secrets": {
                "OPENAI_BASE_URL": "http://mine.example/v1", "OPENAI_API_KEY": "sk-own"}}}),
        );
        let e = env(&[
            ("OPENAI_API_KEY", "sk-operator"),
            ("OPENAI_BASE_URL", "http://operator.example/v1"),
        ]);
        let large = resolve_target(&p, &e).unwrap();
        assert_eq!(large.base_url, "http://mine.example/v1");
        let vision = vision_target(&p, &e, &large).unwrap().unwrap();
        assert_eq!(vision.base_url, "http://operator.example/v1");
        assert_eq!(vision.api_key.as_deref(), Some("sk-operator"));
        assert_eq!(vision.model, "gpt-4o-mini");
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
