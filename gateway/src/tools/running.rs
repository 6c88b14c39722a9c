//! A toolbox's MCP servers, connected in the background (issue 43, finding 7): a server
//! that is slow to answer `initialize`, or never answers, must not hold the gateway's start
//! (`/healthz`), nor the other personas, nor this persona's other tools. Each allowed server
//! is started on a task of its own; until it answers it is `starting`, then `running` with
//! its tools, or `failed` with why. A server the operator's policy refused is `refused`.
//! The agent offers the tools of the running servers only; `/tools`, the why panel and
//! `GET /api/agents/{agent}` say which are missing and why.
//!
//! The tasks end with the toolbox: dropping it (a reload, a removed persona, shutdown)
//! aborts a start still under way, and its child process is killed with it (`mcp`'s
//! `kill_on_drop`); a running server's connection is dropped with its slot.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use troupe_connectors::AgentId;
use troupe_connectors::sync::RwLocked;

use super::mcp::Connection;
use super::servers::{ServerName, ServerSpec};

/// Where one server is.
enum State {
    Starting,
    Running(Arc<Connection>),
    Failed(String),
    Refused(String),
}

/// One server as the console, `/tools` and the why panel show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// `starting`, `running`, `failed` or `refused`.
    pub state: &'static str,
    /// The tools it lists (running).
    pub tools: usize,
    /// Why it failed or was refused (it may name the operator's commands: shown to the
    /// operator, in the why panel and the log, never in `/tools` or `GET /api/agents`).
    #[serde(skip)]
    pub detail: Option<String>,
}

/// The servers of one toolbox.
pub(super) struct Running {
    slots: BTreeMap<ServerName, Arc<RwLock<State>>>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Running {
    /// Starts each of `allowed` on a task of its own; `refused` are kept with their reason.
    pub(super) fn start(
        persona: &AgentId,
        allowed: Vec<ServerSpec>,
        refused: Vec<(ServerName, String)>,
    ) -> Running {
        let mut slots = BTreeMap::new();
        for (name, why) in refused {
            slots.insert(name, Arc::new(RwLock::new(State::Refused(why))));
        }
        let mut tasks = Vec::new();
        for spec in allowed {
            let slot = Arc::new(RwLock::new(State::Starting));
            slots.insert(spec.name.clone(), slot.clone());
            let persona = persona.clone();
            let task = tokio::spawn(async move {
                let name = spec.name.clone();
                let state = match Connection::connect(spec).await {
                    Ok(conn) => {
                        tracing::info!(persona = %persona, server = %name, tools = conn.tools().len(), "MCP server connected");
                        State::Running(Arc::new(conn))
                    }
                    Err(e) => {
                        tracing::error!(persona = %persona, server = %name, "MCP server not started: {e}");
                        State::Failed(e)
                    }
                };
                *slot.write_locked() = state;
            });
            tasks.push(task.abort_handle());
        }
        Running { slots, tasks }
    }

    /// The running servers' connections, by name.
    pub(super) fn connections(&self) -> Vec<(ServerName, Arc<Connection>)> {
        self.slots
            .iter()
            .filter_map(|(name, slot)| match &*slot.read_locked() {
                State::Running(conn) => Some((name.clone(), conn.clone())),
                _ => None,
            })
            .collect()
    }

    /// The connection of `name`, when it runs.
    pub(super) fn get(&self, name: &ServerName) -> Option<Arc<Connection>> {
        match &*self.slots.get(name)?.read_locked() {
            State::Running(conn) => Some(conn.clone()),
            _ => None,
        }
    }

    /// Every server, in name order.
    pub(super) fn status(&self) -> Vec<ServerStatus> {
        self.slots
            .iter()
            .map(|(name, slot)| {
                let (state, tools, detail) = match &*slot.read_locked() {
                    State::Starting => ("starting", 0, None),
                    State::Running(conn) => ("running", conn.tools().len(), None),
                    State::Failed(why) => ("failed", 0, Some(why.clone())),
                    State::Refused(why) => ("refused", 0, Some(why.clone())),
                };
                ServerStatus {
                    name: name.to_string(),
                    state,
                    tools,
                    detail,
                }
            })
            .collect()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
