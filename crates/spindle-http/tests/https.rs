//! HTTPS: the TLS server against curl, Python's `ssl` + `http.client` and
//! spindle's own client, with a CA made at test time by `rcgen`; plain-TCP
//! probes, stalled handshakes and untrusting clients on the TLS port.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use spindle::Runtime;
use spindle_http::{tls, Body, Client, Request, Response, Server, ServerConfig};

/// A CA and a server certificate for `localhost` and 127.0.0.1 signed by
/// it, written as PEM files into a fresh directory.
struct Pki {
    dir: PathBuf,
    ca_pem: String,
}

impl Pki {
    fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("spindle-https-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "spindle test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
        Pki {
            dir,
            ca_pem: ca_cert.pem(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    fn server_config(&self) -> Arc<tls::rustls::ServerConfig> {
        tls::server_config_from_pem_files(self.dir.join("cert.pem"), self.dir.join("key.pem"))
            .unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `/echo` streams the request body back; `/big` is a full body of
/// 200 000 bytes (`i % 251`); anything else answers with the method, path
/// and body length.
fn handler(req: Request<Body>) -> Response<Body> {
    if req.uri().path() == "/echo" {
        return Response::new(Body::from_reader(req.into_body()));
    }
    if req.uri().path() == "/big" {
        let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        return Response::new(Body::from(body));
    }
    let (method, path) = (req.method().to_string(), req.uri().path().to_string());
    let mut body = Vec::new();
    req.into_body().read_to_end(&mut body).unwrap();
    Response::new(Body::from(format!("{method} {path} {}", body.len())))
}

fn start(
    rt: &Runtime,
    pki: &Pki,
    config: ServerConfig,
) -> (SocketAddr, Arc<AtomicUsize>, spindle_http::ServerHandle) {
    let tls = pki.server_config();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let (addr, handle) = rt.run(move || {
        let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = Server::from_listener(listener).config(config).tls(tls);
        let handle = server.handle();
        spindle::spawn(move || {
            server.serve(move |req| {
                counted.fetch_add(1, Ordering::SeqCst);
                handler(req)
            })
        });
        (addr, handle)
    });
    (addr, accepted, handle)
}

fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn curl_over_tls_with_alpn_keep_alive_and_chunked_upload() {
    let pki = Pki::new("curl");
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _, _) = start(&rt, &pki, ServerConfig::default());
    let url = format!("https://localhost:{}/hello", addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", addr.port());
    let ca = pki.path("ca.pem");

    // Two requests on one connection; ALPN settles on http/1.1 when the
    // client offers only that...
    let (ok, out, err) = curl(&[
        "-v",
        "--http1.1",
        "--cacert",
        &ca,
        "--resolve",
        &resolve,
        &url,
        &url,
    ]);
    assert!(ok, "curl failed: {err}");
    assert_eq!(out, "GET /hello 0GET /hello 0");
    assert!(err.contains("ALPN: server accepted http/1.1"), "{err}");
    assert!(
        err.contains("Re-using existing connection") || err.contains("Reusing existing"),
        "{err}"
    );
    // ...and on h2 when it offers both, as curl does by default.
    let (ok, out, err) = curl(&["-v", "--cacert", &ca, "--resolve", &resolve, &url, &url]);
    assert!(ok, "curl failed: {err}");
    assert_eq!(out, "GET /hello 0GET /hello 0");
    assert!(err.contains("ALPN: server accepted h2"), "{err}");
    assert!(
        err.contains("Re-using existing connection") || err.contains("Reusing existing"),
        "{err}"
    );

    // A chunked upload, and an echo streamed back chunked.
    let body = "x".repeat(100_000);
    let (ok, out, err) = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &resolve,
        "-H",
        "Transfer-Encoding: chunked",
        "--data-binary",
        &body,
        &format!("https://localhost:{}/echo", addr.port()),
    ]);
    assert!(ok, "curl failed: {err}");
    assert_eq!(out.len(), body.len());
    assert!(out == body);

    // By IP address too (the certificate names 127.0.0.1).
    let (ok, out, err) = curl(&[
        "--cacert",
        &ca,
        &format!("https://127.0.0.1:{}/ip", addr.port()),
    ]);
    assert!(ok, "curl failed: {err}");
    assert_eq!(out, "GET /ip 0");
}

#[test]
fn python_ssl_keep_alive_and_upload() {
    let pki = Pki::new("python");
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _, _) = start(&rt, &pki, ServerConfig::default());
    let script = format!(
        r#"
import http.client, ssl
ctx = ssl.create_default_context(cafile={ca:?})
ctx.set_alpn_protocols(["http/1.1"])
c = http.client.HTTPSConnection("localhost", {port}, context=ctx, timeout=10)
for i in range(20):
    c.request("POST", "/n%d" % i, body=b"y" * (i * 1000))
    r = c.getresponse()
    assert r.status == 200, r.status
    assert r.read() == b"POST /n%d %d" % (i, i * 1000)
assert c.sock.selected_alpn_protocol() == "http/1.1"
c.request("POST", "/echo", body=b"z" * 300000)
r = c.getresponse()
assert r.read() == b"z" * 300000
big = bytes(i % 251 for i in range(200000))
for i in range(3):
    c.request("GET", "/big")
    r = c.getresponse()
    assert r.getheader("content-length") == "200000", r.getheaders()
    assert r.read() == big
    c.request("GET", "/after%d" % i)
    r = c.getresponse()
    assert r.read() == b"GET /after%d 0" % i
print("ok")
"#,
        ca = pki.path("ca.pem"),
        port = addr.port()
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

#[test]
fn plain_probes_stalled_handshakes_and_untrusting_clients_fail_alone() {
    let pki = Pki::new("probe");
    let rt = Runtime::builder().workers(1).build().unwrap();
    let config = ServerConfig::default().header_read_timeout(Duration::from_millis(500));
    let (addr, _, _) = start(&rt, &pki, config);
    let ca_pem = pki.ca_pem.clone();

    // A keep-alive HTTPS client running throughout, on its own runtime.
    let client_rt = Runtime::builder().workers(1).build().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let steady = client_rt.spawn(move || {
        let client =
            Client::new().tls_config(tls::client_config_with_ca_pem(ca_pem.as_bytes()).unwrap());
        let url = format!("https://localhost:{}/steady", addr.port());
        let mut n = 0;
        while !stop2.load(Ordering::SeqCst) {
            let resp = client.get(&url).expect("the steady client sees no error");
            assert_eq!(resp.into_body().into_vec().unwrap(), b"GET /steady 0");
            n += 1;
            spindle::time::sleep(Duration::from_millis(5));
        }
        n
    });

    // Several silent peers that never start a handshake: each holds only
    // its own fiber, until the header timeout closes it.
    let silent: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();

    // A plain-HTTP request on the TLS port: refused, connection closed.
    let mut probe = TcpStream::connect(addr).unwrap();
    probe
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    probe
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = probe.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("HTTP/1.1 200"),
        "plain HTTP must not be served on the TLS port"
    );

    // Garbage bytes that look like a TLS record header.
    let mut junk = TcpStream::connect(addr).unwrap();
    junk.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    junk.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5])
        .unwrap();
    let _ = junk.read_to_end(&mut Vec::new());

    // curl without the CA: verification fails on its side.
    let (ok, _, err) = curl(&[&format!("https://localhost:{}/", addr.port())]);
    assert!(!ok, "an untrusting curl must fail");
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    // Spindle's default client (webpki roots) does not trust the test CA.
    let untrusting = client_rt.run(move || {
        Client::new()
            .get(&format!("https://localhost:{}/", addr.port()))
            .map(|_| ())
    });
    let e = untrusting.expect_err("the webpki roots do not include the test CA");
    assert_eq!(e.kind(), spindle_http::ErrorKind::TlsCertificate, "{e}");
    assert!(e.is_tls() && !e.is_connect());

    // The silent peers are closed at the header timeout.
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 16];
        let r = s.read(&mut b);
        assert!(matches!(r, Ok(0)) || r.is_err(), "silent peer got {r:?}");
    }

    stop.store(true, Ordering::SeqCst);
    let served = steady.join().unwrap();
    assert!(served > 10, "steady client made {served} requests");
}

#[test]
fn spindle_client_https_reuses_pooled_connections() {
    let pki = Pki::new("client");
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, handled, handle) = start(&rt, &pki, ServerConfig::default());
    let ca_pem = pki.ca_pem.clone();
    let port = addr.port();
    // From a fiber: GETs and POSTs on one pooled TLS connection.
    rt.run(move || {
        let client =
            Client::new().tls_config(tls::client_config_with_ca_pem(ca_pem.as_bytes()).unwrap());
        for i in 0..50 {
            let resp = client
                .post(
                    &format!("https://localhost:{port}/p{i}"),
                    vec![7u8; i * 100],
                )
                .unwrap();
            assert_eq!(resp.status(), 200);
            let text = String::from_utf8(resp.into_body().into_vec().unwrap()).unwrap();
            assert_eq!(text, format!("POST /p{i} {}", i * 100));
        }
        // One TCP connection carried them all: the pool reused it.
        assert_eq!(
            handle.connections(),
            1,
            "the pool did not reuse its connection"
        );
    });
    assert_eq!(handled.load(Ordering::SeqCst), 50);
    // From a plain thread, the same client type blocks instead of parking.
    let ca_pem = pki.ca_pem.clone();
    let resp = std::thread::spawn(move || {
        Client::new()
            .tls_config(tls::client_config_with_ca_pem(ca_pem.as_bytes()).unwrap())
            .get(&format!("https://127.0.0.1:{port}/thread"))
            .unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(resp.into_body().into_vec().unwrap(), b"GET /thread 0");
}

#[test]
fn bad_pem_is_a_clear_error() {
    let e = tls::server_config_from_pem(b"not a pem", b"nor this").unwrap_err();
    assert!(e.to_string().contains("certificate chain"), "{e}");
    let e = tls::client_config_with_ca_pem(b"").unwrap_err();
    assert!(e.to_string().contains("CA certificate"), "{e}");
    let e = tls::server_config_from_pem_files("/nonexistent/cert.pem", "/nonexistent/key.pem")
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/cert.pem"), "{e}");
}

#[test]
fn go_net_http_speaks_h2_over_tls_on_one_connection() {
    let pki = Pki::new("go");
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _, _) = start(&rt, &pki, ServerConfig::default());
    let url = format!("https://localhost:{}/hello", addr.port());
    let program = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/go/h2client.go");
    let cache = std::env::temp_dir().join("spindle-go-cache");
    let out = Command::new("timeout")
        .args(["120", "go", "run", program, &url, &pki.path("ca.pem"), "50"])
        .env("GOCACHE", &cache)
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GODEBUG", "netdns=go")
        .output()
        .expect("go runs (Debian's golang-go)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "localhost" resolves to 127.0.0.1 here (no network name service).
    assert_eq!(stdout.trim(), "proto=HTTP/2.0 ok=50 conns=1");
}

#[test]
fn spindle_client_multiplexes_100_fibers_on_one_h2_connection() {
    let pki = Pki::new("mux");
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (addr, _, handle) = start(&rt, &pki, ServerConfig::default());
    let ca_pem = pki.ca_pem.clone();
    let (versions, peak) = rt.run(move || {
        let client =
            Client::new().tls_config(tls::client_config_with_ca_pem(ca_pem.as_bytes()).unwrap());
        let url = format!("https://localhost:{}/x", addr.port());
        let fibers: Vec<_> = (0..100)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                spindle::spawn(move || {
                    let resp = client.get(&url).unwrap();
                    let version = resp.version();
                    assert_eq!(resp.into_body().into_vec().unwrap(), b"GET /x 0");
                    version
                })
            })
            .collect();
        let versions: Vec<_> = fibers.into_iter().map(|f| f.join().unwrap()).collect();
        (versions, handle.connections())
    });
    assert!(
        versions.iter().all(|v| *v == http::Version::HTTP_2),
        "{versions:?}"
    );
    assert_eq!(peak, 1, "one connection carried all 100 requests");
}
