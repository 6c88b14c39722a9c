//! `multipart/form-data` bodies (RFC 7578) for the uploads troupe makes of audio it did not
//! write: a Discord voice message (`discord::voice`) and a voice note sent to a provider's
//! `/audio/transcriptions` (the gateway's `media::voice`). The bytes are a model's or a
//! stranger's, so the boundary is checked against them rather than hoped absent. Written
//! here, not with reqwest's `multipart` feature, because the bodies are small, whole in
//! memory already, and their exact shape is what the unit tests and the fakes read.

/// One part of a form: its field `name`, a `filename` for a file, its `content_type` when
/// it has one, and its bytes. Names and file names are the caller's to make safe.
pub struct Part<'a> {
    pub name: &'a str,
    pub filename: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

/// A boundary that does not occur in `bytes` (checked, not hoped for).
pub fn boundary(bytes: &[u8]) -> String {
    let mut salt = bytes.len() as u64;
    loop {
        let candidate = format!("troupe-voice-{salt:016x}");
        if !bytes
            .windows(candidate.len())
            .any(|w| w == candidate.as_bytes())
        {
            return candidate;
        }
        salt = salt.wrapping_mul(0x0100_0000_01b3).wrapping_add(1);
    }
}

/// The body of a form of `parts`, separated by `boundary`.
pub fn form(boundary: &str, parts: &[Part<'_>]) -> Vec<u8> {
    let size: usize = parts.iter().map(|p| p.body.len() + 256).sum();
    let mut body = Vec::with_capacity(size);
    for part in parts {
        let mut head = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"",
            part.name
        );
        if let Some(file) = part.filename {
            head.push_str(&format!("; filename=\"{file}\""));
        }
        if let Some(kind) = part.content_type {
            head.push_str(&format!("\r\nContent-Type: {kind}"));
        }
        head.push_str("\r\n\r\n");
        body.extend_from_slice(head.as_bytes());
        body.extend_from_slice(part.body);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}
