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
mod tests {
    use super::*;

    /// The provider is what makes a client buildable: without it reqwest panics at `build`.
    #[test]
    fn a_client_builds_and_ring_is_the_provider() {
        let client = http_client().build();
        assert!(client.is_ok(), "{client:?}");
        let provider = rustls::crypto::CryptoProvider::get_default().expect("installed");
        let ring = rustls::crypto::ring::default_provider();
        assert_eq!(
            provider.cipher_suites.len(),
            ring.cipher_suites.len(),
            "the installed provider is ring's"
        );
    }

    /// An https request to something that is not a TLS server fails as an error, not a
    /// panic: the TLS stack is wired all the way to the handshake.
    #[tokio::test]
    async fn a_failed_handshake_is_an_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let (mut socket, _) = listener.accept().await.unwrap();
            let _ = socket.write_all(b"HTTP/1.1 200 OK\r\n\r\nplain text").await;
        });
        let client = http_client().no_proxy().build().unwrap();
        let err = client
            .get(format!("https://{addr}/"))
            .send()
            .await
            .expect_err("not a TLS server");
        assert!(err.is_connect() || err.is_request(), "{err:?}");
        server.await.unwrap();
    }
}
