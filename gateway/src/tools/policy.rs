//! Who decides what a tool may do, in two parts.
//!
//! 1. **The operator** (`permitted`): a stdio server runs only when its `command` is listed in
//!    `TROUPE_MCP_COMMANDS`, an HTTP server only at a URL under one of `TROUPE_MCP_URLS`. A
//!    character file can be written through the console, so the file alone must never be
//!    enough to start a program or to send requests somewhere new; a refusal names the
//!    variable to set, at `troupe check` and in the start log.
//! 2. **The persona's rooms** (`RoomPolicy`, from `settings.troupe.tools`): tools are offered
//!    in direct messages and on the HTTP API; a group room only when the character opts it
//!    in, by room (`rooms`) or for every group (`groups`), and `allow` narrows which tools.
//!    A tool its server marks destructive (`destructiveHint`) also needs the room's admin
//!    (`agent/tools.rs` asks the platform).

use serde_json::Value;
use troupe_connectors::{Inbound, Platform, RoomKey};

use super::servers::{ServerSpec, Transport};
use crate::config::ToolSettings;

/// Whether the operator lets `spec` run; the refusal says which variable to set.
pub fn permitted(spec: &ServerSpec, settings: &ToolSettings) -> Result<(), String> {
    match &spec.transport {
        Transport::Stdio { command, .. } => {
            if settings.mcp_commands.iter().any(|c| c == command) {
                Ok(())
            } else {
                Err(format!(
                    "MCP server `{}`: the command `{command}` is not allowed; the operator lists the executables MCP servers may run in TROUPE_MCP_COMMANDS",
                    spec.name
                ))
            }
        }
        Transport::Http { url } => {
            if settings.mcp_urls.iter().any(|p| under(url, p)) {
                Ok(())
            } else {
                Err(format!(
                    "MCP server `{}`: the URL `{url}` is not allowed; the operator lists the URL prefixes MCP servers may live under in TROUPE_MCP_URLS",
                    spec.name
                ))
            }
        }
    }
}

/// Whether `url` is `prefix` or lies under it: the same scheme, host and port, and a path
/// that continues the prefix's at a `/` (so `https://a.org/mcp` does not admit
/// `https://a.org/mcp-evil`, nor `https://a.org.evil.net/mcp`). No user info in `url`.
pub fn under(url: &str, prefix: &str) -> bool {
    let (Ok(url), Ok(prefix)) = (reqwest::Url::parse(url), reqwest::Url::parse(prefix)) else {
        return false;
    };
    if !url.username().is_empty() || url.password().is_some() {
        return false;
    }
    if url.scheme() != prefix.scheme()
        || url.host_str() != prefix.host_str()
        || url.port_or_known_default() != prefix.port_or_known_default()
    {
        return false;
    }
    let (path, base) = (url.path(), prefix.path());
    path == base
        || (path.starts_with(base) && (base.ends_with('/') || path[base.len()..].starts_with('/')))
}

/// Whether a room is a direct conversation (tools by default) or a group (opt-in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomKind {
    Direct,
    Group,
}

impl RoomKind {
    pub fn of(inbound: &Inbound) -> RoomKind {
        if inbound.is_direct {
            RoomKind::Direct
        } else {
            RoomKind::Group
        }
    }
}

/// `settings.troupe.tools`: which rooms may use the persona's tools, and which tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoomPolicy {
    /// `groups: true`: every group room, as DMs.
    groups: bool,
    /// `rooms: ["discord:123", …]`: these group rooms (`platform:room`).
    rooms: Vec<String>,
    /// `allow: ["weather.forecast", "files.*", "memory.remember"]`: only these tools
    /// (a `server.*` entry stands for all of a server's). Unset: every tool of the persona.
    allow: Option<Vec<String>>,
}

impl RoomPolicy {
    /// Reads `settings.troupe.tools` from the character; problems are returned as text.
    pub fn of(raw: &Value) -> (RoomPolicy, Vec<String>) {
        let mut policy = RoomPolicy::default();
        let mut problems = Vec::new();
        let Some(v) = raw.pointer("/settings/troupe/tools") else {
            return (policy, problems);
        };
        let Some(obj) = v.as_object() else {
            problems.push(
                "settings.troupe.tools: expected an object {\"groups\", \"rooms\", \"allow\", \"builtin\"}"
                    .into(),
            );
            return (policy, problems);
        };
        let strings = |key: &str, problems: &mut Vec<String>| -> Option<Vec<String>> {
            let items = obj.get(key)?;
            let list = items.as_array().and_then(|a| {
                a.iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            });
            if list.is_none() {
                problems.push(format!(
                    "settings.troupe.tools.{key}: expected a list of strings"
                ));
            }
            list
        };
        for key in obj.keys() {
            // `builtin` is read by `tools::builtin`: which of troupe's own tools are on.
            if !matches!(key.as_str(), "groups" | "rooms" | "allow" | "builtin") {
                problems.push(format!(
                    "settings.troupe.tools.{key}: unknown field; use groups, rooms, allow or builtin"
                ));
            }
        }
        match obj.get("groups") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => policy.groups = *b,
            Some(_) => problems.push("settings.troupe.tools.groups: expected true or false".into()),
        }
        policy.rooms = strings("rooms", &mut problems).unwrap_or_default();
        policy.allow = strings("allow", &mut problems);
        (policy, problems)
    }

    /// Whether tools are offered to the model for a message in this room.
    pub fn offered_in(&self, inbound: &Inbound) -> bool {
        self.offered_to(&inbound.room.key(), RoomKind::of(inbound))
    }

    /// Whether tools are offered in `room`, a room of `kind`: DMs and the HTTP API always,
    /// a group when it opted in.
    pub fn offered_to(&self, room: &RoomKey, kind: RoomKind) -> bool {
        kind == RoomKind::Direct
            || room.platform == Platform::Web
            || self.groups
            || self.rooms.contains(&room.to_string())
    }

    /// Whether the tool named `name` (`server.tool`) may be offered at all.
    pub fn allows(&self, name: &str) -> bool {
        let Some(allow) = &self.allow else {
            return true;
        };
        allow.iter().any(|a| {
            a == name
                || a.strip_suffix(".*")
                    .is_some_and(|server| name.split_once('.').is_some_and(|(s, _)| s == server))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn url_prefixes_hold_at_boundaries() {
        assert!(under("https://a.org/mcp", "https://a.org/mcp"));
        assert!(under("https://a.org/mcp/x", "https://a.org/mcp"));
        assert!(under("https://a.org/mcp/x", "https://a.org/"));
        assert!(!under("https://a.org/mcp-evil", "https://a.org/mcp"));
        assert!(!under("https://a.org.evil.net/mcp", "https://a.org/"));
        assert!(!under("http://a.org/mcp", "https://a.org/"));
        assert!(!under("https://a.org:8443/mcp", "https://a.org/"));
        assert!(!under("https://u:p@a.org/mcp", "https://a.org/"));
        assert!(!under("not a url", "https://a.org/"));
    }

    #[test]
    fn refusals_name_the_variable() {
        use super::super::servers::servers_of;
        let raw = json!({"settings": {"mcp": {"servers": {
            "s": {"type": "stdio", "command": "/bin/sh"},
            "h": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
        }}}});
        let (specs, _) = servers_of(&raw);
        let settings = ToolSettings::default();
        let errors: Vec<String> = specs
            .iter()
            .map(|s| permitted(s, &settings).unwrap_err())
            .collect();
        assert!(errors.iter().any(|e| e.contains("TROUPE_MCP_COMMANDS")));
        assert!(errors.iter().any(|e| e.contains("TROUPE_MCP_URLS")));
        let settings = ToolSettings {
            mcp_commands: vec!["/bin/sh".into()],
            mcp_urls: vec!["http://127.0.0.1:9/".into()],
            ..ToolSettings::default()
        };
        assert!(specs.iter().all(|s| permitted(s, &settings).is_ok()));
    }

    #[test]
    fn allow_lists_tools_and_servers() {
        let (p, problems) =
            RoomPolicy::of(&json!({"settings": {"troupe": {"tools": {"allow": ["a.x", "b.*"]}}}}));
        assert!(problems.is_empty());
        assert!(p.allows("a.x") && p.allows("b.y") && !p.allows("a.y") && !p.allows("bb.y"));
        let (p, _) = RoomPolicy::of(&json!({}));
        assert!(p.allows("anything.at_all"));
    }
}
