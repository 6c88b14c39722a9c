//! Images in messages (issue 32): what an image is allowed to be, how it reaches the model,
//! and what the room remembers of it.
//!
//! An image enters as bytes a stranger chose. They are taken only under
//! `TROUPE_MEDIA_MAX_BYTES`, fetched (for a link) through the fetch policy (`crate::fetch`:
//! no internal addresses, bounded time and redirects), and their type is read from their
//! magic number (PNG, JPEG, GIF, WebP), never from what the sender claims, and its size
//! from its header (`header`): at most [`MAX_SIDE`] pixels a side and [`MAX_PIXELS`] in all
//! its frames, so a few kilobytes that decode to gigabytes are refused before they are
//! stored, sent to a model or shown in a browser (issue 43). The gateway never decodes an
//! image: the bytes go to the model as they came, so no crafted file can crash a decoder in
//! this process.
//!
//! The journal and the bus carry a reference to an image, never its bytes (a large image
//! would swell every journal row and exceed NATS's 1 MiB payload): an image posted to the
//! API is stored by the SHA-256 of its bytes (`media:sha256:<hex>`, the `media` table); a
//! platform's file is the platform's reference (a Telegram file id, a Discord CDN URL); a
//! Farcaster embed is its link. [`load`] fetches the bytes when the message is handled: a
//! platform's files through its connector's own client (`Connector::fetch_file`), links
//! under the fetch policy. The room's memory keeps a short description (`remembered`).
//!
//! Which models take images: `TROUPE_VISION=auto` sends images to the models in
//! [`takes_images`]'s list; `on` sends them to every model, `off` to none. A model that does
//! not take them gets a line saying an image was sent that it cannot see, so the persona
//! does not pretend; an image that could not be taken (too large, an internal address, not
//! an image) becomes a line giving the reason, so the persona can say so.
//!
//! Layout: this file is the policy (limits, types, the prompt lines, the memory line);
//! `load` fetches a message's images when it is handled; `keep` stores what was fetched,
//! for the console's history; `voice` transcribes its voice notes; `speech` answers a voice
//! note with one.

mod header;
pub mod keep;
mod load;
pub mod speech;
pub mod voice;

pub use load::{Seen, Sources, load};

pub mod vision;

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use troupe_connectors::{Attachment, Inbound};

use crate::config::Vision;
use crate::fetch::{FetchError, Fetcher};
use crate::persona::Prompt;

/// At most this many images per message: a model's context and the journal row stay small.
pub const MAX_IMAGES: usize = 4;

/// The longest side an image may have, in pixels: the largest texture browsers and GPUs
/// draw (and WebP's own limit, 16,383); vision models scale larger ones down anyway.
pub const MAX_SIDE: u64 = 16_384;

/// The most pixels an image may have, all its frames together (width × height × frames):
/// 40 megapixels, an 8000×5000 photo or 160 frames of 500×500, and at most 160 MB decoded
/// (four bytes a pixel) wherever it is decoded.
pub const MAX_PIXELS: u64 = 40_000_000;

/// Why an image was not taken. The text is for the sender: it names the limit or the
/// setting, never a URL (a platform's file URL carries its token).
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("images are turned off here (TROUPE_VISION=off)")]
    Off,
    #[error("at most {MAX_IMAGES} images per message")]
    TooMany,
    #[error("the image is over {cap} bytes (TROUPE_MEDIA_MAX_BYTES)")]
    TooLarge { cap: usize },
    #[error("the image's `data` is not valid base64")]
    BadBase64,
    #[error("the image is not a PNG, JPEG, GIF or WebP file (judged by its bytes)")]
    NotAnImage,
    #[error("the image's header does not say its width and height")]
    NoSize,
    #[error(
        "the image is {width}×{height} pixels in {frames} frame(s); at most {MAX_SIDE} pixels \
         a side and {MAX_PIXELS} pixels in all frames are taken"
    )]
    TooManyPixels {
        width: u64,
        height: u64,
        frames: u64,
    },
    #[error("the image could not be fetched: {0}")]
    Fetch(FetchError),
    #[error("the image could not be fetched from the platform: {0}")]
    Platform(String),
    #[error("the stored image is gone")]
    Missing,
}

/// The image type of `bytes`, from their magic number; `None` for anything else.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, ..] => Some("image/png"),
        [0xff, 0xd8, 0xff, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some("image/gif"),
        b if header::is_webp(b) => Some("image/webp"),
        _ => None,
    }
}

/// The `url` prefix of an image stored in the `media` table: `media:sha256:<hex>`.
pub const STORED: &str = "media:sha256:";

/// Checks image bytes against `cap`, and the size their header states against
/// [`MAX_SIDE`] and [`MAX_PIXELS`]; returns their type, read from the bytes.
pub fn check(bytes: &[u8], cap: usize) -> Result<&'static str, MediaError> {
    if bytes.len() > cap {
        return Err(MediaError::TooLarge { cap });
    }
    let mime = sniff(bytes).ok_or(MediaError::NotAnImage)?;
    let d = header::dimensions(bytes).ok_or(MediaError::NoSize)?;
    if d.width > MAX_SIDE || d.height > MAX_SIDE || d.pixels() > MAX_PIXELS {
        return Err(MediaError::TooManyPixels {
            width: d.width,
            height: d.height,
            frames: d.frames,
        });
    }
    Ok(mime)
}

/// The reference of stored bytes: `media:sha256:<hex>`, and the hex alone (the row's key).
pub fn reference(bytes: &[u8]) -> (String, String) {
    use sha2::Digest;
    let hex = hex::encode(sha2::Sha256::digest(bytes));
    (format!("{STORED}{hex}"), hex)
}

/// The attachment of an image that `check` accepted and the `media` table holds under
/// `reference` (`image-<n>.<ext>`).
pub fn stored_attachment(
    n: usize,
    mime: &'static str,
    size: usize,
    reference: String,
) -> Attachment {
    let ext = mime.trim_start_matches("image/");
    Attachment {
        name: format!("image-{n}.{ext}"),
        mime: Some(mime.to_string()),
        size: Some(size as u64),
        url: Some(reference),
    }
}

/// Decodes base64 image data, refusing it before decoding when it cannot fit under `cap`.
pub fn decode_data(data: &str, cap: usize) -> Result<Vec<u8>, MediaError> {
    // Four characters carry three bytes: anything longer cannot decode under the cap.
    if data.len() / 4 * 3 > cap + 3 {
        return Err(MediaError::TooLarge { cap });
    }
    STANDARD
        .decode(data.trim())
        .map_err(|_| MediaError::BadBase64)
}

/// Fetches an image link under the fetch policy and `cap`.
pub async fn fetch_image(fetcher: &Fetcher, url: &str, cap: usize) -> Result<Vec<u8>, MediaError> {
    fetcher.fetch_capped(url, cap).await.map_err(|e| match e {
        FetchError::TooLarge { cap } => MediaError::TooLarge { cap },
        other => MediaError::Fetch(other),
    })
}

/// Whether an attachment is an image a persona may be shown: it has a reference and says
/// it is an image (its type, or its name's extension when no type came). Whether it really
/// is one is read from its bytes when they are fetched.
pub fn is_image(a: &Attachment) -> bool {
    if a.url.is_none() {
        return false;
    }
    match a.mime.as_deref() {
        Some(mime) => mime.to_ascii_lowercase().starts_with("image/"),
        None => {
            let name = a.name.to_ascii_lowercase();
            [".png", ".jpg", ".jpeg", ".gif", ".webp"]
                .iter()
                .any(|ext| name.ends_with(ext))
        }
    }
}

/// The image attachments of a message, at most [`MAX_IMAGES`].
fn images(inbound: &Inbound) -> impl Iterator<Item = &Attachment> {
    inbound
        .attachments
        .iter()
        .filter(|a| is_image(a))
        .take(MAX_IMAGES)
}

/// Whether a model is known to take images (`TROUPE_VISION=auto`). By name, lower case:
/// OpenAI's GPT-4o, GPT-4.1, GPT-4 Turbo, GPT-5 and o-series; Anthropic's Claude 3 and 4;
/// Google's Gemini; the open vision families (LLaVA, Llama 3.2 Vision and Llama 4, Qwen-VL,
/// Pixtral, Gemma 3, MiniCPM-V, Moondream) and any name saying `vision` or `-vl`.
pub fn takes_images(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    const CONTAINS: &[&str] = &[
        "gpt-4o",
        "gpt-4.1",
        "gpt-4-turbo",
        "gpt-5",
        "chatgpt-4o",
        "claude-3",
        "claude-sonnet-4",
        "claude-opus-4",
        "claude-haiku-4",
        "gemini",
        "llava",
        "llama-4",
        "llama4",
        "vision",
        "-vl",
        "qwen2.5vl",
        "pixtral",
        "gemma3",
        "gemma-3",
        "minicpm-v",
        "moondream",
    ];
    const PREFIXES: &[&str] = &["o1", "o3", "o4"];
    CONTAINS.iter().any(|c| m.contains(c)) || PREFIXES.iter().any(|p| m.starts_with(p))
}

/// Whether `model` is sent images under `vision`.
pub fn sees(vision: Vision, model: &str) -> bool {
    match vision {
        Vision::Off => false,
        Vision::On => true,
        Vision::Auto => takes_images(model),
    }
}

/// Adds what [`load`] made of a message's images to its prompt: image parts, a line per
/// image the model cannot see, a line per image that was refused.
pub fn attach(prompt: &mut Prompt, seen: Seen) {
    prompt.images.extend(seen.images);
    for described in seen.unseen {
        prompt.user.push_str(&format!(
            "\n(The sender attached an image, {described}, that you cannot see: say so if it matters.)"
        ));
    }
    for reason in seen.refused {
        prompt.user.push_str(&format!(
            "\n(The sender attached an image that was not taken: {reason}. Say so if it matters.)"
        ));
    }
}

/// `image/png, 12 KB`: the type when it is a real one, the size when it is known, else the
/// file's name.
fn describe(a: &Attachment) -> String {
    let mime = a.mime.as_deref().filter(|m| !m.ends_with("/*"));
    match (mime, a.size) {
        (Some(mime), Some(size)) => format!("{mime}, {} KB", size.div_ceil(1024)),
        (Some(mime), None) => mime.to_string(),
        (None, Some(size)) => format!("{}, {} KB", a.name, size.div_ceil(1024)),
        (None, None) => a.name.clone(),
    }
}

/// The text the room remembers for a message: its text, plus one short line per image
/// (`[image: image/png, 12 KB]`). Borrowed, at no cost, for a message without images.
pub fn remembered(inbound: &Inbound) -> Cow<'_, str> {
    if inbound.attachments.is_empty() {
        return Cow::Borrowed(&inbound.text);
    }
    let mut text = inbound.text.clone();
    for a in images(inbound) {
        text.push_str(&format!("\n[image: {}]", describe(a)));
    }
    Cow::Owned(text)
}

/// `inbound` with the vision model's description of its images added to its text, so the
/// room remembers what the images showed (a few sentences, never the bytes) and a later
/// turn can talk about them. The prompt of this turn already has it.
pub fn described(inbound: &Inbound, description: &str) -> Inbound {
    let mut described = inbound.clone();
    described
        .text
        .push_str(&format!("\n[images described: {description}]"));
    described
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG's signature and the `IHDR` of a 1×1 image: enough for its type and size.
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

    #[test]
    fn the_header_bounds_the_pixels() {
        let sized = |w: u32, h: u32| {
            let mut b = PNG.to_vec();
            b[16..20].copy_from_slice(&w.to_be_bytes());
            b[20..24].copy_from_slice(&h.to_be_bytes());
            b
        };
        assert!(check(&sized(4000, 3000), 100).is_ok());
        for (w, h) in [(100_000, 100_000), (16_385, 10), (8000, 5001)] {
            let err = check(&sized(w, h), 100).unwrap_err();
            assert!(matches!(err, MediaError::TooManyPixels { .. }), "{w}×{h}");
            assert!(err.to_string().contains(&format!("{w}×{h}")), "{err}");
        }
        assert!(matches!(check(&PNG[..12], 100), Err(MediaError::NoSize)));
    }

    #[test]
    fn types_come_from_the_bytes() {
        assert_eq!(sniff(PNG), Some("image/png"));
        assert_eq!(sniff(&[0xff, 0xd8, 0xff, 0xe0]), Some("image/jpeg"));
        assert_eq!(sniff(b"GIF89a...."), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\x10\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(b"RIFF\x10\0\0\0WAVEfmt "), None);
        assert_eq!(sniff(b"<svg xmlns="), None);
        assert_eq!(sniff(b""), None);
    }

    #[test]
    fn an_image_is_checked_and_carried_by_reference() {
        assert_eq!(check(PNG, 100).unwrap(), "image/png");
        let (reference, key) = reference(PNG);
        assert_eq!(reference, format!("media:sha256:{key}"));
        assert_eq!(key.len(), 64);
        let a = stored_attachment(1, "image/png", PNG.len(), reference.clone());
        assert_eq!(a.name, "image-1.png");
        assert_eq!(a.url.as_deref(), Some(reference.as_str()));
        assert!(is_image(&a));
        assert!(matches!(
            check(PNG, 5),
            Err(MediaError::TooLarge { cap: 5 })
        ));
        assert!(matches!(
            check(b"%PDF-1.7", 100),
            Err(MediaError::NotAnImage)
        ));
        assert!(matches!(
            decode_data(&"A".repeat(400), 100),
            Err(MediaError::TooLarge { .. })
        ));
        assert!(matches!(decode_data("!!", 100), Err(MediaError::BadBase64)));
    }

    #[test]
    fn images_are_known_by_type_or_by_name() {
        let file = |name: &str, mime: Option<&str>, url: Option<&str>| Attachment {
            name: name.into(),
            mime: mime.map(Into::into),
            size: None,
            url: url.map(Into::into),
        };
        assert!(is_image(&file(
            "photo.jpg",
            Some("image/jpeg"),
            Some("telegram-file:x")
        )));
        assert!(is_image(&file(
            "cat.PNG",
            None,
            Some("https://e.org/cat.PNG")
        )));
        assert!(
            !is_image(&file("photo.jpg", Some("image/jpeg"), None)),
            "no reference"
        );
        assert!(!is_image(&file(
            "notes.pdf",
            Some("application/pdf"),
            Some("https://e")
        )));
        assert!(!is_image(&file(
            "cat.png",
            Some("text/plain"),
            Some("https://e")
        )));
    }

    #[test]
    fn vision_models_are_known_by_name() {
        for m in [
            "gpt-4o-mini",
            "gpt-4.1",
            "o3-mini",
            "claude-3-5-sonnet-latest",
            "claude-sonnet-4-5",
            "gemini-2.0-flash",
            "llava:13b",
            "meta-llama/llama-3.2-11b-vision-instruct",
            "qwen2.5-vl-7b",
        ] {
            assert!(takes_images(m), "{m}");
        }
        for m in [
            "gpt-3.5-turbo",
            "llama3.1:8b",
            "mistral-small",
            "deepseek-chat",
        ] {
            assert!(!takes_images(m), "{m}");
        }
        assert!(sees(Vision::On, "gpt-3.5-turbo"));
        assert!(!sees(Vision::Off, "gpt-4o"));
        assert!(sees(Vision::Auto, "gpt-4o"));
    }

    fn with_image() -> Inbound {
        let mut m = crate::rooms::tests::msg(troupe_connectors::Platform::Web, "what is this?");
        let (reference, _) = reference(PNG);
        m.attachments
            .push(stored_attachment(1, "image/png", PNG.len(), reference));
        m
    }

    #[test]
    fn the_prompt_gets_images_and_a_line_for_each_unseen_or_refused_one() {
        let blank = || Prompt {
            system: String::new(),
            user: "what is this?".into(),
            images: Vec::new(),
        };
        let mut p = blank();
        attach(
            &mut p,
            Seen {
                images: vec![crate::persona::PromptImage {
                    mime: "image/png",
                    base64: std::sync::Arc::from("iVBOR"),
                }],
                ..Seen::default()
            },
        );
        assert_eq!(p.images.len(), 1);
        assert_eq!(p.user, "what is this?");
        let mut p = blank();
        attach(
            &mut p,
            Seen {
                unseen: vec!["image/png, 1 KB".into()],
                refused: vec![
                    "huge.png (the image is over 5 bytes (TROUPE_MEDIA_MAX_BYTES))".into(),
                ],
                ..Seen::default()
            },
        );
        assert!(p.images.is_empty());
        assert!(
            p.user.contains("image/png, 1 KB, that you cannot see"),
            "{}",
            p.user
        );
        assert!(
            p.user
                .contains("not taken: huge.png (the image is over 5 bytes"),
            "{}",
            p.user
        );
        let mut p = blank();
        attach(&mut p, Seen::default());
        assert_eq!(p, blank());
    }

    #[test]
    fn memory_keeps_a_description_not_the_bytes() {
        let m = with_image();
        let kept = remembered(&m);
        assert_eq!(kept, "what is this?\n[image: image/png, 1 KB]");
        let plain = crate::rooms::tests::msg(troupe_connectors::Platform::Web, "hi");
        assert!(matches!(remembered(&plain), Cow::Borrowed("hi")));
    }
}
