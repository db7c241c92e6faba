use super::*;

/// A CA and a certificate it signed for 127.0.0.1, as PEM files in `dir`;
/// returns (ca, server files).
pub fn make_pki(dir: &Path, name: &str) -> (PathBuf, ServerFiles) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} CA"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let ca_path = dir.join(format!("{name}-ca.pem"));
    let files = ServerFiles {
        cert: dir.join(format!("{name}-cert.pem")),
        key: dir.join(format!("{name}-key.pem")),
    };
    std::fs::write(&ca_path, ca.pem()).unwrap();
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    (ca_path, files)
}

async fn serve(files: &ServerFiles) -> SocketAddr {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = TlsListener::new(tcp, server_config(files).unwrap());
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test]
async fn a_client_trusting_the_ca_is_served_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, files) = make_pki(dir.path(), "good");
    let (other_ca, _) = make_pki(dir.path(), "other");
    let addr = serve(&files).await;
    let url = format!("https://{addr}/");
    let good = http_client(Some(&ca)).unwrap();
    let body = good.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!(body, "ok");
    let wrong = http_client(Some(&other_ca)).unwrap();
    assert!(wrong.get(&url).send().await.is_err(), "another CA's client");
    // Plain HTTP to the TLS port gets no answer.
    let plain = reqwest::Client::new();
    let r = plain.get(format!("http://{addr}/")).send().await;
    assert!(r.is_err() || !r.unwrap().status().is_success());
    // A stalled handshake does not hold up the next client.
    let _stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = good.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!(body, "ok");
}

#[test]
fn bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, files) = make_pki(dir.path(), "a");
    let (_, other) = make_pki(dir.path(), "b");
    let swapped = ServerFiles {
        cert: files.cert.clone(),
        key: other.key.clone(),
    };
    let e = server_config(&swapped).unwrap_err().to_string();
    assert!(e.contains("do not go together"), "{e}");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let e = client_config(&empty).unwrap_err().to_string();
    assert!(e.contains("empty.pem"), "{e}");
    let missing = ServerFiles {
        cert: dir.path().join("nope.pem"),
        key: files.key.clone(),
    };
    assert!(server_config(&missing)
        .unwrap_err()
        .to_string()
        .contains("nope.pem"));
    assert!(client_config(&ca).is_ok());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = server_config(&files).unwrap_err().to_string();
    assert!(e.contains("chmod 600"), "{e}");
    assert!(matches!(
        ServerFiles::from_flags(Some(&files.cert), None),
        Err(TlsError::Half)
    ));
}

#[test]
fn plain_http_only_on_loopback_unless_allowed() {
    let lo: SocketAddr = "127.0.0.1:6817".parse().unwrap();
    let any: SocketAddr = "0.0.0.0:6817".parse().unwrap();
    let lan: SocketAddr = "10.0.0.1:6817".parse().unwrap();
    assert!(check_plain_allowed("--listen", lo, false, false).is_ok());
    assert!(check_plain_allowed("--listen", any, false, false).is_err());
    assert!(check_plain_allowed("--listen", lan, false, false).is_err());
    assert!(check_plain_allowed("--listen", lan, true, false).is_ok());
    assert!(check_plain_allowed("--listen", lan, false, true).is_ok());
}
