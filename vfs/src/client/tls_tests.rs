//! https through a rustls server on 127.0.0.1 whose certificate a private test CA signed.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::*;
use crate::token::tests::TempFile;

// A throwaway CA and a leaf for localhost and 127.0.0.1 it signed (valid 2000 to 2126), made
// with openssl for these tests only.
const TEST_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBoTCCAUegAwIBAgIUMfmHecmsDXOEtwQvSPbAe9o5THQwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSdXJzdWxhLXZmcyB0ZXN0IENBMCAXDTI2MTEyOTIwMDEwN1oY
DzIxMjYxMTA1MjAwMTA3WjAdMRswGQYDVQQDDBJ1cnN1bGEtdmZzIHRlc3QgQ0Ew
WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAARvWUmiu7gSmLQYftN556RwVskuRx0G
s1lXJqcltvt8J1N6Wm8ra9iIx/clCrlFpvITqkMETYKLVnfOF1PeUrbYo2MwYTAd
BgNVHQ4EFgQUs3bBFlbTcwTDQfep/Bg1rNx/+nQwHwYDVR0jBBgwFoAUs3bBFlbT
cwTDQfep/Bg1rNx/+nQwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAgQw
CgYIKoZIzj0EAwIDSAAwRQIhANWcKd2Y/1duDa1niaY/nelTHFHqpjNYq6yAWNZW
PWUNAiB3ZiMQywbtSyoA4rTAh4KPxI08tbsygxqfr+R254LPcA==
-----END CERTIFICATE-----
";

const TEST_LEAF: &str = "-----BEGIN CERTIFICATE-----
MIIBtzCCAVygAwIBAgICEAAwCgYIKoZIzj0EAwIwHTEbMBkGA1UEAwwSdXJzdWxh
LXZmcyB0ZXN0IENBMCAXDTAwMDEwMTAwMDAwMFoYDzIxMjYwMTAxMDAwMDAwWjAU
MRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASh
Ie7+2Ctn1WBC+K/5yjmKAW+cAJGB+vAUQmS/ujqkTavDo7RShTKRP+KEeeDD7Ogz
2TZiG/QhnypTwCj9vIlKo4GSMIGPMBoGA1UdEQQTMBGCCWxvY2FsaG9zdIcEfwAA
ATAMBgNVHRMBAf8EAjAAMA4GA1UdDwEB/wQEAwIHgDATBgNVHSUEDDAKBggrBgEF
BQcDATAdBgNVHQ4EFgQUeKBRZQoXbmiS4j3HnthVBJiySPwwHwYDVR0jBBgwFoAU
s3bBFlbTcwTDQfep/Bg1rNx/+nQwCgYIKoZIzj0EAwIDSQAwRgIhAOGMA4zm8cJt
x2bByT82PuEYlpe33FzbLSxnDlIpaBVwAiEA0JvFDRzPAvCoyW9zbWGGGcJ3AIJa
X1g22iBsqnLqDLU=
-----END CERTIFICATE-----
";

const TEST_LEAF_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgTp5/bnmOblCygC76
kXwrjU3lJkuzJ7aFRlsL6jsHXfuhRANCAAShIe7+2Ctn1WBC+K/5yjmKAW+cAJGB
+vAUQmS/ujqkTavDo7RShTKRP+KEeeDD7Ogz2TZiG/QhnypTwCj9vIlK
-----END PRIVATE KEY-----
";

/// Serves https on 127.0.0.1, answering every request
/// `200 secure`; returns the port.
fn tls_server() -> u16 {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(TEST_LEAF.as_bytes())
        .collect::<Result<_, _>>()
        .expect("leaf pem");
    let key = PrivateKeyDer::from_pem_slice(TEST_LEAF_KEY.as_bytes()).expect("key pem");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("local addr").port();
    thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let config = Arc::clone(&config);
            // A thread per connection: the client keeps each one open in its pool.
            thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).expect("server conn");
                let mut tls = BufReader::new(rustls::StreamOwned::new(conn, tcp));
                loop {
                    let mut line = String::new();
                    match tls.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) if line == "\r\n" => {
                            let out = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecure";
                            if tls.get_mut().write_all(out).is_err() {
                                break;
                            }
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    port
}

fn config(ca_file: Option<PathBuf>) -> ClientConfig {
    ClientConfig {
        resolve_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(2),
        long_request_timeout: Duration::from_secs(2),
        idle: Duration::from_secs(5),
        ca_file,
        proxy: None,
        tokens: Arc::new(Tokens::new(None)),
        dns: DnsPolicy::default(),
    }
}

/// A client whose roots are the certificates in `ca_pem`, written to a file that goes with it,
/// or the bundled roots.
fn client(ca_pem: Option<&str>) -> (Option<TempFile>, Client) {
    let ca = ca_pem.map(|pem| {
        let f = TempFile::new("ca");
        f.write(pem);
        f
    });
    let c = Client::with_config(config(ca.as_ref().map(|f| f.0.clone())));
    (ca, c)
}

#[test]
fn ca_file_is_trusted() {
    let port = tls_server();
    let (_ca, c) = client(Some(TEST_CA));
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("https://{host}:{port}/s");
        match c.send(&Request::new(Method::Get, &url)) {
            Attempt::Answered(a) => {
                assert_eq!((a.status, a.body.as_slice()), (200, &b"secure"[..]))
            }
            other => panic!("{host}: {other:?}"),
        }
    }
}

#[test]
fn bundled_roots_refuse_a_private_ca_before_sending() {
    let port = tls_server();
    let (_, c) = client(None);
    let url = format!("https://localhost:{port}/s");
    match c.send(&Request::new(Method::Put, &url)) {
        Attempt::NeverSent(why) => {
            assert_eq!(why, "io: invalid peer certificate: UnknownIssuer")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ca_file_trusts_only_its_own_cas() {
    let port = tls_server();
    // A bundle that holds only a CA that did not sign the server's certificate: the leaf
    // itself, which is no CA.
    let (_ca, c) = client(Some(TEST_LEAF));
    let url = format!("https://localhost:{port}/s");
    assert!(matches!(
        c.send(&Request::new(Method::Get, &url)),
        Attempt::NeverSent(_)
    ));
}

#[test]
fn stalled_tls_handshake_times_out_as_never_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("local addr").port();
    thread::spawn(move || {
        let held = listener.accept();
        thread::sleep(Duration::from_secs(3));
        drop(held);
    });
    let (_, c) = client(None);
    let url = format!("https://127.0.0.1:{port}/");
    match c.send(&Request::new(Method::Get, &url)) {
        Attempt::NeverSent(why) => assert!(why.starts_with("timeout"), "{why}"),
        other => panic!("{other:?}"),
    }
}
