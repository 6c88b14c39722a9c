//! A character's MCP servers, parsed at the edge: `settings.mcp.servers.<name>` in
//! elizaOS plugin-mcp's shape, unchanged (`type` `stdio`, `streamable-http`/`http` or
//! `sse`; `command`, `args`, `env`, `cwd` for stdio; `url` for HTTP; `timeout` in seconds;
//! `name` and `description` are display text). What a file says here is a request, not a
//! right: `policy` decides whether the operator lets it run. `headers` is not read: troupe
//! sends no header a file names (a warning says so), so a file can neither add a
//! credential to a request nor have one filled in from the environment.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// A tool call's deadline when the server names none (elizaOS plugin-mcp's default too).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A server's name: the part before the dot of its tools' names (`weather.forecast`).
/// Letters, digits, `_` and `-`, so that `<server>.<tool>` splits one way only.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerName(String);

impl ServerName {
    pub fn parse(raw: &str) -> Result<ServerName, String> {
        let ok = !raw.is_empty()
            && raw.len() <= 32
            && raw
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if ok {
            Ok(ServerName(raw.to_string()))
        } else {
            Err(format!(
                "server name `{raw}`: use 1 to 32 letters, digits, `_` or `-`"
            ))
        }
    }

    #[cfg(test)]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ServerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One thing wrong with a server's entry, at the field an author would fix
/// (`settings.mcp.servers.files.env.BASH_ENV`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: String,
    pub message: String,
}

impl Problem {
    pub fn at(server: &str, field: &str, message: impl Into<String>) -> Problem {
        let base = format!("settings.mcp.servers.{server}");
        Problem {
            field: if field.is_empty() {
                base
            } else {
                format!("{base}.{field}")
            },
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// How troupe reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// The child's whole environment: nothing of the gateway's is inherited.
        env: BTreeMap<String, String>,
        /// Its working directory (`cwd`); `None`: an empty directory of its own.
        cwd: Option<String>,
    },
    /// Streamable HTTP (`streamable-http`, `http`). A server that only has the older SSE
    /// transport (`sse`) is reached the same way: the Streamable HTTP client falls back to
    /// the event stream a server answers with.
    Http { url: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub name: ServerName,
    pub transport: Transport,
    /// One tool call's deadline (`timeout`, seconds).
    pub timeout: Duration,
}

/// A character's servers as read: the ones to consider, the entries that could not be read
/// (errors), and what is read but not used (warnings).
#[derive(Debug, Default)]
pub struct Servers {
    pub specs: Vec<ServerSpec>,
    pub problems: Vec<Problem>,
    pub notes: Vec<Problem>,
}

/// The servers of a character (`raw` is the merged character JSON).
pub fn servers_of(raw: &Value) -> Servers {
    let mut out = Servers::default();
    let Some(mcp) = raw.pointer("/settings/mcp") else {
        return out;
    };
    let Some(servers) = mcp.get("servers").and_then(Value::as_object) else {
        if !mcp.is_null() {
            out.problems.push(Problem {
                field: "settings.mcp.servers".into(),
                message: "expected an object of servers by name".into(),
            });
        }
        return out;
    };
    for (name, entry) in servers {
        if entry.get("headers").is_some_and(|h| !h.is_null()) {
            out.notes.push(Problem::at(
                name,
                "headers",
                "not sent: troupe sends no header a character file names (nor fills one in from \
                 the environment); a server that needs a credential is reached through a proxy \
                 of the operator's, listed in TROUPE_MCP_URLS",
            ));
        }
        match server(name, entry) {
            Ok(spec) => out.specs.push(spec),
            Err((field, e)) => out.problems.push(Problem::at(name, field, e)),
        }
    }
    out
}

/// One entry; an error names the field it is in (`""` for the entry as a whole).
fn server(name: &str, entry: &Value) -> Result<ServerSpec, (&'static str, String)> {
    let whole = |e: String| ("", e);
    let name = ServerName::parse(name).map_err(whole)?;
    let obj = entry
        .as_object()
        .ok_or_else(|| whole("expected an object".into()))?;
    let text = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_string);
    let kind = text("type").unwrap_or_else(|| {
        // elizaOS infers the type from what is there.
        if obj.contains_key("command") {
            "stdio"
        } else {
            "streamable-http"
        }
        .to_string()
    });
    let timeout = match obj.get("timeout") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT,
        Some(v) => match v.as_f64() {
            Some(secs) if secs > 0.0 && secs <= 3600.0 => Duration::from_secs_f64(secs),
            _ => {
                return Err((
                    "timeout",
                    "expected seconds, a number above 0 and at most 3600".into(),
                ));
            }
        },
    };
    let transport = match kind.as_str() {
        "stdio" => stdio(obj, &text)?,
        "streamable-http" | "http" | "sse" => {
            let url = text("url").ok_or_else(|| whole("an HTTP server needs `url`".into()))?;
            Transport::Http { url }
        }
        other => {
            return Err((
                "type",
                format!("`{other}`: use stdio, streamable-http, http or sse"),
            ));
        }
    };
    Ok(ServerSpec {
        name,
        transport,
        timeout,
    })
}

/// A stdio server's `command`, `args`, `env` and `cwd`, typed (not yet allowed: `policy`).
fn stdio(
    obj: &serde_json::Map<String, Value>,
    text: &dyn Fn(&str) -> Option<String>,
) -> Result<Transport, (&'static str, String)> {
    let command = text("command").ok_or(("", "a stdio server needs `command`".to_string()))?;
    let args = match obj.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| a.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or(("args", "expected a list of strings".to_string()))?,
        Some(_) => return Err(("args", "expected a list of strings".into())),
    };
    let env = match obj.get("env") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(vars)) => vars
            .iter()
            .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
            .collect::<Option<BTreeMap<_, _>>>()
            .ok_or(("env", "expected an object of strings".to_string()))?,
        Some(_) => return Err(("env", "expected an object of strings".into())),
    };
    let cwd = match obj.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(dir)) => Some(dir.clone()),
        Some(_) => return Err(("cwd", "expected a directory's path".into())),
    };
    Ok(Transport::Stdio {
        command,
        args,
        env,
        cwd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_eliza_shape() {
        let raw = json!({"settings": {"mcp": {"servers": {
            "files": {"type": "stdio", "name": "Files", "command": "/usr/bin/mcp-files", "args": ["-v"], "env": {"A": "1"}, "timeout": 5},
            "web": {"type": "sse", "url": "https://mcp.example.org/sse"},
            "bad name": {"type": "stdio", "command": "x"},
            "nocmd": {"type": "stdio"},
        }}}});
        let Servers {
            specs, problems, ..
        } = servers_of(&raw);
        assert_eq!(specs.len(), 2);
        let files = specs.iter().find(|s| s.name.as_str() == "files").unwrap();
        assert_eq!(files.timeout, Duration::from_secs(5));
        assert!(
            matches!(&files.transport, Transport::Stdio { command, args, env, cwd: None }
            if command == "/usr/bin/mcp-files" && args == &["-v"] && env["A"] == "1")
        );
        let web = specs.iter().find(|s| s.name.as_str() == "web").unwrap();
        assert_eq!(web.timeout, DEFAULT_TIMEOUT);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.field == "settings.mcp.servers.nocmd")
        );
    }

    #[test]
    fn problems_name_the_field_and_headers_are_not_read() {
        let raw = json!({"settings": {"mcp": {"servers": {
            "a": {"type": "stdio", "command": "/x", "env": {"K": 1}},
            "b": {"type": "stdio", "command": "/x", "cwd": 3},
            "c": {"type": "http", "url": "https://m.example/mcp", "headers": {"Authorization": "Bearer x"}},
        }}}});
        let servers = servers_of(&raw);
        let fields: Vec<&str> = servers.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["settings.mcp.servers.a.env", "settings.mcp.servers.b.cwd"]
        );
        assert_eq!(servers.specs.len(), 1, "c is read, its headers are not");
        assert_eq!(servers.notes[0].field, "settings.mcp.servers.c.headers");
    }

    #[test]
    fn nothing_configured_is_nothing() {
        let servers = servers_of(&json!({"settings": {}}));
        assert!(servers.specs.is_empty() && servers.problems.is_empty());
    }
}
