//! Hot reload: watches a personas directory and reports what changed.
//!
//! The watcher polls: every [`POLL_INTERVAL`] it lists the `*.json` files and hashes their
//! contents together with the contents of the parents they `extends`. It does not use
//! inotify (the `notify` crate): personas directories are a handful of small files, and
//! polling also sees changes that inotify misses, such as Docker bind mounts, Kubernetes
//! ConfigMap symlink swaps and network file systems, and editors that save by renaming.
//!
//! Debounce: a changed file is reported once its content has been the same for two polls
//! in a row, so a save caught half-written is not reported as invalid. A change therefore
//! arrives 250–500 ms after the editor is done.
//!
//! The watcher starts from the files as they are when [`watch`] is called (load them first
//! with [`super::load_dir`]); it reports only later changes.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::diag::Diagnostic;
use super::paths::LoadOptions;
use super::{Env, Loaded, Persona, check, load};

/// How often the directory is scanned.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// A change in the personas directory.
// Events are rare (one per saved file), so the size of `Upsert` does not matter; boxing it
// would only make the callers' matches noisier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum PersonaEvent {
    /// A new file, or a changed file that loads: replace the persona from this source.
    Upsert(Loaded),
    /// The file is gone: stop the persona loaded from it.
    Removed { source: PathBuf },
    /// A new or changed file that does not load (or conflicts with another persona): keep
    /// the last good version; these are the reasons, with positions.
    Invalid(Vec<Diagnostic>),
}

/// What the watcher knows about one file.
#[derive(Default)]
struct Tracked {
    /// Hash of the file and its parents when last reported (None: never reported).
    fingerprint: Option<u64>,
    /// A new hash seen once, waiting to be seen again before it is reported.
    pending: Option<u64>,
    /// Parent files, from the last load.
    deps: Vec<PathBuf>,
    /// The persona from the last version that loaded, for cross-file checks.
    good: Option<Persona>,
}

/// Watches `dir` until `shutdown` is cancelled (or the receiver is dropped). Files are
/// loaded with `options`, as [`super::load_dir`] loads them.
pub fn watch(
    dir: PathBuf,
    env: Env,
    options: LoadOptions,
    shutdown: CancellationToken,
) -> mpsc::Receiver<PersonaEvent> {
    watch_every(dir, env, options, shutdown, POLL_INTERVAL)
}

pub(crate) fn watch_every(
    dir: PathBuf,
    env: Env,
    options: LoadOptions,
    shutdown: CancellationToken,
    interval: Duration,
) -> mpsc::Receiver<PersonaEvent> {
    let (tx, rx) = mpsc::channel(64);
    // The starting state is taken now, before returning, so a change made right after
    // `watch` returns is seen as a change.
    let mut state = baseline(&dir, &options);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let (dir2, env2, options2) = (dir.clone(), env.clone(), options.clone());
            let scanned = tokio::task::spawn_blocking(move || {
                let events = scan(&dir2, &env2, &options2, &mut state);
                (state, events)
            })
            .await;
            let Ok((s, events)) = scanned else { break };
            state = s;
            for e in events {
                if tx.send(e).await.is_err() {
                    return;
                }
            }
        }
    });
    rx
}

fn baseline(dir: &Path, options: &LoadOptions) -> BTreeMap<PathBuf, Tracked> {
    let mut state = BTreeMap::new();
    for path in load::persona_files(dir).unwrap_or_default() {
        let (deps, good) = match load::load_file_with(&path, options) {
            Ok(l) => (l.persona.depends_on.clone(), Some(l.persona)),
            Err(_) => (Vec::new(), None),
        };
        if let Some(fp) = fingerprint(&path, &deps) {
            state.insert(
                path,
                Tracked {
                    fingerprint: Some(fp),
                    pending: None,
                    deps,
                    good,
                },
            );
        }
    }
    state
}

/// The hash of a file and its parents, or None when it cannot be read right now.
fn fingerprint(path: &Path, deps: &[PathBuf]) -> Option<u64> {
    let mut h = DefaultHasher::new();
    std::fs::read(path).ok()?.hash(&mut h);
    for d in deps {
        // A missing parent hashes as empty: its disappearance is a change too.
        std::fs::read(d).unwrap_or_default().hash(&mut h);
    }
    Some(h.finish())
}

fn scan(
    dir: &Path,
    env: &Env,
    options: &LoadOptions,
    state: &mut BTreeMap<PathBuf, Tracked>,
) -> Vec<PersonaEvent> {
    let mut events = Vec::new();
    // A directory that cannot be listed (being replaced, briefly missing) is not a removal of
    // every persona; wait for the next poll.
    let Ok(files) = load::persona_files(dir) else {
        return events;
    };

    let gone: Vec<PathBuf> = state
        .keys()
        .filter(|p| !files.contains(p))
        .cloned()
        .collect();
    for source in gone {
        state.remove(&source);
        events.push(PersonaEvent::Removed { source });
    }

    for path in files {
        let mut t = state.remove(&path).unwrap_or_default();
        if let Some(event) = step(&path, &mut t, state, env, options) {
            events.push(event);
        }
        state.insert(path, t);
    }
    events
}

/// One file in one poll: the event to report, if its content changed and settled.
fn step(
    path: &Path,
    t: &mut Tracked,
    others: &BTreeMap<PathBuf, Tracked>,
    env: &Env,
    options: &LoadOptions,
) -> Option<PersonaEvent> {
    let fp = fingerprint(path, &t.deps)?;
    if t.fingerprint == Some(fp) {
        t.pending = None;
        return None;
    }
    if t.pending != Some(fp) {
        t.pending = Some(fp);
        return None;
    }
    // Stable for two polls: report it.
    t.pending = None;
    match load::load_file_with(path, options) {
        Ok(loaded) => {
            t.deps = loaded.persona.depends_on.clone();
            t.fingerprint = Some(fingerprint(path, &t.deps).unwrap_or(fp));
            let others: Vec<&Persona> = others.values().filter_map(|o| o.good.as_ref()).collect();
            let conflicts = check::conflicts_of(&loaded.persona, &others, env);
            if conflicts.is_empty() {
                t.good = Some(loaded.persona.clone());
                Some(PersonaEvent::Upsert(loaded))
            } else {
                Some(PersonaEvent::Invalid(conflicts))
            }
        }
        Err(diags) => {
            t.fingerprint = Some(fp);
            Some(PersonaEvent::Invalid(diags))
        }
    }
}
