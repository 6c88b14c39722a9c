//! The connector registry: which connector speaks for which persona on which platform.
//!
//! The topology (`app`) fills it in as connectors start, and empties a persona's entries as
//! they stop. Everyone who must reach a platform reads it: the outbox to deliver a reply,
//! the agent for what a platform knows beyond the message (the sender's rights, the thread
//! above it, the typing indicator, the troupe's bot ids), the HTTP API for webhooks and
//! `/readyz`. It holds connectors and nothing else: it never sends, and it does not know
//! its readers. Building a connector from settings is `troupe_connectors::registry`'s;
//! this registry only knows the ones running.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use troupe_connectors::sync::RwLocked;
use troupe_connectors::{AgentId, Connector, Platform};

type ByAgentAndPlatform = HashMap<(AgentId, Platform), Arc<dyn Connector>>;

/// The running connectors, by agent and platform. A cheap-to-clone handle on one shared
/// map: every clone sees what the topology inserts.
#[derive(Clone, Default)]
pub struct Connectors {
    inner: Arc<RwLock<ByAgentAndPlatform>>,
}

impl Connectors {
    /// Registers `connector` for `agent_id` on its platform, replacing any before it.
    pub fn insert(&self, agent_id: &AgentId, connector: Arc<dyn Connector>) {
        let platform = connector.platform();
        self.inner
            .write_locked()
            .insert((agent_id.clone(), platform), connector);
    }

    /// Forgets every connector of `agent_id`.
    pub fn remove_agent(&self, agent_id: &AgentId) {
        self.inner.write_locked().retain(|(a, _), _| a != agent_id);
    }

    /// The connector of `agent_id` on `platform`, when one is running.
    pub fn get(&self, agent_id: &AgentId, platform: Platform) -> Option<Arc<dyn Connector>> {
        self.inner
            .read_locked()
            .get(&(agent_id.clone(), platform))
            .cloned()
    }

    /// Every connector, for health checks.
    pub fn all(&self) -> Vec<(AgentId, Arc<dyn Connector>)> {
        self.inner
            .read_locked()
            .iter()
            .map(|((a, _), c)| (a.clone(), c.clone()))
            .collect()
    }
}
