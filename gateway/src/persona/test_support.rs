//! What tests across the crate share to make a persona: one loaded from JSON (through the
//! real loader, from a temporary file) and an environment from pairs.

use super::{Env, Persona};

/// The persona a character file with `json` loads as.
pub(crate) fn from_json(json: serde_json::Value) -> Persona {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    std::fs::write(&path, json.to_string()).unwrap();
    super::load_file(&path).unwrap().persona
}

/// An environment of `pairs`.
pub(crate) fn env(pairs: &[(&str, &str)]) -> Env {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
