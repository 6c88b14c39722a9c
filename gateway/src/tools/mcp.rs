//! One connection to an MCP server, through the official Rust SDK (`rmcp`): a child process
//! over stdio, or Streamable HTTP. It owns starting the server the way the policy says
//! (a cleared environment but for the variables the operator let the file set, the `cwd`
//! the operator allowed or else an empty private directory of its own, killed with the
//! gateway), keeping its tool list current (`notifications/tools/list_changed`), and one
//! bounded call.
//!
//! Why not the personas directory as the working directory (as before issue 43): whoever
//! writes character files writes there, and programs look for code in their working
//! directory (`python3 -m NAME` imports a module file from it, `npx` runs a package's binary
//! from its `node_modules`), so a server started there could run a file an author put
//! next to the characters.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use troupe_connectors::sync::RwLocked;

use super::servers::{ServerName, ServerSpec, Transport};

/// One tool as its server describes it.
#[derive(Debug, Clone)]
pub struct McpTool {
    pub name: String,
    pub description: String,
    pub schema: Value,
    /// The server's `destructiveHint`: the tool may destroy or change what it touches.
    pub destructive: bool,
}

type ToolList = Arc<RwLock<Arc<Vec<McpTool>>>>;

/// Keeps the tool list current when the server says it changed.
#[derive(Clone)]
struct Listener {
    server: ServerName,
    tools: ToolList,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        match context.peer.list_all_tools().await {
            Ok(listed) => {
                let tools = convert(listed);
                tracing::info!(server = %self.server, tools = tools.len(), "MCP server's tools changed");
                *self.tools.write_locked() = Arc::new(tools);
            }
            Err(e) => {
                tracing::warn!(server = %self.server, error = %e, "could not list the MCP server's changed tools")
            }
        }
    }
}

fn convert(listed: Vec<rmcp::model::Tool>) -> Vec<McpTool> {
    listed
        .into_iter()
        .map(|t| McpTool {
            name: t.name.to_string(),
            description: t.description.map(|d| d.to_string()).unwrap_or_default(),
            schema: Value::Object((*t.input_schema).clone()),
            destructive: t
                .annotations
                .as_ref()
                .and_then(|a| a.destructive_hint)
                .unwrap_or(false),
        })
        .collect()
}

/// A running MCP server. Dropping it closes the connection; a child process is killed.
pub struct Connection {
    pub spec: ServerSpec,
    service: RunningService<RoleClient, Listener>,
    tools: ToolList,
    /// A stdio server's own empty working directory, removed with the connection.
    _workdir: Option<tempfile::TempDir>,
}

/// How a call ended, short of a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    Timeout(Duration),
    Failed(String),
}

impl Connection {
    /// Starts (stdio) or reaches (HTTP) the server and lists its tools, within its timeout.
    pub async fn connect(spec: ServerSpec) -> Result<Connection, String> {
        let tools: ToolList = Arc::default();
        let listener = Listener {
            server: spec.name.clone(),
            tools: tools.clone(),
        };
        // Starting a server (a Python or Node process, say) may take longer than one call:
        // the start gets at least the default call timeout.
        let deadline = spec.timeout.max(super::servers::DEFAULT_TIMEOUT);
        let mut workdir = None;
        let service = match &spec.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let dir = match cwd {
                    Some(dir) => std::path::PathBuf::from(dir),
                    None => {
                        let own = tempfile::Builder::new()
                            .prefix("troupe-mcp-")
                            .tempdir()
                            .map_err(|e| format!("cannot make its working directory: {e}"))?;
                        workdir.insert(own).path().to_path_buf()
                    }
                };
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .env_clear()
                    .envs(env)
                    .current_dir(dir)
                    .kill_on_drop(true);
                // Killed with the gateway even when the gateway is killed outright: the
                // kernel sends the child SIGKILL when its parent thread dies.
                // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
                unsafe {
                    cmd.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                tokio::time::timeout(deadline, listener.serve(transport)).await
            }
            Transport::Http { url } => {
                troupe_connectors::tls::install_crypto_provider();
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
                tokio::time::timeout(deadline, listener.serve(transport)).await
            }
        };
        let service = match service {
            Err(_) => return Err(format!("no answer to initialize within {deadline:?}")),
            Ok(Err(e)) => return Err(format!("initialize failed: {e}")),
            Ok(Ok(s)) => s,
        };
        let listed = tokio::time::timeout(deadline, service.list_all_tools())
            .await
            .map_err(|_| format!("no answer to tools/list within {deadline:?}"))?
            .map_err(|e| format!("tools/list failed: {e}"))?;
        *tools.write_locked() = Arc::new(convert(listed));
        Ok(Connection {
            spec,
            service,
            tools,
            _workdir: workdir,
        })
    }

    /// The server's tools as last listed.
    pub fn tools(&self) -> Arc<Vec<McpTool>> {
        self.tools.read_locked().clone()
    }

    /// Calls `tool` with `arguments`, within the server's timeout. The result's text parts,
    /// joined; an error result (`isError`) is an `Err` with its text.
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<String, CallError> {
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(args) = arguments {
            params = params.with_arguments(args);
        }
        let deadline = self.spec.timeout;
        let result = tokio::time::timeout(deadline, self.service.call_tool(params))
            .await
            .map_err(|_| CallError::Timeout(deadline))?
            .map_err(|e| CallError::Failed(e.to_string()))?;
        let mut text = String::new();
        for block in &result.content {
            let part = match block {
                ContentBlock::Text(t) => t.text.as_str(),
                ContentBlock::Image(_) => "[an image]",
                ContentBlock::Audio(_) => "[audio]",
                _ => "[a resource]",
            };
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(part);
        }
        if text.is_empty()
            && let Some(structured) = &result.structured_content
        {
            text = structured.to_string();
        }
        if result.is_error == Some(true) {
            return Err(CallError::Failed(text));
        }
        Ok(text)
    }
}
