//! Searching the knowledge: the query cut into plain terms, the BM25 ranking from the
//! keyword index, the cosine ranking from the vector index, their fusion (`fusion`), and
//! the top hits a prompt gets within its budget. Scoping holds here as everywhere: a room's
//! search sees that room's documents and the agent-wide ones, never another room's.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use troupe_connectors::{AgentId, RoomKey};

use super::{Embedder, Knowledge, KnowledgeError, Role, fusion};
use crate::storage::{Scope, ScoredChunk};

/// Candidates taken from each ranking before fusion, at least.
const FUSION_CANDIDATES: usize = 50;
/// Query words kept; a pasted paragraph should not become a 500-term OR.
const MAX_QUERY_TERMS: usize = 32;

/// One retrieved chunk. `score` is higher for better matches: BM25 (or Postgres' rank)
/// without an embedding model, the fusion score with one (`fusion`), the cosine for vectors alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    pub chunk_id: String,
    pub document_id: String,
    pub source: String,
    /// The chunk's position in its document, from 0 (the citation's "where").
    pub chunk: i64,
    pub text: String,
    pub score: f64,
}

impl From<ScoredChunk> for Hit {
    fn from(c: ScoredChunk) -> Self {
        Hit {
            chunk: chunk_position(&c.chunk_id),
            chunk_id: c.chunk_id,
            document_id: c.document_id,
            source: c.source,
            text: c.text,
            score: c.score,
        }
    }
}

/// Which rankings a search uses ([`Knowledge::search_ranked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// BM25 from the keyword index.
    Keywords,
    /// Cosine similarity to the query's vector.
    Vectors,
    /// Both, fused ([`fusion::DEFAULT`]).
    Hybrid,
}

/// A chunk id is `document id:index`; the index part, or -1 for an id of another shape.
fn chunk_position(chunk_id: &str) -> i64 {
    chunk_id
        .rsplit_once(':')
        .and_then(|(_, i)| i.parse().ok())
        .unwrap_or(-1)
}

impl Knowledge {
    /// The chunks that best match `query` among the agent's documents and, when `room` is
    /// given, that room's; best first. Hybrid when an embedding model is configured, else
    /// keywords alone.
    pub async fn search(
        &self,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        self.search_ranked(agent_id, room, query, limit, Ranking::Hybrid)
            .await
    }

    /// [`Knowledge::search`] by one ranking: keywords alone, vectors alone (empty without
    /// an embedding model), or both fused (keywords alone without an embedding model). The
    /// single rankings are for evaluation (gateway/tests/retrieval_quality.rs) and for
    /// seeing why a passage was found.
    pub async fn search_ranked(
        &self,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        query: &str,
        limit: usize,
        ranking: Ranking,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let scope = &Scope::new(room);
        let terms = query_terms(query);
        let embedder = match (self.embedder(), ranking) {
            (_, Ranking::Keywords) | (None, Ranking::Hybrid) => {
                return self.keyword_search(agent_id, scope, &terms, limit).await;
            }
            (None, Ranking::Vectors) => return Ok(Vec::new()),
            (Some(embedder), _) => embedder,
        };
        let candidates = match ranking {
            Ranking::Vectors => limit,
            _ => (limit * 4).max(FUSION_CANDIDATES),
        };
        let by_text = match ranking {
            Ranking::Vectors => Vec::new(),
            _ => {
                self.keyword_search(agent_id, scope, &terms, candidates)
                    .await?
            }
        };
        let by_vector = self
            .query_candidates(embedder, agent_id, scope, query, candidates)
            .await;
        let fused = match ranking {
            Ranking::Vectors => by_vector
                .into_iter()
                .map(|(id, score)| (id, f64::from(score)))
                .collect(),
            _ => fuse_rankings(&by_text, &by_vector, limit),
        };
        self.fused_hits(fused, by_text).await
    }

    /// The vector ranking for `query`: the `k` chunks nearest to its embedding. A query
    /// that cannot be embedded ranks nothing (logged): the keyword ranking still answers.
    async fn query_candidates(
        &self,
        embedder: &Embedder,
        agent_id: &AgentId,
        scope: &Scope,
        query: &str,
        k: usize,
    ) -> Vec<(String, f32)> {
        match self
            .embed_for(embedder, agent_id, &[query], Role::Query)
            .await
        {
            Ok(mut v) if !query.trim().is_empty() => {
                let q = v.pop().unwrap_or_default();
                self.dense_candidates(agent_id, scope, &q, k).await
            }
            Ok(_) => Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "could not embed the query; ranking by keywords only");
                Vec::new()
            }
        }
    }

    /// The fused ranking as hits, with their fused scores. The keyword hits carry their
    /// text already; the chunks found by vectors alone are read from the database.
    async fn fused_hits(
        &self,
        fused: Vec<(String, f64)>,
        by_text: Vec<Hit>,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        let mut rows: HashMap<String, Hit> = by_text
            .into_iter()
            .map(|c| (c.chunk_id.clone(), c))
            .collect();
        let missing: Vec<String> = fused
            .iter()
            .filter(|(id, _)| !rows.contains_key(id))
            .map(|(id, _)| id.clone())
            .collect();
        if !missing.is_empty() {
            for c in self.inner.store.chunks_by_id(&missing).await? {
                rows.insert(c.chunk_id.clone(), Hit::from(c));
            }
        }
        Ok(fused
            .into_iter()
            .filter_map(|(id, score)| rows.remove(&id).map(|c| Hit { score, ..c }))
            .collect())
    }

    /// The `k` chunks nearest to the query vector `q` through the vector index (built first
    /// when it is not yet): `(chunk id, cosine)`, best first. A failure is logged and gives
    /// none: the keyword ranking still answers.
    async fn dense_candidates(
        &self,
        agent_id: &AgentId,
        scope: &Scope,
        q: &[f32],
        k: usize,
    ) -> Vec<(String, f32)> {
        let Some(vectors) = self.vectors() else {
            return Vec::new();
        };
        let store = &self.inner.store;
        let found = async {
            if !vectors.is_built() {
                vectors.sync(store).await?;
            }
            vectors.nearest(store, agent_id, scope, q, k).await
        };
        match found.await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "vector search failed; ranking by keywords only");
                Vec::new()
            }
        }
    }

    /// The BM25 ranking from the keyword index (built first when it is not yet), with the
    /// text and source read from the database. A chunk the index still has but the
    /// database no longer does (deleted through another replica, not yet synced) is left
    /// out, so a delete never shows in results.
    async fn keyword_search(
        &self,
        agent_id: &AgentId,
        scope: &Scope,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let index = &self.inner.index;
        if !index.is_built() {
            self.sync_index().await?;
        } else if index.has_pending() {
            // Uploads that returned before this search are in it.
            index.commit_pending().await?;
        }
        let ranked = index.search(agent_id, scope, terms, limit)?;
        let ids: Vec<String> = ranked.iter().map(|(id, _)| id.clone()).collect();
        let mut rows: HashMap<String, ScoredChunk> = self
            .inner
            .store
            .chunks_by_id(&ids)
            .await?
            .into_iter()
            .map(|c| (c.chunk_id.clone(), c))
            .collect();
        Ok(ranked
            .into_iter()
            .filter_map(|(id, score)| {
                rows.remove(&id).map(|c| Hit {
                    score,
                    ..Hit::from(c)
                })
            })
            .collect())
    }

    /// The knowledge for a reply: the top chunks for `text` within the prompt's knowledge
    /// budget. Retrieval must never cost the reply: an error or a slow search is logged and
    /// answered with nothing.
    pub async fn for_prompt(&self, agent_id: &AgentId, room: &RoomKey, text: &str) -> Vec<Hit> {
        let settings = &self.inner.settings;
        if settings.top_k == 0 || settings.prompt_budget_chars == 0 {
            return Vec::new();
        }
        // Nothing was ever uploaded (the index is synced and no change was ever made): no
        // search, and no query embedding (issue 18: no cost for a feature with nothing to do).
        let index = self.inner.index.status();
        if self.inner.index.is_built() && index.applied <= 0 && index.head <= 0 {
            return Vec::new();
        }
        let search = self.search(agent_id, Some(room), text, settings.top_k);
        match tokio::time::timeout(settings.search_timeout, search).await {
            Ok(Ok(hits)) => within_budget(hits, settings.prompt_budget_chars),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "knowledge search failed; answering without knowledge");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = settings.search_timeout.as_millis() as u64,
                    "knowledge search took too long; answering without knowledge"
                );
                Vec::new()
            }
        }
    }
}

/// The keyword and vector rankings fused ([`fusion::DEFAULT`]): the best `limit`
/// `(chunk id, score)`.
fn fuse_rankings(by_text: &[Hit], by_vector: &[(String, f32)], limit: usize) -> Vec<(String, f64)> {
    fusion::fuse(
        &by_text
            .iter()
            .map(|c| (c.chunk_id.as_str(), c.score))
            .collect::<Vec<_>>(),
        &by_vector
            .iter()
            .map(|(id, score)| (id.as_str(), f64::from(*score)))
            .collect::<Vec<_>>(),
        fusion::DEFAULT,
        limit,
    )
}

/// Words too common to help a keyword search. The index keeps them (its tokenizer has no
/// stop list); a query term matching nearly every chunk only costs time.
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do",
    "does", "for", "from", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its",
    "me", "my", "of", "on", "or", "our", "she", "he", "so", "that", "the", "their", "them",
    "there", "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which",
    "who", "why", "will", "with", "would", "you", "your",
];

/// The query cut into lower-case words of letters and digits, stop words dropped, each once.
fn query_terms(query: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .filter(|w| seen.insert(w.clone()))
        .take(MAX_QUERY_TERMS)
        .collect()
}

/// The hits, best first, whose text fits in `budget` characters together. A hit that does
/// not fit is skipped, so a shorter one after it may still go in.
fn within_budget(hits: Vec<Hit>, budget: usize) -> Vec<Hit> {
    let mut used = 0;
    hits.into_iter()
        .filter(|h| {
            let size = h.text.chars().count() + h.source.chars().count();
            if used + size <= budget {
                used += size;
                true
            } else {
                false
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_terms_are_plain_distinct_words() {
        assert_eq!(
            query_terms("What time does the Office open? office \"hours\" OR NEAR(x)"),
            vec!["time", "office", "open", "hours", "near", "x"]
        );
        assert!(query_terms("the of and ?!").is_empty());
    }

    #[test]
    fn the_budget_skips_what_does_not_fit() {
        let hit = |text: &str| Hit {
            chunk_id: text.into(),
            document_id: "d".into(),
            source: "s".into(),
            chunk: 0,
            text: text.into(),
            score: 1.0,
        };
        let kept = within_budget(vec![hit("aaaa"), hit("bbbbbbbbbb"), hit("cc")], 9);
        let texts: Vec<&str> = kept.iter().map(|h| h.text.as_str()).collect();
        assert_eq!(texts, vec!["aaaa", "cc"]);
    }
}
