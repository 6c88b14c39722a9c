use super::*;

#[test]
fn short_names_and_repository_ids_parse() {
    let minilm: ModelName = "all-minilm-l6-v2".parse().unwrap();
    assert_eq!(minilm.repo(), "sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(minilm.dir_name(), "all-MiniLM-L6-v2");
    let e5: ModelName = "intfloat/multilingual-e5-small".parse().unwrap();
    assert_eq!(e5.dir_name(), "multilingual-e5-small");
    let other: ModelName = "BAAI/bge-small-en-v1.5".parse().unwrap();
    assert_eq!(other.repo(), "BAAI/bge-small-en-v1.5");
    for bad in [
        "",
        "minilm",
        "a/b/c",
        "../x",
        "a/..",
        "a/.hidden",
        "a/b c",
        "-a/b",
    ] {
        let why = bad.parse::<ModelName>().unwrap_err();
        assert!(why.contains("all-MiniLM-L6-v2"), "{bad}: {why}");
    }
}

#[test]
fn a_pull_goes_to_the_configured_directory_when_it_is_the_models() {
    let configured = Path::new("data/models/all-MiniLM-L6-v2");
    let (model, dir) = target_dir(None, configured);
    assert_eq!(model, ModelName::default_model());
    assert_eq!(dir, configured);
    let e5: ModelName = "multilingual-e5-small".parse().unwrap();
    let (_, dir) = target_dir(Some(&e5), configured);
    assert_eq!(dir, Path::new("data/models/multilingual-e5-small"));
    // A directory named after e5 pulls e5 when no name is given.
    let e5_dir = Path::new("/srv/models/multilingual-e5-small");
    let (model, dir) = target_dir(None, e5_dir);
    assert_eq!(model, e5);
    assert_eq!(dir, e5_dir);
    // A directory of another name still takes the default model.
    let (model, dir) = target_dir(None, Path::new("/srv/embedder"));
    assert_eq!(model, ModelName::default_model());
    assert_eq!(dir, Path::new("/srv/embedder"));
}
