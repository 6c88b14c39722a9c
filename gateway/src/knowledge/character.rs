//! A character's `knowledge` entries (texts, files, directories), ingested for the whole
//! agent at each load and reconciled with the file: the documents a previous version of the
//! file had and this one no longer has are removed.

use std::collections::HashSet;

use troupe_connectors::AgentId;

use super::{Ingested, Knowledge, KnowledgeError, Origin, files_under};
use crate::persona::{KnowledgeEntry, Persona};

impl Knowledge {
    /// Ingests a character's `knowledge` entries (strings, files, directories) for the
    /// whole agent, and removes the documents a previous version of the file had and this
    /// one no longer has. Idempotent: unchanged content is found by its hash. Problems are
    /// logged; the persona runs without the entries that failed.
    pub async fn load_character(&self, persona: &Persona) {
        let agent = &persona.id;
        let file = persona
            .source
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| persona.source.display().to_string());
        let mut kept = Kept::default();
        for (i, entry) in persona.knowledge().iter().enumerate() {
            self.ingest_entry(agent, (&file, i), entry, &mut kept).await;
        }
        // After a storage failure, an entry missing from `kept` may still be in the file.
        if kept.storage_failed {
            return;
        }
        self.remove_stale(agent, &kept.ids).await;
        self.after_write().await;
    }

    /// Ingests entry `i` of the character file `file`: a text, a file, or every file
    /// under a directory.
    async fn ingest_entry(
        &self,
        agent: &AgentId,
        (file, i): (&str, usize),
        entry: &KnowledgeEntry,
        kept: &mut Kept,
    ) {
        match entry {
            KnowledgeEntry::Text(text) => {
                let source = format!("{file} knowledge[{i}]");
                let result = self
                    .ingest_from(
                        Origin::Character,
                        agent,
                        None,
                        &source,
                        Some("text/plain"),
                        text.as_bytes(),
                    )
                    .await;
                kept.note(agent, result, &source);
            }
            KnowledgeEntry::File { path, .. } => {
                let result = self.ingest_file(Origin::Character, agent, None, path).await;
                kept.note(agent, result, &path.display().to_string());
            }
            KnowledgeEntry::Directory { path, .. } => {
                // Many files: read, stored and embedded side by side (`pipeline`).
                let files = files_under(path);
                let run = self
                    .ingest_files(Origin::Character, agent, None, &files, |file, result| {
                        kept.note(agent, result, &file.display().to_string())
                    })
                    .await;
                if let Err(e) = run {
                    kept.note(agent, Err(e), &path.display().to_string());
                }
            }
        }
    }

    /// Removes the agent's character documents that are not in `keep`: entries a previous
    /// version of the character file had and this one no longer has.
    async fn remove_stale(&self, agent: &AgentId, keep: &HashSet<String>) {
        let store = &self.inner.store;
        match store
            .document_ids_by_origin(agent, Origin::Character.as_str())
            .await
        {
            Ok(ids) => {
                for id in ids.into_iter().filter(|id| !keep.contains(id)) {
                    match store.delete_document(agent, &id).await {
                        Ok(_) => tracing::info!(persona = %agent, document = %id,
                            "knowledge entry no longer in the character file; document removed"),
                        Err(e) => tracing::error!(persona = %agent, document = %id, error = %e,
                            "could not remove a stale knowledge document"),
                    }
                }
            }
            Err(e) => {
                tracing::error!(persona = %agent, error = %e, "could not list knowledge documents")
            }
        }
    }
}

/// What a character load has ingested so far: the documents its entries are now, and
/// whether storing one failed.
#[derive(Default)]
struct Kept {
    ids: HashSet<String>,
    storage_failed: bool,
}

impl Kept {
    /// Takes in the outcome of ingesting `what`; a problem is logged.
    fn note(&mut self, agent: &AgentId, result: Result<Ingested, KnowledgeError>, what: &str) {
        match result {
            Ok(done) => {
                self.ids.insert(done.document_id);
            }
            Err(KnowledgeError::Storage(e)) => {
                self.storage_failed = true;
                tracing::error!(persona = %agent, %what, error = %e, "could not store a knowledge entry");
            }
            Err(e) => {
                tracing::warn!(persona = %agent, %what, "knowledge entry skipped: {e}")
            }
        }
    }
}
