//! Discord files a message carries (image attachments, image embeds), fetched for the
//! gateway with the connector's own client. Only Discord's own hosts count as its files:
//! its CDN (`cdn.discordapp.com`), its media proxy (`media.discordapp.net`) and, when
//! `DISCORD_API_URL` is set (a proxy, a test double), that origin. Any other URL is a link
//! someone typed, which the gateway fetches under its fetch policy. No token goes to the
//! CDN: its URLs are signed.

use reqwest::Url;

use super::DiscordConnector;
use crate::files::{FileError, read_capped};
use crate::model::Attachment;

/// Discord's hosts for files.
const HOSTS: [&str; 2] = ["cdn.discordapp.com", "media.discordapp.net"];

impl DiscordConnector {
    /// Whether `url` is one of Discord's own files.
    fn is_own(&self, url: &Url) -> bool {
        let discord = url.scheme() == "https" && url.host_str().is_some_and(|h| HOSTS.contains(&h));
        let configured = self.settings.custom_url && url.origin() == self.settings.api_url.origin();
        discord || configured
    }

    /// The bytes of `attachment` when it is a Discord file, at most `cap` of them.
    pub(super) async fn download(
        &self,
        attachment: &Attachment,
        cap: usize,
    ) -> Result<Option<Vec<u8>>, FileError> {
        let Some(url) = attachment.url.as_deref().and_then(|u| Url::parse(u).ok()) else {
            return Ok(None);
        };
        if !self.is_own(&url) {
            return Ok(None);
        }
        if attachment.size.is_some_and(|s| s > cap as u64) {
            return Err(FileError::TooLarge { cap });
        }
        let response =
            self.rest.client().get(url).send().await.map_err(|e| {
                FileError::Failed(format!("the download failed ({})", e.without_url()))
            })?;
        if !response.status().is_success() {
            return Err(FileError::Failed(format!(
                "Discord's CDN answered {}",
                response.status()
            )));
        }
        read_capped(response, cap).await.map(Some)
    }
}
