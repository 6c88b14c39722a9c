//! The process's one TLS crypto provider, and the HTTP client builder that relies on it.
//!
//! Every TLS stack in troupe (reqwest 0.13 here and in the gateway, reqwest 0.12 inside
//! serenity and teloxide, async-nats, serenity's gateway WebSocket) runs on `ring`. reqwest
//! 0.13's `rustls` feature would add a second provider, aws-lc-rs: 1.5 MB of C in the binary
//! and a C build for every fresh machine, for nothing ring does not do. Built with
//! `rustls-no-provider` instead, reqwest takes the process default, and panics when there is
//! none. So every reqwest client is built through [`http_client`], which installs ring
//! first; `clippy.toml` forbids `reqwest::Client::builder` and `new` everywhere else.

/// Installs `ring` as the process-wide rustls provider, unless one is installed already.
/// Cheap after the first call; safe from any thread.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first (an embedder's choice): keep it.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder whose TLS is ready: build every HTTP client from this.
#[cfg(any(feature = "farcaster", feature = "discord"))]
#[allow(clippy::disallowed_methods)] // the one place allowed to call it
pub fn http_client() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

#[cfg(all(test, any(feature = "farcaster", feature = "discord")))]
#[path = "tls_tests.rs"]
mod tests;
