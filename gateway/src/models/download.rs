//! One file from the hub into a `.part` file: resumed from the bytes already there, bounded
//! by the size the hub announced (itself at most the file's cap, `super::max_bytes`), and
//! checked against the hub's hash before it counts.
//!
//! Why not `hf-hub`'s own download: it writes into its cache layout (blobs named by etag,
//! symlinked snapshots) rather than the model directory the local model reads; it resumes only
//! whole 10 MB chunks, recorded in a trailer of the part file, and holds each chunk in
//! memory; and it never hashes what it received. Here a part file is plain bytes, so an
//! interrupted pull resumes at the byte it stopped (`Range: bytes=N-`), memory is one read
//! at a time, and nothing is installed until its sha256 (or git blob id) matches.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use sha1::Digest;
use tokio::io::AsyncWriteExt;

use super::hub::{ANSWER_WAIT, Expected, Hub, HubFile};

/// How long one read may stall before the download is called interrupted.
const READ_WAIT: Duration = Duration::from_secs(60);

/// Downloads `file` into `part`, going on from what `part` holds. Each received byte is
/// counted on `progress`. On return the part file holds the whole file, not yet checked.
pub(super) async fn fetch(
    hub: &Hub,
    file: &HubFile,
    part: &Path,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let mut have = tokio::fs::metadata(part).await.map_or(0, |m| m.len());
    if file.size.is_some_and(|size| have > size) {
        have = 0;
    }
    if file.size == Some(have) && have > 0 {
        return Ok(());
    }
    let mut request = hub.api().client().get(&file.url);
    if have > 0 {
        request = request.header("range", format!("bytes={have}-"));
    }
    let mut answer = tokio::time::timeout(ANSWER_WAIT, request.send())
        .await
        .map_err(|_| hub.unreachable(&format!("no answer within {ANSWER_WAIT:?}")))?
        .map_err(|e| hub.unreachable(&super::hub::innermost(&e)))?;
    let mut have = starts_at(hub, file, answer.status(), answer.headers(), have)?;
    check_linked_etag(file, answer.headers().get("x-linked-etag"))?;
    let size = announced_size(hub, file, answer.content_length(), have)?;
    let mut out = open_part(part, have).await?;
    progress.inc(have);
    loop {
        let chunk = match tokio::time::timeout(READ_WAIT, answer.chunk()).await {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                out.flush().await?;
                bail!(interrupted(file, have, size, &super::hub::innermost(&e)));
            }
            Err(_) => {
                out.flush().await?;
                bail!(interrupted(file, have, size, "the hub stopped sending"));
            }
        };
        have += chunk.len() as u64;
        if have > size {
            bail!(
                "{} sent more than the {size} bytes it announced for {}",
                hub.endpoint(),
                file.name
            );
        }
        out.write_all(&chunk).await?;
        progress.inc(chunk.len() as u64);
    }
    out.flush().await?;
    out.sync_all().await?;
    if have != size {
        bail!(interrupted(file, have, size, "the connection closed early"));
    }
    Ok(())
}

/// The size the download must reach: the metadata's, else what the answer's
/// `Content-Length` says is left after `have`; refused past the file's cap before a byte of
/// it is written.
fn announced_size(
    hub: &Hub,
    file: &HubFile,
    content_length: Option<u64>,
    have: u64,
) -> anyhow::Result<u64> {
    let size = match file.size {
        Some(size) => size,
        None => content_length
            .map(|rest| rest.saturating_add(have))
            .with_context(|| format!("{} gave no size for {}", hub.endpoint(), file.name))?,
    };
    if size > file.cap {
        bail!(
            "{} announces {} as {size} bytes; troupe takes at most {} for it",
            hub.endpoint(),
            file.name,
            file.cap
        );
    }
    Ok(size)
}

/// Where the answer to a request for `file` from byte `have` starts: `have` for a 206
/// from there, 0 for a 200 (a server that ignores ranges sends the whole file), an error
/// for a refusal or a range that starts elsewhere.
fn starts_at(
    hub: &Hub,
    file: &HubFile,
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
    have: u64,
) -> anyhow::Result<u64> {
    match status.as_u16() {
        206 => {
            let from = content_range_start(headers.get("content-range"));
            if from != Some(have) {
                bail!(
                    "{} answered {} from byte {from:?}, not from byte {have} as asked",
                    hub.endpoint(),
                    file.name
                );
            }
            Ok(have)
        }
        200 => Ok(0),
        401 | 403 => bail!(
            "{} refused {} ({status}): a private or gated model needs HF_TOKEN",
            hub.endpoint(),
            file.name
        ),
        _ => bail!("{} answered {status} for {}", hub.endpoint(), file.name),
    }
}

/// What a cut download says: how far it got, and that running again goes on from there.
fn interrupted(file: &HubFile, have: u64, size: u64, why: &str) -> String {
    format!(
        "the download of {} was interrupted at {have} of {size} bytes ({why}); run `troupe \
         models pull` again to resume from there",
        file.name
    )
}

/// The part file, truncated to `have` bytes (0: emptied) and open for appending.
async fn open_part(part: &Path, have: u64) -> anyhow::Result<tokio::fs::File> {
    if let Some(parent) = part.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let out = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(part)
        .await
        .with_context(|| format!("cannot write {}", part.display()))?;
    out.set_len(have).await?;
    Ok(out)
}

/// The first byte of a `Content-Range: bytes START-END/SIZE`.
fn content_range_start(header: Option<&reqwest::header::HeaderValue>) -> Option<u64> {
    let value = header?.to_str().ok()?;
    let range = value.strip_prefix("bytes ")?;
    range.split('-').next()?.trim().parse().ok()
}

/// The hub names an LFS file's sha256 in `X-Linked-Etag` too: it must agree with the
/// metadata, or one of them was tampered with on the way.
fn check_linked_etag(
    file: &HubFile,
    header: Option<&reqwest::header::HeaderValue>,
) -> anyhow::Result<()> {
    let (Some(value), Expected::Sha256(expected)) = (header, &file.expected) else {
        return Ok(());
    };
    let linked = value.to_str().unwrap_or("").trim_matches('"');
    if !linked.eq_ignore_ascii_case(expected) {
        bail!(
            "{}: the hub's metadata says sha256 {expected} but its X-Linked-Etag says {}",
            file.name,
            linked.escape_default()
        );
    }
    Ok(())
}

/// Whether `path` hashes to `expected`; `Err` says what it hashed to instead.
pub(super) async fn verify(path: &Path, expected: &Expected) -> anyhow::Result<()> {
    let path = path.to_path_buf();
    let expected = expected.clone();
    tokio::task::spawn_blocking(move || verify_blocking(&path, &expected)).await?
}

fn verify_blocking(path: &Path, expected: &Expected) -> anyhow::Result<()> {
    let mut file = std::fs::File::open(path)?;
    let (kind, want, got) = match expected {
        Expected::Sha256(want) => ("sha256", want, hex_of(sha2::Sha256::new(), &mut file)?),
        Expected::GitBlob(want) => {
            // Git names a blob by SHA-1 of a header (`blob <len>\0`) and the bytes.
            let mut hasher = sha1::Sha1::new();
            hasher.update(format!("blob {}\0", file.metadata()?.len()).as_bytes());
            ("git blob id", want, hex_of(hasher, &mut file)?)
        }
    };
    if &got != want {
        bail!("its {kind} is {got}, not the hub's {want}");
    }
    Ok(())
}

/// `hasher` fed the rest of `file` a block at a time, as lower-case hex.
fn hex_of(mut hasher: impl Digest, file: &mut std::fs::File) -> anyhow::Result<String> {
    use std::io::Read;
    let mut block = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            return Ok(hex::encode(&hasher.finalize()[..]));
        }
        hasher.update(&block[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_blob_id_is_sha1_of_the_header_and_the_bytes() {
        // `printf 'hello\n' | git hash-object --stdin`
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello\n").unwrap();
        let ok = Expected::GitBlob("ce013625030ba8dba906f756967f9e9ca394464a".into());
        assert!(verify_blocking(&path, &ok).is_ok());
        let wrong = Expected::GitBlob("0".repeat(40));
        let why = verify_blocking(&path, &wrong).unwrap_err().to_string();
        assert!(why.contains("ce013625"), "{why}");
    }

    #[test]
    fn a_sha256_is_checked_over_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let ok = Expected::Sha256(
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into(),
        );
        assert!(verify_blocking(&path, &ok).is_ok());
        std::fs::write(&path, b"abd").unwrap();
        assert!(verify_blocking(&path, &ok).is_err());
    }

    #[test]
    fn a_size_past_the_cap_is_refused_before_writing() {
        let hub = Hub::new(&crate::config::HubSettings {
            endpoint: "http://127.0.0.1:9".into(),
            token: None,
            auto_pull: false,
        })
        .unwrap();
        let file = |size: Option<u64>| HubFile {
            name: "model.safetensors",
            url: String::new(),
            size,
            cap: 1000,
            expected: Expected::Sha256("0".repeat(64)),
        };
        assert_eq!(
            announced_size(&hub, &file(Some(1000)), None, 0).unwrap(),
            1000
        );
        assert!(announced_size(&hub, &file(Some(50_000_000_000)), None, 0).is_err());
        // Without the metadata's size, the answer's Content-Length counts, after a resume too.
        assert_eq!(
            announced_size(&hub, &file(None), Some(400), 600).unwrap(),
            1000
        );
        let err = announced_size(&hub, &file(None), Some(401), 600).unwrap_err();
        assert!(err.to_string().contains("at most 1000"), "{err}");
        assert!(announced_size(&hub, &file(None), None, 0).is_err());
    }

    #[test]
    fn the_start_of_a_content_range_is_read() {
        let v = reqwest::header::HeaderValue::from_static("bytes 100-199/200");
        assert_eq!(content_range_start(Some(&v)), Some(100));
        let bad = reqwest::header::HeaderValue::from_static("items 1-2/3");
        assert_eq!(content_range_start(Some(&bad)), None);
        assert_eq!(content_range_start(None), None);
    }
}
