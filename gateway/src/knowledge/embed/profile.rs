//! Model profiles: what each embedding model expects around the text it embeds.
//!
//! Asymmetric retrieval models are trained with a marker saying which side a text is on:
//! multilingual-e5 embeds `query: …` against `passage: …`, nomic-embed-text
//! `search_query: …` against `search_document: …`, BGE's English v1.5 models put an
//! instruction before queries only. Embedding without them costs e5 most of its quality (the
//! Vaswani figures in docs/benchmarks.md). Symmetric sentence encoders such as
//! all-MiniLM-L6-v2 take the text as it is.
//!
//! A profile is recognised from the model's name (the API model, or the local model's
//! directory), and settings override either prefix (`TROUPE_EMBEDDING_QUERY_PREFIX`,
//! `TROUPE_EMBEDDING_PASSAGE_PREFIX`, docs/knowledge.md).

/// Which side of a search a text is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// What a user asked: embedded at each search.
    Query,
    /// A stored passage: embedded at ingestion.
    Passage,
}

/// The prefixes put before a text of each role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    pub query_prefix: String,
    pub passage_prefix: String,
}

impl Profile {
    /// The profile of the model named `model` (an API model name or a directory name),
    /// case-insensitively: `e5` models, nomic-embed-text and BGE English v1.5 are known;
    /// anything else gets no prefix.
    pub fn for_model(model: &str) -> Profile {
        let name = model.to_ascii_lowercase();
        let both = |q: &str, p: &str| Profile {
            query_prefix: q.to_string(),
            passage_prefix: p.to_string(),
        };
        // The name's last path component: `intfloat/multilingual-e5-small`, a directory.
        let base = name.rsplit(['/', '\\']).next().unwrap_or(&name);
        let words: Vec<&str> = base.split(['-', '_', '.', ':', '@']).collect();
        if words.contains(&"e5") || base.starts_with("e5") {
            both("query: ", "passage: ")
        } else if base.starts_with("nomic-embed-text") {
            both("search_query: ", "search_document: ")
        } else if base.starts_with("bge-") && base.contains("en") && !base.contains("m3") {
            both(
                "Represent this sentence for searching relevant passages: ",
                "",
            )
        } else {
            Profile::default()
        }
    }

    /// This profile with the prefixes that settings give (`None` keeps the profile's).
    pub fn overridden(mut self, query: Option<&str>, passage: Option<&str>) -> Profile {
        if let Some(q) = query {
            self.query_prefix = q.to_string();
        }
        if let Some(p) = passage {
            self.passage_prefix = p.to_string();
        }
        self
    }

    pub fn prefix(&self, role: Role) -> &str {
        match role {
            Role::Query => &self.query_prefix,
            Role::Passage => &self.passage_prefix,
        }
    }

    /// `text` as the model should see it for `role`.
    pub fn apply(&self, role: Role, text: &str) -> String {
        let prefix = self.prefix(role);
        let mut out = String::with_capacity(prefix.len() + text.len());
        out.push_str(prefix);
        out.push_str(text);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_recognised_by_name() {
        let e5 = Profile::for_model("intfloat/multilingual-e5-small");
        assert_eq!(e5.apply(Role::Query, "boats"), "query: boats");
        assert_eq!(e5.apply(Role::Passage, "a boat"), "passage: a boat");
        assert_eq!(Profile::for_model("E5-large-v2").query_prefix, "query: ");
        assert_eq!(
            Profile::for_model("nomic-embed-text").passage_prefix,
            "search_document: "
        );
        let bge = Profile::for_model("BAAI/bge-small-en-v1.5");
        assert!(bge.query_prefix.starts_with("Represent"));
        assert_eq!(bge.passage_prefix, "");
        for plain in [
            "all-MiniLM-L6-v2",
            "text-embedding-3-small",
            "bge-m3",
            "se5x",
        ] {
            assert_eq!(Profile::for_model(plain), Profile::default(), "{plain}");
        }
    }

    #[test]
    fn settings_override_either_prefix() {
        let p = Profile::for_model("multilingual-e5-small").overridden(Some(""), None);
        assert_eq!(p.apply(Role::Query, "q"), "q");
        assert_eq!(p.apply(Role::Passage, "p"), "passage: p");
    }
}
