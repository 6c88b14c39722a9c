//! The user message of a call, with the prompt's images as image parts (issue 32). genai
//! turns a base64 binary part into each vendor's own image part (OpenAI's `image_url` with a
//! `data:` URL, Anthropic's `image` source, Gemini's `inline_data`). A prompt without images
//! is the plain text message it always was.

use genai::chat::{ChatMessage, ContentPart};

use crate::persona::Prompt;

pub(super) fn user_message(prompt: &Prompt) -> ChatMessage {
    if prompt.images.is_empty() {
        return ChatMessage::user(prompt.user.clone());
    }
    let mut parts = vec![ContentPart::from_text(prompt.user.clone())];
    parts.extend(
        prompt
            .images
            .iter()
            .map(|image| ContentPart::from_binary_base64(image.mime, image.base64.clone(), None)),
    );
    ChatMessage::user(parts)
}
