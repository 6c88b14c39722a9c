//! Fusing the keyword ranking (BM25) and the vector ranking (cosine) into one.
//!
//! Two methods, both cheap and both measured on the Vaswani collection
//! (gateway/tests/retrieval_quality.rs, figures in docs/benchmarks.md):
//!
//! - **Reciprocal rank fusion** (Cormack et al., 2009): each id scores
//!   `weight / (k + rank)` per ranking it appears in. It ignores the scores, so it cannot
//!   tell a clear winner from a close second.
//! - **Normalised score fusion**: each ranking's scores are scaled to 0..1 over its
//!   candidates (min-max), and an id scores the weighted sum (0 for a ranking it is missing
//!   from). It keeps how far apart the candidates are.
//!
//! [`DEFAULT`] is the one search uses; the test sweeps a few parameters of each and prints
//! them, so a retune is one run.

use std::collections::HashMap;

/// How two rankings become one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Reciprocal rank fusion with constant `k` and a weight per ranking.
    Rrf {
        k: f64,
        text_weight: f64,
        vector_weight: f64,
    },
    /// Min-max normalised scores, `(1 - vector_weight) * text + vector_weight * vector`.
    Scores { vector_weight: f64 },
}

/// What search uses: normalised scores with equal weight. The sweep on Vaswani with the
/// local MiniLM model (`TROUPE_VASWANI_TUNE=1`, gateway/tests/retrieval_quality.rs,
/// 2026-12-01) put it first of the 14 settings tried on both backends, at a test's
/// candidate depth (nDCG@10 0.502 SQLite, 0.504 Postgres; 0.4 ties within 0.001) and at a
/// prompt's (0.495, 0.493); the best RRF reached 0.486 and 0.491. docs/benchmarks.md has the
/// table.
pub const DEFAULT: Fusion = Fusion::Scores { vector_weight: 0.5 };

/// The fused ranking of `by_text` and `by_vector` (each `(id, score)`, best first), best
/// first, at most `limit` long. Ties keep the keyword ranking's order, then the vector one's.
pub fn fuse(
    by_text: &[(&str, f64)],
    by_vector: &[(&str, f64)],
    fusion: Fusion,
    limit: usize,
) -> Vec<(String, f64)> {
    // id -> (score, order of first appearance: keyword ranks first, then vector ranks)
    let mut scores: HashMap<&str, (f64, usize)> = HashMap::new();
    let rankings = [(by_text, 0usize), (by_vector, 1usize)];
    for (ranking, which) in rankings {
        let (weight, scaled): (f64, Vec<f64>) = match fusion {
            Fusion::Rrf {
                k,
                text_weight,
                vector_weight,
            } => (
                if which == 0 {
                    text_weight
                } else {
                    vector_weight
                },
                (0..ranking.len())
                    .map(|i| 1.0 / (k + (i + 1) as f64))
                    .collect(),
            ),
            Fusion::Scores { vector_weight } => (
                if which == 0 {
                    1.0 - vector_weight
                } else {
                    vector_weight
                },
                min_max(ranking),
            ),
        };
        for (i, ((id, _), s)) in ranking.iter().zip(scaled).enumerate() {
            let entry = scores.entry(*id).or_insert((0.0, which * 1_000_000 + i));
            entry.0 += weight * s;
        }
    }
    let mut fused: Vec<(&str, f64, usize)> =
        scores.into_iter().map(|(id, (s, o))| (id, s, o)).collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    fused
        .into_iter()
        .take(limit)
        .map(|(id, s, _)| (id.to_string(), s))
        .collect()
}

/// Scores scaled to 0..1 over the list: the best is 1, the worst 0; all alike are all 1.
fn min_max(ranking: &[(&str, f64)]) -> Vec<f64> {
    let (lo, hi) = ranking
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, s)| {
            (lo.min(*s), hi.max(*s))
        });
    let span = hi - lo;
    ranking
        .iter()
        .map(|(_, s)| {
            if span > 0.0 && span.is_finite() {
                (s - lo) / span
            } else {
                1.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(fused: &[(String, f64)]) -> Vec<&str> {
        fused.iter().map(|(id, _)| id.as_str()).collect()
    }

    const RRF: Fusion = Fusion::Rrf {
        k: 60.0,
        text_weight: 1.0,
        vector_weight: 1.0,
    };

    #[test]
    fn rank_fusion_rewards_agreement() {
        let r = |ids: &[&'static str]| -> Vec<(&'static str, f64)> {
            ids.iter().map(|id| (*id, 1.0)).collect()
        };
        let fused = fuse(&r(&["a", "b", "c"]), &r(&["c", "d", "a"]), RRF, 10);
        assert_eq!(ids(&fused), vec!["a", "c", "b", "d"]);
        assert_eq!(fuse(&r(&["a", "b"]), &[], RRF, 1).len(), 1);
    }

    #[test]
    fn score_fusion_keeps_how_far_apart_scores_are() {
        // "a" wins the keywords by far; "b" wins the vectors by a hair over "a".
        let text = [("a", 20.0), ("b", 2.0), ("c", 1.0)];
        let vector = [("b", 0.81), ("a", 0.80), ("c", 0.10)];
        let by_scores = fuse(&text, &vector, DEFAULT, 10);
        assert_eq!(ids(&by_scores), vec!["a", "b", "c"]);
        let (_, top) = &by_scores[0];
        assert!((top - (0.5 + 0.5 * (0.70 / 0.71))).abs() < 1e-9, "{top}");
        // Only the vectors: their order, whatever the weight.
        let alone = fuse(&[], &vector, DEFAULT, 2);
        assert_eq!(ids(&alone), vec!["b", "a"]);
        // One candidate, or equal scores: no division by zero.
        let one = fuse(&[("x", 3.0)], &[("x", 0.5)], DEFAULT, 5);
        assert_eq!(one, vec![("x".to_string(), 1.0)]);
    }
}
