//! Telegram files a message carries (photos, image documents), fetched for the gateway:
//! `getFile` for the file's path, then the file URL `{TELEGRAM_API_ROOT}/file/bot<token>/<path>`
//! through teloxide's client. That URL carries the token, so no error or log line here
//! names it: the Bot API's errors are scrubbed (`errors::classify`), the download's are
//! stripped of their URL.

use teloxide::errors::DownloadError;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::FileId;

use super::TelegramConnector;
use super::errors;
use crate::files::{Capped, FileError, TELEGRAM_FILE};
use crate::model::Attachment;

impl TelegramConnector {
    /// The bytes of `attachment` when it is a Telegram file, at most `cap` of them.
    pub(super) async fn download(
        &self,
        attachment: &Attachment,
        cap: usize,
    ) -> Result<Option<Vec<u8>>, FileError> {
        let Some(file_id) = attachment
            .url
            .as_deref()
            .and_then(|u| u.strip_prefix(TELEGRAM_FILE))
        else {
            return Ok(None);
        };
        // The size Telegram announced is checked before anything is downloaded.
        if attachment.size.is_some_and(|s| s > cap as u64) {
            return Err(FileError::TooLarge { cap });
        }
        let file = self
            .bot
            .get_file(FileId(file_id.to_string()))
            .await
            .map_err(|e| {
                FileError::Failed(format!(
                    "getFile failed: {}",
                    errors::classify(&e, &self.config.token)
                ))
            })?;
        if file.meta.size as usize > cap {
            return Err(FileError::TooLarge { cap });
        }
        let mut into = Capped {
            bytes: Vec::new(),
            cap,
            over: false,
        };
        let downloaded = self.bot.download_file(&file.path, &mut into).await;
        match downloaded {
            Ok(()) => Ok(Some(into.bytes)),
            Err(_) if into.over => Err(FileError::TooLarge { cap }),
            // reqwest's error text names the URL, which carries the token: say what kind.
            Err(DownloadError::Network(e)) => Err(FileError::Failed(match e.status() {
                Some(status) => format!("the file download was answered {status}"),
                None if e.is_timeout() => "the file download timed out".into(),
                None => "the file download failed (network)".into(),
            })),
            Err(DownloadError::Io(e)) => {
                Err(FileError::Failed(format!("the file download failed ({e})")))
            }
        }
    }
}
