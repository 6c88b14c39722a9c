//! The HTTP edge: where the server listens and what it accepts (`TROUPE_HTTP_*`, the
//! inbound rate limits, the `Host` names it answers to), who may call the API (the
//! operator's token, scoped tokens, trusted proxies) and what the gateway may fetch from
//! (`TROUPE_FETCH_*`). The settings only; `http` applies them, `fetch` fetches.

use anyhow::{Context, bail};
use secrecy::SecretString;
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

use super::{FetchSettings, FileConfig, Layered};

/// Inbound rate limits. A value of 0 disables that limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `TROUPE_RATE_USER_PER_MIN`, default 20: messages one user may send an agent per minute.
    pub user_per_minute: u32,
    /// `TROUPE_RATE_ROOM_PER_MIN`, default 60: messages one room may send an agent per minute.
    pub room_per_minute: u32,
    /// `TROUPE_RATE_AGENT_PER_MIN`, default 600: model calls one agent may make per minute.
    pub agent_per_minute: u32,
    /// `TROUPE_MAX_BODY_BYTES`, default 1 MiB: the largest JSON request body.
    pub max_body_bytes: usize,
    /// `TROUPE_MAX_MESSAGE_CHARS`, default 16000: the longest message text accepted.
    pub max_message_chars: usize,
}

/// `TROUPE_RATE_*_PER_MIN` and the size limits of a message.
pub(super) fn limits(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<Limits> {
    Ok(Limits {
        user_per_minute: layered.parse("TROUPE_RATE_USER_PER_MIN", file.rate_user_per_min, 20)?,
        room_per_minute: layered.parse("TROUPE_RATE_ROOM_PER_MIN", file.rate_room_per_min, 60)?,
        agent_per_minute: layered.parse(
            "TROUPE_RATE_AGENT_PER_MIN",
            file.rate_agent_per_min,
            600,
        )?,
        max_body_bytes: layered.parse("TROUPE_MAX_BODY_BYTES", file.max_body_bytes, 1 << 20)?,
        max_message_chars: layered.parse(
            "TROUPE_MAX_MESSAGE_CHARS",
            file.max_message_chars,
            16_000,
        )?,
    })
}

/// `TROUPE_HTTP_ADDR`. Anything but loopback needs the API token: without it, anyone who
/// reaches the port could talk to the agents.
pub(super) fn http_addr(
    layered: &Layered<'_>,
    file: Option<String>,
    has_token: bool,
) -> anyhow::Result<SocketAddr> {
    let raw = layered
        .string("TROUPE_HTTP_ADDR", file)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    let addr: SocketAddr = raw.parse().with_context(|| {
        format!("TROUPE_HTTP_ADDR `{raw}` is not an address such as 127.0.0.1:3000")
    })?;
    if !has_token && !addr.ip().is_loopback() {
        bail!(
            "TROUPE_HTTP_ADDR {addr} is not a loopback address, and TROUPE_API_TOKEN is \
             not set: anyone who reaches this port could talk to your agents and upload \
             documents. Set TROUPE_API_TOKEN, or bind 127.0.0.1."
        );
    }
    Ok(addr)
}

/// The HTTP server's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// `TROUPE_HTTP_HEADER_TIMEOUT_SECS`, default 10: how long a client may take to send a
    /// request's headers before the connection is closed.
    pub header_timeout: Duration,
    /// `TROUPE_HTTP_BODY_TIMEOUT_SECS`, default 30: the longest pause while a client sends a
    /// request body; then the request fails and the connection is closed.
    pub body_timeout: Duration,
    /// `TROUPE_HTTP_MAX_CONNECTIONS`, default 1024: connections served at once; past it the
    /// probes' lane, then the listen queue (`http::connections`).
    pub max_connections: usize,
    /// `TROUPE_RATE_API_PER_MIN`, default 120 (0: off): requests one caller (one peer
    /// address) may make to `/api` per minute, separate from the platforms' limits.
    pub api_per_minute: u32,
    /// `TROUPE_OPENAI_SYSTEM_MESSAGES`, default `instruction`: what a `system` message sent
    /// to `POST /v1/chat/completions` does (docs/openai.md).
    pub openai_system: SystemMessages,
}

/// What the OpenAI-compatible API does with a client's `system` (or `developer`) message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SystemMessages {
    /// Added to the prompt after the persona's character, as the app's instruction.
    #[default]
    Instruction,
    /// Refused with 400: only the character file speaks to the model.
    Refuse,
}

impl std::str::FromStr for SystemMessages {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "instruction" => Ok(SystemMessages::Instruction),
            "refuse" => Ok(SystemMessages::Refuse),
            _ => Err("use `instruction` or `refuse`".into()),
        }
    }
}

/// `TROUPE_API_TOKEN`, else troupe.toml's `api_token`. An empty value is unset (compose
/// passes `${TROUPE_API_TOKEN:-}`); a token of white space, or with white space around it,
/// could never be presented in a header, so it is refused rather than silently unusable.
pub(super) fn api_token(
    layered: &Layered<'_>,
    file: Option<String>,
) -> anyhow::Result<Option<SecretString>> {
    let token = match layered
        .env
        .get("TROUPE_API_TOKEN")
        .filter(|t| !t.is_empty())
    {
        Some(t) => Some(t.clone()),
        None => file.filter(|t| !t.is_empty()),
    };
    match token {
        None => Ok(None),
        Some(t) if t.trim().is_empty() => bail!(
            "TROUPE_API_TOKEN is only white space: set it to a long random string (for \
             example `openssl rand -hex 32`), or leave it empty to serve loopback only"
        ),
        Some(t) if t.trim() != t || t.chars().any(char::is_control) => bail!(
            "TROUPE_API_TOKEN has white space around it or control characters, so no client \
             could send it in an Authorization header: remove them"
        ),
        Some(t) => Ok(Some(SecretString::from(t))),
    }
}

/// `TROUPE_HTTP_*` and `TROUPE_RATE_API_PER_MIN`: the HTTP server's own limits.
pub(super) fn http_settings(
    layered: &Layered<'_>,
    file: &FileConfig,
) -> anyhow::Result<HttpSettings> {
    let at_least_one = |var: &str, file: Option<u64>, default: u64| -> anyhow::Result<u64> {
        let value = layered.parse(var, file, default)?;
        if value == 0 {
            bail!("{var} must be at least 1");
        }
        Ok(value)
    };
    let header_timeout = at_least_one(
        "TROUPE_HTTP_HEADER_TIMEOUT_SECS",
        file.http_header_timeout_secs,
        10,
    )?;
    let body_timeout = at_least_one(
        "TROUPE_HTTP_BODY_TIMEOUT_SECS",
        file.http_body_timeout_secs,
        30,
    )?;
    let max_connections: usize = layered.parse(
        "TROUPE_HTTP_MAX_CONNECTIONS",
        file.http_max_connections,
        1024,
    )?;
    if max_connections == 0 {
        bail!("TROUPE_HTTP_MAX_CONNECTIONS must be at least 1");
    }
    Ok(HttpSettings {
        header_timeout: Duration::from_secs(header_timeout),
        body_timeout: Duration::from_secs(body_timeout),
        max_connections,
        api_per_minute: layered.parse("TROUPE_RATE_API_PER_MIN", file.rate_api_per_min, 120)?,
        openai_system: layered.parse(
            "TROUPE_OPENAI_SYSTEM_MESSAGES",
            file.openai_system_messages
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e| anyhow::anyhow!("openai_system_messages: {e}"))?,
            SystemMessages::Instruction,
        )?,
    })
}

/// `TROUPE_FETCH_*`: what attachments and linked files may be fetched from.
pub(super) fn fetch_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<FetchSettings> {
    let allow = match layered.string("TROUPE_FETCH_ALLOW", file.fetch_allow.take()) {
        None => Vec::new(),
        Some(raw) => crate::fetch::parse_allow(&raw)
            .map_err(|e| anyhow::anyhow!("TROUPE_FETCH_ALLOW is not valid: {e}"))?,
    };
    let timeout: u64 = layered.parse("TROUPE_FETCH_TIMEOUT_SECS", file.fetch_timeout_secs, 15)?;
    if timeout == 0 {
        bail!("TROUPE_FETCH_TIMEOUT_SECS must be at least 1");
    }
    Ok(FetchSettings {
        allow,
        timeout: Duration::from_secs(timeout),
        max_redirects: layered.parse("TROUPE_FETCH_MAX_REDIRECTS", file.fetch_max_redirects, 3)?,
    })
}

/// Which `Host` names the HTTP server answers to (finding 2, DNS rebinding) and how many
/// connections one address may hold (finding 8, slow clients). `http::edge` and
/// `http::connections` apply them; docs/security.md ("The HTTP edge") explains the choices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSettings {
    /// `TROUPE_ALLOWED_HOSTS` (`allowed_hosts`), unset by default: host names, besides
    /// `localhost` (and names under `.localhost`) and IP literals, that a request's `Host`
    /// may carry. Without a token they are checked always; with `TROUPE_API_TOKEN` set, only
    /// when this list is set. An `Origin` whose host is listed counts as this server's own.
    pub allowed_hosts: Option<AllowedHosts>,
    /// `TROUPE_HTTP_MAX_CONNECTIONS_PER_IP` (`http_max_connections_per_ip`), default 64:
    /// connections one peer address (an IPv6 peer by its /64) may hold at once; the next
    /// one is answered 429 and closed.
    pub max_connections_per_ip: usize,
}

/// One entry of `TROUPE_ALLOWED_HOSTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// `bot.example.org`: that name only.
    Exact(String),
    /// `.example.org`: that name and every name under it.
    Domain(String),
}

/// The names of `TROUPE_ALLOWED_HOSTS`, lower case and without a trailing dot, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts(Vec<HostPattern>);

impl AllowedHosts {
    /// A comma-separated list of host names: `bot.example.org`, or `.example.org` for a
    /// domain and every name under it. No scheme, no port (any port of a listed name is
    /// accepted), no wildcard `*`: a list that allowed every name would undo the check.
    pub fn parse(raw: &str) -> Result<AllowedHosts, String> {
        let mut patterns = Vec::new();
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let name = entry.to_ascii_lowercase();
            let (domain, name) = match name.strip_prefix('.') {
                Some(rest) => (true, rest),
                None => (false, name.as_str()),
            };
            let name = name.strip_suffix('.').unwrap_or(name);
            if !is_host_name(name) {
                return Err(format!(
                    "`{entry}` is not a host name: list names such as bot.example.org or \
                     .example.org, without a scheme, a port, a path or `*`"
                ));
            }
            let name = name.to_string();
            patterns.push(if domain {
                HostPattern::Domain(name)
            } else {
                HostPattern::Exact(name)
            });
        }
        if patterns.is_empty() {
            return Err("lists no host name".into());
        }
        Ok(AllowedHosts(patterns))
    }

    /// Whether `host` (lower case, without brackets, port or trailing dot) is listed.
    pub fn allows(&self, host: &str) -> bool {
        self.0.iter().any(|p| match p {
            HostPattern::Exact(name) => host == name,
            HostPattern::Domain(name) => {
                host == name
                    || host
                        .strip_suffix(name.as_str())
                        .is_some_and(|sub| sub.ends_with('.'))
            }
        })
    }
}

/// A DNS name (letters, digits, `-` and `_`, labels of 1 to 63 characters, 253 in all), or
/// an IPv4 literal, which is also made of such labels.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// `TROUPE_ALLOWED_HOSTS` and `TROUPE_HTTP_MAX_CONNECTIONS_PER_IP`.
pub(super) fn edge_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<EdgeSettings> {
    let allowed_hosts = layered
        .string("TROUPE_ALLOWED_HOSTS", file.allowed_hosts.take())
        .map(|raw| {
            AllowedHosts::parse(&raw)
                .map_err(|e| anyhow::anyhow!("TROUPE_ALLOWED_HOSTS is not valid: {e}"))
        })
        .transpose()?;
    let max_connections_per_ip: usize = layered.parse(
        "TROUPE_HTTP_MAX_CONNECTIONS_PER_IP",
        file.http_max_connections_per_ip,
        64,
    )?;
    if max_connections_per_ip == 0 {
        bail!("TROUPE_HTTP_MAX_CONNECTIONS_PER_IP must be at least 1");
    }
    Ok(EdgeSettings {
        allowed_hosts,
        max_connections_per_ip,
    })
}

/// Who may call the HTTP API besides the operator, and how callers are told apart
/// (docs/api.md, "Scoped tokens" and "Behind a reverse proxy").
#[derive(Clone, Default)]
pub struct ApiCallers {
    /// `TROUPE_API_TOKENS_FILE`, unset by default: a JSON file of scoped tokens, each
    /// limited to some personas (and optionally to reads). Needs `TROUPE_API_TOKEN`.
    pub tokens: Vec<ScopedToken>,
    /// `TROUPE_TRUSTED_PROXIES`, empty by default: addresses and networks (`10.0.0.0/8`) of
    /// reverse proxies whose `X-Forwarded-For` / `Forwarded` name the caller. From any other
    /// peer these headers are ignored.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// The name of a scoped token: letters, digits, `-` and `_`, at most 40. It names the
/// token in logs and errors, keys its rate budget, and prefixes its rooms (`web:NAME:r1`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenName(String);

impl TokenName {
    pub fn parse(raw: &str) -> Result<TokenName, String> {
        let ok = !raw.is_empty()
            && raw.len() <= 40
            && raw
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        // `openai` is the namespace of `/v1`'s stateless rooms (`web:openai:USER`): a token
        // so named would have its rooms there (issue 43).
        if raw.eq_ignore_ascii_case(crate::web::STATELESS_NAMESPACE) {
            return Err(format!(
                "`{raw}` is reserved: the OpenAI-compatible API's stateless rooms are `openai:USER`; name the token otherwise"
            ));
        }
        if ok {
            Ok(TokenName(raw.to_string()))
        } else {
            Err(format!(
                "`{raw}` is not a token name: use 1 to 40 letters, digits, `-` or `_`"
            ))
        }
    }
}

impl std::fmt::Display for TokenName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One scoped token of `TROUPE_API_TOKENS_FILE`.
#[derive(Clone)]
pub struct ScopedToken {
    pub name: TokenName,
    pub secret: SecretString,
    /// The personas it may reach, by id or name (as a route's `{agent}`).
    pub personas: Vec<String>,
    /// Reads only: no message is posted with it.
    pub read_only: bool,
}

// By hand, so that the secret never prints.
impl std::fmt::Debug for ScopedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedToken")
            .field("name", &self.name)
            .field("secret", &"[redacted]")
            .field("personas", &self.personas)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl std::fmt::Debug for ApiCallers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiCallers")
            .field("tokens", &self.tokens)
            .field("trusted_proxies", &self.trusted_proxies)
            .finish()
    }
}

/// A token as the file writes it: `[{"name", "token", "personas", "readOnly"?}]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScopedTokenJson {
    name: String,
    token: String,
    personas: Vec<String>,
    #[serde(default)]
    read_only: bool,
}

/// The shortest scoped token accepted: a token is a password that websites hold.
const SCOPED_TOKEN_MIN_CHARS: usize = 16;

/// `TROUPE_API_TOKENS_FILE` and `TROUPE_TRUSTED_PROXIES`. No error quotes a token.
pub(super) fn api_callers(
    layered: &Layered<'_>,
    file: &mut FileConfig,
    operator: Option<&SecretString>,
) -> anyhow::Result<ApiCallers> {
    use secrecy::ExposeSecret;
    let trusted_proxies =
        match layered.string("TROUPE_TRUSTED_PROXIES", file.trusted_proxies.take()) {
            None => Vec::new(),
            Some(raw) => parse_trusted_proxies(&raw)
                .map_err(|e| anyhow::anyhow!("TROUPE_TRUSTED_PROXIES is not valid: {e}"))?,
        };
    let Some(path) = layered.string("TROUPE_API_TOKENS_FILE", file.api_tokens_file.take()) else {
        return Ok(ApiCallers {
            tokens: Vec::new(),
            trusted_proxies,
        });
    };
    let Some(operator) = operator else {
        bail!(
            "TROUPE_API_TOKENS_FILE is set but TROUPE_API_TOKEN is not: scoped tokens limit \
             callers only when the API needs a token at all. Set TROUPE_API_TOKEN too."
        );
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("TROUPE_API_TOKENS_FILE: cannot read {path}"))?;
    let listed: Vec<ScopedTokenJson> = serde_json::from_str(&text).map_err(|e| {
        // serde's message may quote a value, which may be a token: only its position and,
        // for an unknown field, the field's name.
        let what = if e.to_string().starts_with("unknown field") {
            e.to_string()
        } else {
            "expected a JSON list of {\"name\", \"token\", \"personas\": [...], \"readOnly\"?}"
                .to_string()
        };
        anyhow::anyhow!(
            "TROUPE_API_TOKENS_FILE {path}: line {}, column {}: {what}",
            e.line(),
            e.column()
        )
    })?;
    let mut tokens: Vec<ScopedToken> = Vec::with_capacity(listed.len());
    for t in listed {
        let name = TokenName::parse(&t.name)
            .map_err(|e| anyhow::anyhow!("TROUPE_API_TOKENS_FILE {path}: {e}"))?;
        let bad =
            |why: &str| anyhow::anyhow!("TROUPE_API_TOKENS_FILE {path}: token `{name}` {why}");
        if t.token.chars().count() < SCOPED_TOKEN_MIN_CHARS
            || t.token.trim() != t.token
            || t.token.chars().any(char::is_control)
        {
            return Err(bad(&format!(
                "must be at least {SCOPED_TOKEN_MIN_CHARS} characters without white space \
                 around it or control characters (for example `openssl rand -hex 32`)"
            )));
        }
        if t.personas.is_empty() || t.personas.iter().any(|p| p.trim().is_empty()) {
            return Err(bad("must list the personas it may reach (ids or names)"));
        }
        if tokens.iter().any(|o| o.name == name) {
            return Err(bad("is named twice"));
        }
        if t.token == operator.expose_secret()
            || tokens.iter().any(|o| o.secret.expose_secret() == t.token)
        {
            return Err(bad("has the same secret as another token"));
        }
        tokens.push(ScopedToken {
            name,
            secret: SecretString::from(t.token),
            personas: t.personas,
            read_only: t.read_only,
        });
    }
    Ok(ApiCallers {
        tokens,
        trusted_proxies,
    })
}

/// `TROUPE_TRUSTED_PROXIES`: addresses or networks, separated by commas or white space.
fn parse_trusted_proxies(raw: &str) -> Result<Vec<ipnet::IpNet>, String> {
    raw.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("`{s}` is not an address or a network such as 10.0.0.0/8"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use super::*;
    use crate::config::Config;

    #[test]
    fn a_public_address_needs_a_token() {
        let err = Config::from_env(env(&[("TROUPE_HTTP_ADDR", "0.0.0.0:3000")])).unwrap_err();
        assert!(err.to_string().contains("TROUPE_API_TOKEN"), "{err}");
        let ok = Config::from_env(env(&[
            ("TROUPE_HTTP_ADDR", "0.0.0.0:3000"),
            ("TROUPE_API_TOKEN", "s3cret"),
        ]))
        .unwrap();
        // The token is not printable through Debug.
        assert!(!format!("{ok:?}").contains("s3cret"));
    }

    #[test]
    fn edge_settings_have_defaults_and_bad_ones_are_named() {
        let c = Config::for_test();
        assert_eq!(c.http.header_timeout, Duration::from_secs(10));
        assert_eq!(c.http.body_timeout, Duration::from_secs(30));
        assert_eq!(c.http.max_connections, 1024);
        assert_eq!(c.http.api_per_minute, 120);
        assert!(c.knowledge.fetch.allow.is_empty());
        assert_eq!(c.knowledge.fetch.max_redirects, 3);
        assert_eq!(c.knowledge.fetch.timeout, Duration::from_secs(15));
        let c = Config::from_env(env(&[
            ("TROUPE_FETCH_ALLOW", "127.0.0.1:9000, files.lan"),
            ("TROUPE_HTTP_MAX_CONNECTIONS", "8"),
            ("TROUPE_RATE_API_PER_MIN", "0"),
        ]))
        .unwrap();
        assert_eq!(c.knowledge.fetch.allow.len(), 2);
        assert_eq!(c.http.max_connections, 8);
        assert_eq!(c.http.api_per_minute, 0);
        for (var, bad) in [
            ("TROUPE_FETCH_ALLOW", "http://x/"),
            ("TROUPE_HTTP_MAX_CONNECTIONS", "0"),
            ("TROUPE_HTTP_HEADER_TIMEOUT_SECS", "0"),
            ("TROUPE_FETCH_TIMEOUT_SECS", "soon"),
        ] {
            let err = Config::from_env(env(&[(var, bad)])).unwrap_err();
            assert!(err.to_string().contains(var), "{var}={bad}: {err}");
        }
    }

    #[test]
    fn a_blank_api_token_is_refused() {
        for blank in [" ", "\t", "   \n"] {
            let err = Config::from_env(env(&[("TROUPE_API_TOKEN", blank)])).unwrap_err();
            assert!(err.to_string().contains("TROUPE_API_TOKEN"), "{err}");
            assert!(err.to_string().contains("white space"), "{err}");
        }
        let err = Config::from_env(env(&[("TROUPE_API_TOKEN", " s3cret ")])).unwrap_err();
        assert!(
            !err.to_string().contains("s3cret"),
            "the token is printed: {err}"
        );
        // Empty is unset, as compose passes it.
        let c = Config::from_env(env(&[("TROUPE_API_TOKEN", "")])).unwrap();
        assert!(c.api_token.is_none());
    }

    /// Issue 30, finding 7: scoped tokens are read from their file, need the operator's
    /// token, and no error quotes a secret.
    #[test]
    fn scoped_tokens_parse_and_errors_never_quote_a_secret() {
        use secrecy::ExposeSecret;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let load = |text: &str, operator: bool| {
            std::fs::write(&path, text).unwrap();
            let path = path.display().to_string();
            let mut vars = vec![("TROUPE_API_TOKENS_FILE", path.as_str())];
            if operator {
                vars.push(("TROUPE_API_TOKEN", "operator-token"));
            }
            Config::from_env(env(&vars))
        };
        let good = r#"[{"name": "shop", "token": "shop-secret-0123456789", "personas": ["ada"], "readOnly": true}]"#;
        let c = load(good, true).unwrap();
        let t = &c.api_callers.tokens[0];
        assert_eq!(t.name.to_string(), "shop");
        assert_eq!(t.secret.expose_secret(), "shop-secret-0123456789");
        assert!(t.read_only);
        assert!(
            !format!("{c:?}").contains("shop-secret"),
            "Debug shows a token"
        );
        let err = load(good, false).unwrap_err().to_string();
        assert!(err.contains("TROUPE_API_TOKEN"), "{err}");
        for (text, says) in [
            (
                r#"[{"name": "shop", "token": "short-secret", "personas": ["ada"]}]"#,
                "at least 16",
            ),
            (
                r#"[{"name": "shop", "token": 12345678901234567890123, "personas": ["ada"]}]"#,
                "line 1",
            ),
            (
                r#"[{"name": "shop", "token": "shop-secret-0123456789", "personas": "shop-secret-0123456789"}]"#,
                "line 1",
            ),
            (
                r#"[{"name": "shop", "token": "shop-secret-0123456789", "personas": []}]"#,
                "personas",
            ),
            (
                r#"[{"name": "a b", "token": "shop-secret-0123456789", "personas": ["ada"]}]"#,
                "token name",
            ),
            (
                r#"[{"name": "shop", "token": "shop-secret-0123456789", "personas": ["ada"], "extra": 1}]"#,
                "unknown field `extra`",
            ),
            (
                r#"[{"name": "shop", "token": "operator-token", "personas": ["ada"]}]"#,
                "at least 16",
            ),
        ] {
            let err = load(text, true).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            for secret in [
                "short-secret",
                "shop-secret",
                "12345678901234567890123",
                "operator-token",
            ] {
                assert!(
                    !err.contains(secret),
                    "{text}: the error quotes a secret: {err}"
                );
            }
        }
        let twice = r#"[{"name": "a", "token": "same-secret-0123456789", "personas": ["ada"]},
                        {"name": "b", "token": "same-secret-0123456789", "personas": ["ada"]}]"#;
        let err = load(twice, true).unwrap_err().to_string();
        assert!(err.contains("same secret"), "{err}");
        let err = Config::from_env(env(&[("TROUPE_TRUSTED_PROXIES", "10.0.0.0/8, proxy.lan")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("proxy.lan"), "{err}");
        let err = Config::from_env(env(&[("TROUPE_SPEND_API_SHARE", "1.5")])).unwrap_err();
        assert!(err.to_string().contains("between 0 and 1"), "{err}");
    }

    #[test]
    fn allowed_hosts_match_names_and_domains() {
        let hosts = AllowedHosts::parse(" Bot.Example.org., .corp.example ,").unwrap();
        assert!(hosts.allows("bot.example.org"));
        assert!(!hosts.allows("evil.bot.example.org"));
        assert!(hosts.allows("corp.example"));
        assert!(hosts.allows("a.b.corp.example"));
        assert!(!hosts.allows("evilcorp.example"));
        assert!(!hosts.allows("example.org"));
    }

    #[test]
    fn allowed_hosts_refuse_what_is_not_a_name() {
        for bad in [
            "*",
            "http://bot.example.org",
            "bot.example.org:443",
            "bot.example.org/x",
            ",",
            "a..b",
            "[::1]",
        ] {
            let err = AllowedHosts::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }
}
