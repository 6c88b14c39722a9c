//! Tool settings (issue 33, docs/tools.md): which MCP servers the operator allows
//! (`TROUPE_MCP_COMMANDS`, `TROUPE_MCP_URLS`), which environment variables and working
//! directories their characters may give them (`TROUPE_MCP_ENV`, `TROUPE_MCP_CWDS`, issue
//! 43), and how far a turn with tools may go
//! (`TROUPE_TOOL_MAX_STEPS`, `TROUPE_TOOL_MAX_OUTPUT_BYTES`), and whether the built-in
//! `web.fetch` may run at all (`TROUPE_TOOL_WEB_FETCH`). A character file names its servers
//! and built-ins, but only these settings let one run: a file alone never starts a program
//! nor sends the gateway fetching.

use super::{FileConfig, Layered};

/// Default `TROUPE_TOOL_MAX_OUTPUT_BYTES`: 64 KiB of one tool's result reach the model, about
/// 16k tokens, enough for a page of data and far from a context window.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSettings {
    /// `TROUPE_MCP_COMMANDS`, empty by default: the command lines a stdio MCP server may
    /// run, comma-separated; each is a program (compared with a server's `command` exactly:
    /// write absolute paths) and the arguments it takes, separated by spaces. A server's
    /// `args` must equal an entry's exactly (`tools::policy`): an interpreter's arguments
    /// can name any code, so they are the operator's to write, never the file's.
    pub mcp_commands: Vec<String>,
    /// `TROUPE_MCP_ENV`, empty by default: the environment variable names a character may
    /// set in a stdio server's `env`, comma-separated. The variables that make a program
    /// load code (`BASH_ENV`, `LD_PRELOAD`, `NODE_OPTIONS`, `PYTHON*`…) are refused even
    /// when listed (`tools::policy`).
    pub mcp_env: Vec<String>,
    /// `TROUPE_MCP_CWDS`, empty by default: directories a character may name as a stdio
    /// server's `cwd`, comma-separated absolute paths, compared as written. Without `cwd`
    /// a server runs in an empty directory of its own.
    pub mcp_cwds: Vec<String>,
    /// `TROUPE_MCP_URLS`, empty by default: the URL prefixes a Streamable HTTP (or SSE) MCP
    /// server may live under, comma-separated (`https://mcp.example.org/`).
    pub mcp_urls: Vec<String>,
    /// `TROUPE_TOOL_MAX_STEPS`, default 4: model calls that may ask for tools in one turn;
    /// at the cap the model is called once more without tools, for an answer.
    pub max_steps: u32,
    /// `TROUPE_TOOL_MAX_OUTPUT_BYTES`, default 64 KiB: one tool result's size in the prompt.
    pub max_output_bytes: usize,
    /// `TROUPE_TOOL_WEB_FETCH`, off by default: whether a persona that turns on the built-in
    /// `web.fetch` gets it. A model choosing URLs to fetch is a stranger choosing them, so
    /// the operator decides; the fetch policy (`TROUPE_FETCH_ALLOW`…) applies either way.
    pub web_fetch: bool,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            mcp_commands: Vec::new(),
            mcp_env: Vec::new(),
            mcp_cwds: Vec::new(),
            mcp_urls: Vec::new(),
            max_steps: 4,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            web_fetch: false,
        }
    }
}

fn list(raw: Option<String>) -> Vec<String> {
    raw.map(|r| {
        r.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

pub(super) fn tool_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<ToolSettings> {
    let mcp_urls = list(layered.string("TROUPE_MCP_URLS", file.mcp_urls.take()));
    for url in &mcp_urls {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            anyhow::bail!("TROUPE_MCP_URLS: `{url}` is not an http:// or https:// URL prefix");
        }
    }
    let mcp_cwds = list(layered.string("TROUPE_MCP_CWDS", file.mcp_cwds.take()));
    if let Some(dir) = mcp_cwds.iter().find(|d| !d.starts_with('/')) {
        anyhow::bail!("TROUPE_MCP_CWDS: `{dir}` is not an absolute path");
    }
    Ok(ToolSettings {
        mcp_commands: list(layered.string("TROUPE_MCP_COMMANDS", file.mcp_commands.take())),
        mcp_env: list(layered.string("TROUPE_MCP_ENV", file.mcp_env.take())),
        mcp_cwds,
        mcp_urls,
        max_steps: layered
            .parse("TROUPE_TOOL_MAX_STEPS", file.tool_max_steps, 4)?
            .max(1),
        max_output_bytes: layered
            .parse(
                "TROUPE_TOOL_MAX_OUTPUT_BYTES",
                file.tool_max_output_bytes,
                DEFAULT_MAX_OUTPUT_BYTES,
            )?
            .max(256),
        web_fetch: layered.parse("TROUPE_TOOL_WEB_FETCH", file.tool_web_fetch, false)?,
    })
}
