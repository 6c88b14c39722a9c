//! Images in messages (issue 32): what an image is allowed to be, how it reaches the model,
//! and what the room remembers of it.
//!
//! An image enters as bytes a stranger chose. They are taken only under
//! `TROUPE_MEDIA_MAX_BYTES`, fetched (for a link) through the fetch policy (`crate::fetch`:
//! no internal addresses, bounded time and redirects), and their type is read from their
//! magic number (PNG, JPEG, GIF, WebP), never from what the sender claims. The gateway never
//! decodes an image: the bytes go to the model as they came, so no crafted file can crash a
//! decoder in this process.
//!
//! An accepted image rides in the message's attachment as a `data:` URL, so the journal holds
//! it (a redelivered message still has its image). The room's memory keeps a short
//! description instead (`remembered`), never the bytes.
//!
//! Which models take images: `TROUPE_VISION=auto` sends images to the models in
//! [`takes_images`]'s list; `on` sends them to every model, `off` to none. A model that does
//! not take them gets a line saying an image was sent that it cannot see, so the persona
//! does not pretend.

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use troupe_connectors::{Attachment, Inbound};

use crate::config::Vision;
use crate::fetch::{FetchError, Fetcher};
use crate::persona::{Prompt, PromptImage};

/// At most this many images per message: a model's context and the journal row stay small.
pub const MAX_IMAGES: usize = 4;

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
    #[error("the image could not be fetched: {0}")]
    Fetch(FetchError),
}

/// The image type of `bytes`, from their magic number; `None` for anything else.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, ..] => Some("image/png"),
        [0xff, 0xd8, 0xff, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some("image/gif"),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Some("image/webp"),
        _ => None,
    }
}

/// Checks image bytes and makes them an attachment (`image-<n>.<ext>`, a `data:` URL).
pub fn image_attachment(n: usize, bytes: &[u8], cap: usize) -> Result<Attachment, MediaError> {
    if bytes.len() > cap {
        return Err(MediaError::TooLarge { cap });
    }
    let mime = sniff(bytes).ok_or(MediaError::NotAnImage)?;
    let ext = mime.trim_start_matches("image/");
    Ok(Attachment {
        name: format!("image-{n}.{ext}"),
        mime: Some(mime.to_string()),
        size: Some(bytes.len() as u64),
        url: Some(format!("data:{mime};base64,{}", STANDARD.encode(bytes))),
    })
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

/// The accepted images of a message: attachments whose `data:` URL this module made.
fn images(inbound: &Inbound) -> impl Iterator<Item = (&Attachment, &'static str, &str)> {
    inbound.attachments.iter().filter_map(|a| {
        let rest = a.url.as_deref()?.strip_prefix("data:")?;
        let (mime, data) = rest.split_once(";base64,")?;
        let mime = ["image/png", "image/jpeg", "image/gif", "image/webp"]
            .into_iter()
            .find(|m| *m == mime)?;
        Some((a, mime, data))
    })
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

/// Adds a message's images to its prompt: as image parts when the model takes them, as a
/// line saying so when it does not. A message without images is left as it is.
pub fn attach(prompt: &mut Prompt, inbound: &Inbound, vision: Vision, model: &str) {
    if inbound.attachments.is_empty() || vision == Vision::Off {
        return;
    }
    let sees = vision == Vision::On || takes_images(model);
    for (a, mime, data) in images(inbound) {
        if sees {
            prompt.images.push(PromptImage {
                mime,
                base64: Arc::from(data),
            });
        } else {
            prompt.user.push_str(&format!(
                "\n(The sender attached an image, {}, that you cannot see: say so if it matters.)",
                describe(a, mime)
            ));
        }
    }
}

/// `image/png, 12 KB`.
fn describe(a: &Attachment, mime: &str) -> String {
    let kb = a.size.unwrap_or(0).div_ceil(1024);
    format!("{mime}, {kb} KB")
}

/// The text the room remembers for a message: its text, plus one short line per image
/// (`[image: image/png, 12 KB]`). Borrowed, at no cost, for a message without images.
pub fn remembered(inbound: &Inbound) -> Cow<'_, str> {
    if inbound.attachments.is_empty() {
        return Cow::Borrowed(&inbound.text);
    }
    let mut text = inbound.text.clone();
    for (a, mime, _) in images(inbound) {
        text.push_str(&format!("\n[image: {}]", describe(a, mime)));
    }
    Cow::Owned(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];

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
    fn an_attachment_is_checked_and_carried_as_data() {
        let a = image_attachment(1, PNG, 100).unwrap();
        assert_eq!(a.name, "image-1.png");
        assert_eq!(a.mime.as_deref(), Some("image/png"));
        assert!(a.url.unwrap().starts_with("data:image/png;base64,iVBOR"));
        assert!(matches!(
            image_attachment(1, PNG, 5),
            Err(MediaError::TooLarge { cap: 5 })
        ));
        assert!(matches!(
            image_attachment(1, b"%PDF-1.7", 100),
            Err(MediaError::NotAnImage)
        ));
        assert!(matches!(
            decode_data(&"A".repeat(400), 100),
            Err(MediaError::TooLarge { .. })
        ));
        assert!(matches!(decode_data("!!", 100), Err(MediaError::BadBase64)));
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
    }

    fn with_image() -> Inbound {
        let mut m = crate::rooms::tests::msg(troupe_connectors::Platform::Web, "what is this?");
        m.attachments.push(image_attachment(1, PNG, 100).unwrap());
        m
    }

    #[test]
    fn images_reach_a_seeing_model_and_a_line_reaches_the_others() {
        let m = with_image();
        let blank = || Prompt {
            system: String::new(),
            user: "what is this?".into(),
            images: Vec::new(),
        };
        let mut p = blank();
        attach(&mut p, &m, Vision::Auto, "gpt-4o-mini");
        assert_eq!(p.images.len(), 1);
        assert_eq!(p.images[0].mime, "image/png");
        assert_eq!(p.user, "what is this?");
        let mut p = blank();
        attach(&mut p, &m, Vision::Auto, "gpt-3.5-turbo");
        assert!(p.images.is_empty());
        assert!(p.user.contains("cannot see"), "{}", p.user);
        let mut p = blank();
        attach(&mut p, &m, Vision::On, "gpt-3.5-turbo");
        assert_eq!(p.images.len(), 1);
        let mut p = blank();
        attach(&mut p, &m, Vision::Off, "gpt-4o");
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
