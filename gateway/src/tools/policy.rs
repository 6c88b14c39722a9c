//! Who decides what a tool may do, in two parts.
//!
//! 1. **The operator** (`permitted`): a character file can be written through the console
//!    (and by a pull request to a personas repository), so the file alone must never get a
//!    program run that the operator did not write, nor send requests somewhere new (issue
//!    43). A stdio server runs only when its `command` **and** `args` equal a command line
//!    listed in `TROUPE_MCP_COMMANDS` (an interpreter's arguments, `-c`, `-e`, `--import`, a
//!    script's path, name any code); each variable of its `env` must be listed in
//!    `TROUPE_MCP_ENV` and must not be one that makes a program load code (`floor`:
//!    refused even when listed); its `cwd` must be unset or listed in `TROUPE_MCP_CWDS`. An
//!    HTTP server runs only at a URL under one of `TROUPE_MCP_URLS`. Each refusal names the
//!    field and the variable to set, at `troupe check`, at the console's save and in the
//!    start log.
//! 2. **The persona's rooms** (`RoomPolicy`, from `settings.troupe.tools`): tools are offered
//!    in direct messages and on the HTTP API; a group room only when the character opts it
//!    in, by room (`rooms`) or for every group (`groups`), and `allow` narrows which tools.
//!    A tool its server marks destructive (`destructiveHint`) also needs the room's admin
//!    (`agent/tools.rs` asks the platform).

use std::collections::BTreeMap;

use serde_json::Value;
use troupe_connectors::{Inbound, Platform, RoomKey};

use super::floor::env_floor;
use super::servers::{Problem, ServerSpec, Transport};
use crate::config::ToolSettings;

/// Whether the operator lets `spec` run; each refusal names its field and the variable to
/// set.
pub fn permitted(spec: &ServerSpec, settings: &ToolSettings) -> Result<(), Vec<Problem>> {
    let name = spec.name.to_string();
    let problems = match &spec.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut problems: Vec<Problem> = command_line(&name, command, args, settings)
                .err()
                .into_iter()
                .collect();
            problems.extend(environment(&name, env, settings));
            if let Some(dir) = cwd
                && !settings
                    .mcp_cwds
                    .iter()
                    .any(|d| d.trim_end_matches('/') == dir.trim_end_matches('/'))
            {
                problems.push(Problem::at(
                    &name,
                    "cwd",
                    format!(
                        "MCP server `{name}`: the working directory `{dir}` is not allowed; the \
                         operator lists the directories a server may run in in TROUPE_MCP_CWDS \
                         (without `cwd` it runs in an empty directory of its own)"
                    ),
                ));
            }
            problems
        }
        Transport::Http { url } if settings.mcp_urls.iter().any(|p| under(url, p)) => Vec::new(),
        Transport::Http { url } => vec![Problem::at(
            &name,
            "url",
            format!(
                "MCP server `{name}`: the URL `{url}` is not allowed; the operator lists the URL \
                 prefixes MCP servers may live under in TROUPE_MCP_URLS"
            ),
        )],
    };
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// An entry of `TROUPE_MCP_COMMANDS`: the program, then its arguments, split at spaces.
fn entry_words(entry: &str) -> Vec<&str> {
    entry.split_whitespace().collect()
}

/// Whether `command` with `args` is a command line the operator listed, word for word.
fn command_line(
    name: &str,
    command: &str,
    args: &[String],
    settings: &ToolSettings,
) -> Result<(), Problem> {
    let lines: Vec<Vec<&str>> = settings
        .mcp_commands
        .iter()
        .map(|e| entry_words(e))
        .filter(|w| w.first() == Some(&command))
        .collect();
    if lines.iter().any(|w| w[1..] == *args) {
        return Ok(());
    }
    let wanted = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    if lines.is_empty() {
        return Err(Problem::at(
            name,
            "command",
            format!(
                "MCP server `{name}`: the command `{command}` is not allowed; the operator lists \
                 the command lines MCP servers may run, program and arguments, in \
                 TROUPE_MCP_COMMANDS (here: `{wanted}`)"
            ),
        ));
    }
    let listed: Vec<String> = lines.iter().map(|w| format!("`{}`", w.join(" "))).collect();
    Err(Problem::at(
        name,
        "args",
        format!(
            "MCP server `{name}`: `{command}` may run only with the arguments the operator wrote \
             in TROUPE_MCP_COMMANDS ({}), not `{wanted}`: arguments can name the code a program \
             runs, so they are part of what the operator allows",
            listed.join(", ")
        ),
    ))
}

/// A refusal for each variable of `env` the floor refuses or the operator did not list.
fn environment(
    name: &str,
    env: &BTreeMap<String, String>,
    settings: &ToolSettings,
) -> Vec<Problem> {
    env.keys()
        .filter_map(|var| {
            let why = match env_floor(var) {
                Some(why) => why.to_string(),
                None if settings.mcp_env.iter().any(|v| v == var) => return None,
                None => "is not allowed; the operator lists the variables a character may set \
                         in TROUPE_MCP_ENV"
                    .to_string(),
            };
            let shown: String = var.escape_default().to_string();
            Some(Problem::at(
                name,
                &format!("env.{shown}"),
                format!("MCP server `{name}`: the environment variable `{shown}` {why}"),
            ))
        })
        .collect()
}

/// The entries of `TROUPE_MCP_ENV` the floor refuses anyway: the start log says so once.
pub fn floor_in_allow_list(settings: &ToolSettings) -> Vec<&str> {
    settings
        .mcp_env
        .iter()
        .map(String::as_str)
        .filter(|v| env_floor(v).is_some())
        .collect()
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
            // `builtin` is read by `tools::builtin`: which of troupe's own tools are on;
            // `dm` by `access::rules`: who is offered them in a DM (issue 44).
            if !matches!(
                key.as_str(),
                "groups" | "rooms" | "allow" | "builtin" | "dm"
            ) {
                problems.push(format!(
                    "settings.troupe.tools.{key}: unknown field; use groups, rooms, allow, builtin or dm"
                ));
            }
        }
        match obj.get("dm") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "everyone" || s == "trusted" => {}
            Some(_) => problems.push(
                "settings.troupe.tools.dm: expected \"everyone\" or \"trusted\" (the default)"
                    .into(),
            ),
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

    fn refusals(raw: Value, settings: &ToolSettings) -> Vec<Problem> {
        super::super::servers::servers_of(&raw)
            .specs
            .iter()
            .flat_map(|s| permitted(s, settings).err().unwrap_or_default())
            .collect()
    }

    #[test]
    fn refusals_name_the_variable() {
        let raw = json!({"settings": {"mcp": {"servers": {
            "s": {"type": "stdio", "command": "/bin/sh"},
            "h": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
        }}}});
        let errors = refusals(raw.clone(), &ToolSettings::default());
        assert!(
            errors
                .iter()
                .any(|e| e.message.contains("TROUPE_MCP_COMMANDS")
                    && e.field == "settings.mcp.servers.s.command")
        );
        assert!(
            errors.iter().any(|e| e.message.contains("TROUPE_MCP_URLS")
                && e.field == "settings.mcp.servers.h.url")
        );
        let settings = ToolSettings {
            mcp_commands: vec!["/bin/sh".into()],
            mcp_urls: vec!["http://127.0.0.1:9/".into()],
            ..ToolSettings::default()
        };
        assert!(refusals(raw, &settings).is_empty());
    }

    #[test]
    fn arguments_are_the_operators_to_write() {
        let settings = ToolSettings {
            mcp_commands: vec![
                "/usr/bin/python3 /srv/mcp/server.py stdio".into(),
                "/usr/local/bin/mcp-files".into(),
            ],
            ..ToolSettings::default()
        };
        let server = |command: &str, args: Value| json!({"settings": {"mcp": {"servers": {"s": {"command": command, "args": args}}}}});
        let ok = |raw| refusals(raw, &settings).is_empty();
        assert!(ok(server(
            "/usr/bin/python3",
            json!(["/srv/mcp/server.py", "stdio"])
        )));
        assert!(ok(server("/usr/local/bin/mcp-files", json!([]))));
        for (command, args) in [
            (
                "/usr/bin/python3",
                json!(["-c", "import os; os.system('id')"]),
            ),
            ("/usr/bin/python3", json!(["/srv/mcp/server.py"])),
            (
                "/usr/bin/python3",
                json!(["/srv/mcp/server.py", "stdio", "-x"]),
            ),
            ("/usr/bin/python3", json!([])),
            ("/usr/local/bin/mcp-files", json!(["/"])),
        ] {
            let errors = refusals(server(command, args.clone()), &settings);
            assert_eq!(errors.len(), 1, "{command} {args}");
            assert_eq!(errors[0].field, "settings.mcp.servers.s.args");
            assert!(
                errors[0].message.contains("TROUPE_MCP_COMMANDS"),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn environment_variables_need_the_operator_and_the_floor_holds() {
        let settings = ToolSettings {
            mcp_commands: vec!["/w".into()],
            mcp_env: vec!["LOG_LEVEL".into(), "BASH_ENV".into(), "https_proxy".into()],
            ..ToolSettings::default()
        };
        let with_env = |env: Value| json!({"settings": {"mcp": {"servers": {"s": {"command": "/w", "env": env}}}}});
        assert!(refusals(with_env(json!({"LOG_LEVEL": "warn"})), &settings).is_empty());
        for var in [
            "BASH_ENV",
            "ENV",
            "NODE_OPTIONS",
            "PYTHONWARNINGS",
            "PYTHONPATH",
            "BROWSER",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "PATH",
            "HOME",
            "IFS",
            "PERL5OPT",
            "RUBYOPT",
            "GIT_SSH_COMMAND",
            "NPM_CONFIG_REGISTRY",
            "https_proxy",
            "BASH_FUNC_ls%%",
            "A=B",
            "",
            "OTHER",
        ] {
            let errors = refusals(with_env(json!({var: "x"})), &settings);
            assert_eq!(errors.len(), 1, "{var}: {errors:?}");
            assert!(
                errors[0].field.starts_with("settings.mcp.servers.s.env."),
                "{errors:?}"
            );
            assert!(
                errors[0].message.contains("TROUPE_MCP_ENV")
                    || errors[0].message.contains("variable name")
            );
        }
        assert_eq!(floor_in_allow_list(&settings), ["BASH_ENV", "https_proxy"]);
    }

    #[test]
    fn a_working_directory_needs_the_operator() {
        let raw = json!({"settings": {"mcp": {"servers": {"s": {"command": "/w", "cwd": "/srv/data/"}}}}});
        let mut settings = ToolSettings {
            mcp_commands: vec!["/w".into()],
            ..ToolSettings::default()
        };
        let errors = refusals(raw.clone(), &settings);
        assert_eq!(errors[0].field, "settings.mcp.servers.s.cwd");
        assert!(errors[0].message.contains("TROUPE_MCP_CWDS"));
        settings.mcp_cwds = vec!["/srv/data".into()];
        assert!(refusals(raw, &settings).is_empty());
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
