//! What a client built by [`http_client`] does in a handshake: it completes one with a server
//! it trusts, refuses one whose certificate it cannot trust, offers only TLS 1.2 and 1.3
//! with AEAD suites and ring's key exchange groups, and refuses a server that picks an older
//! version. The servers are real: rustls (ring) for the handshakes that succeed, and a few
//! bytes written by hand for the one that picks TLS 1.0 or 1.1, which rustls cannot speak.

use super::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A test CA, and the certificate it signed for `localhost` and 127.0.0.1 with its key
/// (P-256, made with openssl, valid from 2000 to 2125): `connectors/testdata/tls/`.
const CA: &[u8] = include_bytes!("../testdata/tls/ca.der");
const CERT: &[u8] = include_bytes!("../testdata/tls/localhost.der");
const KEY: &[u8] = include_bytes!("../testdata/tls/localhost.key.der");

/// A client from [`http_client`] that trusts the test CA and nothing else.
fn trusting_the_test_ca() -> reqwest::Client {
    let ca = reqwest::Certificate::from_der(CA).expect("the test CA");
    http_client()
        .no_proxy()
        .tls_certs_only([ca])
        .build()
        .unwrap()
}

/// A rustls server speaking only `versions`, answering one https request with the version
/// and the suite it negotiated (`TLSv1_3 TLS13_AES_256_GCM_SHA384`).
fn serve_once(versions: &[&'static rustls::SupportedProtocolVersion]) -> SocketAddr {
    use std::io::{Read, Write};
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .expect("versions ring speaks")
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(CERT.to_vec())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(KEY.to_vec())),
    )
    .expect("the test certificate and key");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (socket, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, socket);
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match tls.read(&mut buf) {
                Ok(0) | Err(_) => return, // the client gave up on the handshake
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let said = format!(
            "{:?} {:?}",
            tls.conn.protocol_version().expect("negotiated"),
            tls.conn
                .negotiated_cipher_suite()
                .expect("negotiated")
                .suite()
        );
        let _ = write!(
            tls,
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{said}",
            said.len()
        );
        tls.conn.send_close_notify();
        let _ = tls.flush();
    });
    addr
}

/// The provider is what makes a client buildable: without it reqwest panics at `build`.
#[test]
fn a_client_builds() {
    let client = http_client().build();
    assert!(client.is_ok(), "{client:?}");
}

/// A server the client trusts, speaking TLS 1.3 or only TLS 1.2: the handshake completes
/// on an AEAD suite and the request is answered.
#[tokio::test]
async fn a_handshake_with_a_trusted_server_succeeds_in_tls_1_3_and_1_2() {
    for (version, expected) in [
        (&rustls::version::TLS13, "TLSv1_3 TLS13_"),
        (&rustls::version::TLS12, "TLSv1_2 TLS_ECDHE_ECDSA_WITH_"),
    ] {
        let addr = serve_once(&[version]);
        let answer = trusting_the_test_ca()
            .get(format!("https://{addr}/"))
            .send()
            .await
            .expect("a handshake with a server the client trusts");
        let said = answer.text().await.unwrap();
        assert!(said.starts_with(expected), "{said}");
    }
}

/// A certificate that no root the client trusts has signed: the handshake fails, as an
/// error. (The client trusts the platform's roots; the test CA is not one of them.)
#[tokio::test]
async fn a_server_the_client_cannot_trust_is_refused() {
    let addr = serve_once(&[&rustls::version::TLS13]);
    let client = http_client().no_proxy().build().unwrap();
    let err = client
        .get(format!("https://{addr}/"))
        .send()
        .await
        .expect_err("a certificate from an unknown CA");
    assert!(err.is_connect(), "{err:?}");
}

/// What the client offered in its ClientHello.
#[derive(Debug, Default)]
struct Offer {
    session_id: Vec<u8>,
    suites: Vec<u16>,
    /// The `supported_versions` extension.
    versions: Vec<u16>,
    /// The `supported_groups` extension.
    groups: Vec<u16>,
}

/// Reads one TLS record: its content type and its body.
async fn read_record(socket: &mut tokio::net::TcpStream) -> (u8, Vec<u8>) {
    let mut header = [0u8; 5];
    socket.read_exact(&mut header).await.expect("a record");
    let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
    socket
        .read_exact(&mut body)
        .await
        .expect("the record's body");
    (header[0], body)
}

/// A big-endian reader over a handshake message.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
    fn u8(&mut self) -> usize {
        usize::from(self.take(1)[0])
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.take(1)[0], self.take(1)[0]])
    }
    fn list16(mut self) -> Vec<u16> {
        let mut out = Vec::new();
        while !self.0.is_empty() {
            out.push(self.u16());
        }
        out
    }
}

/// The offer in a ClientHello handshake message (RFC 8446, 4.1.2).
fn client_hello(message: &[u8]) -> Offer {
    let mut r = Bytes(message);
    assert_eq!(r.u8(), 1, "a ClientHello");
    r.take(3); // its length
    r.take(2 + 32); // legacy_version, random
    let n = r.u8();
    let mut offer = Offer {
        session_id: r.take(n).to_vec(),
        ..Offer::default()
    };
    let n = usize::from(r.u16());
    offer.suites = Bytes(r.take(n)).list16();
    let n = r.u8();
    r.take(n); // compression methods
    let n = usize::from(r.u16());
    let mut extensions = Bytes(r.take(n));
    while !extensions.0.is_empty() {
        let kind = extensions.u16();
        let n = usize::from(extensions.u16());
        let mut data = Bytes(extensions.take(n));
        match kind {
            0x002b => {
                let n = data.u8();
                offer.versions = Bytes(data.take(n)).list16();
            }
            0x000a => {
                let n = usize::from(data.u16());
                offer.groups = Bytes(data.take(n)).list16();
            }
            _ => {}
        }
    }
    offer
}

/// A ServerHello record that picks `version` (TLS 1.0 is 0x0301) and
/// TLS_RSA_WITH_AES_128_CBC_SHA, as an old server would.
fn old_server_hello(version: u16, session_id: &[u8]) -> Vec<u8> {
    let mut body = version.to_be_bytes().to_vec();
    body.extend([7u8; 32]); // random
    body.push(u8::try_from(session_id.len()).unwrap());
    body.extend(session_id);
    body.extend([0x00, 0x2f, 0x00]); // the suite, no compression
    let mut message = vec![2u8]; // ServerHello
    message.extend(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
    message.extend(body);
    let mut record = vec![22u8]; // handshake
    record.extend(version.to_be_bytes());
    record.extend(u16::try_from(message.len()).unwrap().to_be_bytes());
    record.extend(message);
    record
}

/// The TLS 1.3 and TLS 1.2 suites that are AEAD with forward secrecy (AES-GCM and
/// ChaCha20-Poly1305 over ECDHE), and the renegotiation SCSV rustls adds to say it never
/// renegotiates.
const MODERN_SUITES: [u16; 10] = [
    0x1301, 0x1302, 0x1303, 0xc02b, 0xc02c, 0xc02f, 0xc030, 0xcca8, 0xcca9, 0x00ff,
];

/// Offers a server that speaks only `version` a handshake, and returns what the client
/// offered and the record it answered the ServerHello with.
async fn offer_to_an_old_server(version: u16) -> (Offer, (u8, Vec<u8>)) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let (kind, hello) = read_record(&mut socket).await;
        assert_eq!(kind, 22, "the client opens with a handshake record");
        let offer = client_hello(&hello);
        let reply = old_server_hello(version, &offer.session_id);
        socket.write_all(&reply).await.unwrap();
        (offer, read_record(&mut socket).await)
    });
    let err = trusting_the_test_ca()
        .get(format!("https://{addr}/"))
        .send()
        .await
        .expect_err("an old protocol version is refused");
    assert!(err.is_connect(), "{err:?}");
    server.await.unwrap()
}

/// The client offers TLS 1.3 (and at most 1.2 beside it), AEAD suites only, and ring's key
/// exchange groups: were another provider (aws-lc-rs) installed in ring's place, it would
/// offer its post-quantum hybrid group too. A server that picks TLS 1.0 or 1.1 gets a fatal
/// `protocol_version` alert.
#[tokio::test]
async fn the_client_offers_modern_tls_only_and_refuses_an_older_version() {
    for version in [0x0301u16, 0x0302] {
        let (offer, (kind, answer)) = offer_to_an_old_server(version).await;
        assert!(offer.versions.contains(&0x0304), "{offer:?}");
        assert!(
            offer.versions.iter().all(|v| [0x0304, 0x0303].contains(v)),
            "only TLS 1.3 and 1.2: {offer:?}"
        );
        assert!(
            offer.suites.iter().all(|s| MODERN_SUITES.contains(s)),
            "only AEAD suites with forward secrecy: {offer:?}"
        );
        let ring: Vec<u16> = rustls::crypto::ring::default_provider()
            .kx_groups
            .iter()
            .map(|g| u16::from(g.name()))
            .collect();
        assert_eq!(offer.groups, ring, "ring's key exchange groups");
        assert_eq!(
            (kind, answer),
            (21, vec![2, 70]),
            "a fatal protocol_version alert to a server at {version:#06x}"
        );
    }
}

/// An https request to something that is not a TLS server fails as an error, not a
/// panic: the TLS stack is wired all the way to the handshake.
#[tokio::test]
async fn a_failed_handshake_is_an_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
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
