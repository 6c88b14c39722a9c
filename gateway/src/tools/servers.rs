//! A character's MCP servers, parsed at the edge: `settings.mcp.servers.<name>` in
//! elizaOS plugin-mcp's shape, unchanged (`type` `stdio`, `streamable-http`/`http` or
//! `sse`; `command`, `args`, `env` for stdio; `url` for HTTP; `timeout` in seconds; `name`
//! and `description` are display text). What a file says here is a request, not a right:
//! `policy` decides whether the operator lets it run.

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

/// How troupe reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// The child's whole environment: nothing of the gateway's is inherited.
        env: BTreeMap<String, String>,
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

/// The servers of a character (`raw` is the merged character JSON), and one message per
/// entry that could not be read (`settings.mcp.servers.<name>: …`).
pub fn servers_of(raw: &Value) -> (Vec<ServerSpec>, Vec<String>) {
    let mut specs = Vec::new();
    let mut problems = Vec::new();
    let Some(mcp) = raw.pointer("/settings/mcp") else {
        return (specs, problems);
    };
    let Some(servers) = mcp.get("servers").and_then(Value::as_object) else {
        if !mcp.is_null() {
            problems.push("settings.mcp.servers: expected an object of servers by name".into());
        }
        return (specs, problems);
    };
    for (name, entry) in servers {
        match server(name, entry) {
            Ok(spec) => specs.push(spec),
            Err(e) => problems.push(format!("settings.mcp.servers.{name}: {e}")),
        }
    }
    (specs, problems)
}

fn server(name: &str, entry: &Value) -> Result<ServerSpec, String> {
    let name = ServerName::parse(name)?;
    let obj = entry.as_object().ok_or("expected an object")?;
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
            _ => return Err("timeout: expected seconds, a number above 0 and at most 3600".into()),
        },
    };
    let transport = match kind.as_str() {
        "stdio" => {
            let command = text("command").ok_or("a stdio server needs `command`")?;
            let args = match obj.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|a| a.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or("args: expected a list of strings")?,
                Some(_) => return Err("args: expected a list of strings".into()),
            };
            let env = match obj.get("env") {
                None | Some(Value::Null) => BTreeMap::new(),
                Some(Value::Object(vars)) => vars
                    .iter()
                    .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect::<Option<BTreeMap<_, _>>>()
                    .ok_or("env: expected an object of strings")?,
                Some(_) => return Err("env: expected an object of strings".into()),
            };
            Transport::Stdio { command, args, env }
        }
        "streamable-http" | "http" | "sse" => {
            let url = text("url").ok_or("an HTTP server needs `url`")?;
            Transport::Http { url }
        }
        other => {
            return Err(format!(
                "type `{other}`: use stdio, streamable-http, http or sse"
            ));
        }
    };
    Ok(ServerSpec {
        name,
        transport,
        timeout,
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
        let (specs, problems) = servers_of(&raw);
        assert_eq!(specs.len(), 2);
        let files = specs.iter().find(|s| s.name.as_str() == "files").unwrap();
        assert_eq!(files.timeout, Duration::from_secs(5));
        assert!(
            matches!(&files.transport, Transport::Stdio { command, args, env }
            if command == "/usr/bin/mcp-files" && args == &["-v"] && env["A"] == "1")
        );
        let web = specs.iter().find(|s| s.name.as_str() == "web").unwrap();
        assert_eq!(web.timeout, DEFAULT_TIMEOUT);
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn nothing_configured_is_nothing() {
        let (specs, problems) = servers_of(&json!({"settings": {}}));
        assert!(specs.is_empty() && problems.is_empty());
    }
}
