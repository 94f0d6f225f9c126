//! What the online index's tests share: settings, texts, and a real `redis-server` of their own.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use neardup_dedup::{DeduperConfig, Verify};
use neardup_keys::RowRule;
use neardup_online::IndexSettings;
use neardup_sketch::{LshParams, Shingler, SketchConfig, Sketcher};

/// Settings of the tests' indexes.
pub fn settings(verify: Verify, max_reps: Option<usize>) -> IndexSettings {
    let sketcher = Sketcher::new(SketchConfig::new(
        Shingler::Chars { k: 5, step: 1 },
        128,
        LshParams::new(16, 8).unwrap(),
    ))
    .unwrap();
    IndexSettings {
        sketcher,
        rule: RowRule::default(),
        deduper: DeduperConfig {
            verify,
            max_reps,
            ..DeduperConfig::default()
        },
        keep_empty: true,
    }
}

/// A text of 60 words drawn from `seed`.
pub fn base(seed: u64) -> String {
    (0..60)
        .map(|i| format!("w{}", (i * 31 + seed * 977) % 1009))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Texts with near and exact copies: groups of variants of a base text, unique texts, empties.
pub fn texts() -> Vec<String> {
    (0..200u64)
        .map(|i| match i % 4 {
            0 => base(i / 8),
            1 => format!("{} tail{}", base(i / 8), i % 3),
            2 => base(1000 + i),
            _ => String::new(),
        })
        .collect()
}

/// A `redis-server` on a free loopback port, in a directory of its own, stopped (by its pid)
/// when dropped. `NEARDUP_REDIS_SERVER` names the program (default: `redis-server` on the
/// PATH).
pub struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let program =
            std::env::var("NEARDUP_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let dir = tempfile::tempdir().unwrap();
            let mut child = Command::new(&program)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start {program} (apt-get install redis-server): {e}")
                });
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break; // the port was taken meanwhile: try another
                }
                let up = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
                if up.is_ok() {
                    return RedisServer {
                        child,
                        port,
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server at once (SIGKILL), as a server lost in the middle of work.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
