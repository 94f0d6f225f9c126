//! A real S3 API server for tests (moto's, from PyPI `moto[server]`), started on 127.0.0.1 by
//! the test and stopped by pid; a plain HTTP client to set up and inspect its buckets, which
//! shares nothing with neardup's own client; and a TCP proxy that drops connections mid-response.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The environment variable naming the `moto_server` binary; `tests/run` and `.ci/run` set it.
pub const SERVER_VAR: &str = "NEARDUP_MOTO_SERVER";

/// A running moto server; dropped, it is killed (by its pid) and reaped.
pub struct S3Server {
    child: Child,
    pub port: u16,
    /// The server's stderr, shown when it stops answering.
    log: tempfile::NamedTempFile,
}

/// A free port on 127.0.0.1 (the OS's choice; released before the server binds it), never the
/// same one twice in this process, so two tests starting servers at once do not pick one port.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Whether process `pid` holds the socket listening on 127.0.0.1:`port`. Something answering on
/// the port is not enough: until our server has bound it, another test's server (or proxy) may
/// answer there, and our server then exits with "address in use" and the test talks to a port
/// that closes under it when the other test ends.
fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let local = format!("0100007F:{port:04X}");
    let Some(inode) = table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() > 9 && fields[1] == local && fields[3] == "0A").then(|| fields[9].to_string())
    }) else {
        return false;
    };
    let socket = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.as_os_str() == socket.as_str())
            })
        })
        .unwrap_or(false)
}

impl S3Server {
    /// Starts `moto_server -H 127.0.0.1 -p PORT`, with extra environment `env`, and waits until
    /// it answers. Panics, saying how to run the test, when `NEARDUP_MOTO_SERVER` is not set.
    pub fn start(env: &[(&str, &str)]) -> S3Server {
        let bin = std::env::var_os(SERVER_VAR).unwrap_or_else(|| {
            panic!(
                "{SERVER_VAR} is not set: these tests run against a local S3 server. Install it \
                 with `pip install 'moto[server]'` and run them as \
                 `{SERVER_VAR}=$(which moto_server) cargo test --test object_storage`, or run \
                 tests/run, which does both"
            )
        });
        for _ in 0..5 {
            let port = free_port();
            let log = tempfile::NamedTempFile::new().unwrap();
            let mut cmd = Command::new(&bin);
            cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log.reopen().unwrap());
            for (k, v) in env {
                cmd.env(k, v);
            }
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {SERVER_VAR}={bin:?}: {e}"));
            let mut server = S3Server { child, port, log };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = server.child.try_wait() {
                    break; // the port was taken meanwhile: try another
                }
                // A first real request inside the start-up loop: the server builds its app on
                // the first request, and one that fails there is replaced here instead of failing
                // the test at its first bucket. moto's own API, because it does not count as one
                // of the unauthenticated actions INITIAL_NO_AUTH_ACTION_COUNT allows.
                if listens_on(server.child.id(), port)
                    && matches!(http(port, "GET", "/moto-api/data.json", b""), Ok((200, _)))
                {
                    return server;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = server.child.kill();
        }
        panic!("the S3 server {bin:?} did not start");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment a neardup process needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        env_for(&self.endpoint())
    }

    /// Sends one request; returns the status and the body.
    /// Panics, saying whether the server still listens and with the end of its log, when it
    /// does not answer.
    pub fn request(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        http(self.port, method, path, body).unwrap_or_else(|e| {
            let status = if listens_on(self.child.id(), self.port) {
                "still listens on its port"
            } else {
                "no longer listens on its port"
            };
            let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            panic!(
                "{method} {path} on the S3 server at port {}: {e}; the server (pid {}) {status}; \
                 the end of its log:\n{tail}",
                self.port,
                self.child.id()
            )
        })
    }

    pub fn create_bucket(&self, bucket: &str) {
        let (status, body) = self.request("PUT", &format!("/{bucket}"), b"");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }

    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) {
        let (status, body) = self.request("PUT", &format!("/{bucket}/{key}"), bytes);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }

    /// The object's bytes, or `None` when there is none.
    pub fn get(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        match self.request("GET", &format!("/{bucket}/{key}"), b"") {
            (200, body) => Some(body),
            (404, _) => None,
            (status, body) => panic!("GET {key}: {status} {}", String::from_utf8_lossy(&body)),
        }
    }

    /// Every key in the bucket under `prefix`, sorted.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let (status, body) = self.request(
            "GET",
            &format!("/{bucket}?list-type=2&prefix={prefix}&max-keys=1000"),
            b"",
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let text = String::from_utf8(body).unwrap();
        let mut keys: Vec<String> = text
            .split("<Key>")
            .skip(1)
            .map(|s| s.split("</Key>").next().unwrap().to_string())
            .collect();
        keys.sort();
        keys
    }

    /// Uploads in progress (started, neither completed nor aborted) in the bucket.
    pub fn open_uploads(&self, bucket: &str) -> usize {
        let (status, body) = self.request("GET", &format!("/{bucket}?uploads"), b"");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        String::from_utf8(body)
            .unwrap()
            .matches("<UploadId>")
            .count()
    }

    /// Copies a local tree into the bucket under `prefix`.
    pub fn upload_dir(&self, bucket: &str, prefix: &str, dir: &std::path::Path) {
        for entry in walk(dir) {
            let rel = entry
                .strip_prefix(dir)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            self.put(
                bucket,
                &format!("{prefix}{rel}"),
                &std::fs::read(&entry).unwrap(),
            );
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment that points neardup's S3 client at `endpoint` with test credentials.
pub fn env_for(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint.to_string()),
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "testing-secret".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ALLOW_HTTP", "true".to_string()),
        // Nothing of the machine's own AWS setup.
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent".to_string()),
        ("AWS_CONFIG_FILE", "/nonexistent".to_string()),
    ]
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// One HTTP/1.1 request with `Connection: close` (moto accepts an unsigned request that carries
/// an `Authorization` header naming an access key).
fn http(port: u16, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n\
         Content-Type: application/octet-stream\r\nConnection: close\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, \
         SignedHeaders=host, Signature=0\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let Some(split) = resp.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(std::io::Error::other(format!(
            "not an HTTP response: {:?}",
            String::from_utf8_lossy(&resp)
        )));
    };
    let headers = String::from_utf8_lossy(&resp[..split]).to_ascii_lowercase();
    let status: u16 = headers.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = resp[split + 4..].to_vec();
    if headers.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16)
                .unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
            rest = &rest[eol + 2 + n + 2..];
        }
        body = out;
    }
    Ok((status, body))
}

/// A TCP proxy in front of the server that drops a connection once it has relayed `cut_after`
/// bytes of responses, for the first `cuts` connections that get that far (`usize::MAX`: all).
/// Small responses (listings, heads, footers) pass; a large object's body is cut mid-way.
pub struct DroppingProxy {
    pub port: u16,
    pub cut: Arc<AtomicUsize>,
}

impl DroppingProxy {
    pub fn start(upstream: u16, cut_after: usize, cuts: usize) -> DroppingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicUsize::new(0));
        let counter = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let counter = counter.clone();
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || copy_all(c2, s2));
                std::thread::spawn(move || {
                    let (mut from, mut to) = (server, client);
                    let mut relayed = 0usize;
                    let mut buf = [0u8; 16 << 10];
                    loop {
                        let n = match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if relayed + n > cut_after && counter.fetch_add(1, Ordering::SeqCst) < cuts
                        {
                            let keep = cut_after.saturating_sub(relayed);
                            let _ = to.write_all(&buf[..keep]);
                            break;
                        } else if relayed + n > cut_after {
                            // Past the cuts: this connection relays on untouched.
                            counter.fetch_sub(1, Ordering::SeqCst);
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                            copy_all(from, to);
                            return;
                        }
                        relayed += n;
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Both);
                    let _ = from.shutdown(Shutdown::Both);
                });
            }
        });
        DroppingProxy { port, cut }
    }

    /// Connections dropped so far.
    pub fn dropped(&self) -> usize {
        self.cut.load(Ordering::SeqCst)
    }
}

fn copy_all(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// A TCP proxy in front of the server that holds every request containing `pattern` (e.g. an
/// upload's parts, `partNumber=`) for `delay` before passing it on, counting them.
pub struct DelayingProxy {
    pub port: u16,
    seen: Arc<AtomicUsize>,
}

impl DelayingProxy {
    pub fn start(upstream: u16, pattern: &'static [u8], delay: Duration) -> DelayingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || copy_all(s2, c2));
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let (mut from, mut to) = (client, server);
                    let mut buf = [0u8; 64 << 10];
                    loop {
                        let n = match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if buf[..n].windows(pattern.len()).any(|w| w == pattern) {
                            counter.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(delay);
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        });
        DelayingProxy { port, seen }
    }

    /// Requests held so far.
    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}
