//! The online index in a real `redis-server` (started on a free loopback port, stopped by pid):
//! one producer gets exactly the in-memory index's decisions; several producer processes, some
//! killed at random moments, leave a state whose decisions are those of one process over their
//! documents in commit order; settings, an unreachable server and a server lost in the middle of
//! a batch are refused or reported with what happened.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hashbrown::{HashMap, HashSet};
use neardup_corpus::Reason;
use neardup_dedup::Verify;
use neardup_online::{Decision, DocId, Index, IndexSettings, RedisIndex, Store, Text};
use neardup_sketch::{NO_KEY, Scratch};
use support::{RedisServer, base, settings, texts};

fn redis(settings: IndexSettings, server: &RedisServer, namespace: &str) -> Index {
    Index::open(
        settings,
        &Store::Redis {
            url: server.url(),
            namespace: namespace.into(),
        },
    )
    .unwrap()
}

/// The same verbs on two indexes give the same answers.
fn same_answers(a: &mut Index, b: &mut Index, texts: &[String]) {
    let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
    let id = |i: usize| match i % 3 {
        0 => None,
        1 => Some(DocId::Str(format!("doc-{i}"))),
        _ => Some(DocId::Int(1000 + i as i64)),
    };
    // Batches of every size, single checks, a retried batch, inserts and queries.
    let mut at = 0;
    let mut size = 1;
    while at < as_text.len() {
        let end = (at + size).min(as_text.len());
        let ids: Vec<_> = (at..end).map(id).collect();
        let da = a.check_many(&as_text[at..end], ids.clone()).unwrap();
        let db = b.check_many(&as_text[at..end], ids.clone()).unwrap();
        assert_eq!(da, db, "batch {at}..{end}");
        if size == 5 {
            let ids: Vec<_> = (at..end).map(|i| Some(da[i - at].id.clone())).collect();
            assert_eq!(b.check_many(&as_text[at..end], ids).unwrap(), db);
        }
        at = end;
        size = size % 13 + 1;
    }
    let extra: Vec<String> = (0..20)
        .map(|i| format!("{} inserted", base(5000 + i)))
        .collect();
    let extra_text: Vec<Text<'_>> = extra.iter().map(|t| Text::Str(t)).collect();
    let ids: Vec<_> = (0..20).map(|i| Some(DocId::Int(-(i as i64) - 1))).collect();
    assert_eq!(
        a.insert_many(&extra_text, ids.clone()).unwrap(),
        b.insert_many(&extra_text, ids).unwrap()
    );
    for t in texts.iter().chain(&extra).step_by(3) {
        let probe = format!("{t} probe");
        assert_eq!(a.query(&probe).unwrap(), b.query(&probe).unwrap());
        assert_eq!(a.query(t).unwrap(), b.query(t).unwrap());
    }
    assert_eq!(
        a.check(Text::Unreadable, None).unwrap(),
        b.check(Text::Unreadable, None).unwrap()
    );
    assert_eq!(a.len().unwrap(), b.len().unwrap());
}

#[test]
fn one_producer_gets_the_in_memory_decisions() {
    let server = RedisServer::start();
    for (n, verify) in [Verify::Jaccard, Verify::Estimate].into_iter().enumerate() {
        let texts = texts();
        let mut memory = Index::new(settings(verify, Some(3))).unwrap();
        let mut shared = redis(settings(verify, Some(3)), &server, &format!("one-{n}"));
        same_answers(&mut memory, &mut shared, &texts);
        let stats = shared.stats().unwrap();
        assert!(stats["representatives"].as_u64().unwrap() > 0, "{stats}");
        assert!(stats["memory_bytes"].as_u64().unwrap() > 0, "{stats}");
        // Another producer opening the namespace sees the same state.
        let mut again = redis(settings(verify, Some(3)), &server, &format!("one-{n}"));
        assert_eq!(again.len().unwrap(), shared.len().unwrap());
        let probe = format!("{} tail1", base(3));
        assert_eq!(again.query(&probe).unwrap(), memory.query(&probe).unwrap());
    }
}

#[test]
fn a_namespace_refuses_other_settings_naming_them() {
    let server = RedisServer::start();
    redis(settings(Verify::Jaccard, Some(3)), &server, "made");
    let mut other = settings(Verify::Estimate, Some(5));
    other.deduper.threshold = 0.9;
    let err = Index::open(
        other,
        &Store::Redis {
            url: server.url(),
            namespace: "made".into(),
        },
    )
    .err()
    .unwrap()
    .to_string();
    for named in [
        "threshold: 0.8 vs 0.9",
        "max_reps: 3 vs 5",
        "verify: exact vs estimate",
    ] {
        assert!(err.contains(named), "{err}");
    }
    assert!(err.contains("\"made\""), "{err}");
    // Another namespace is another index.
    redis(settings(Verify::Estimate, Some(5)), &server, "other");
}

#[test]
fn an_unreachable_server_is_named() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let err = Index::open(
        settings(Verify::Jaccard, Some(3)),
        &Store::Redis {
            url: url.clone(),
            namespace: "x".into(),
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains(&format!("cannot reach the Redis server at {url}")),
        "{err}"
    );
}

#[test]
fn a_server_lost_in_a_batch_is_reported_with_how_far_it_got() {
    let mut server = RedisServer::start();
    let url = server.url();
    let mut idx = redis(settings(Verify::Jaccard, Some(3)), &server, "lost");
    let texts = texts();
    let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
    let ids = |r: std::ops::Range<usize>| r.map(|i| Some(DocId::Int(i as i64))).collect();
    idx.check_many(&as_text[..50], ids(0..50)).unwrap();
    server.kill();
    let err = idx
        .check_many(&as_text[50..100], ids(50..100))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(&format!(
            "the Redis server at {url} failed after 0 of the batch's 50"
        )),
        "{err}"
    );
}

/// The documents of the multi-producer test: groups of near copies (a base text with a
/// different tail or a word changed), exact copies, unique texts and empty texts, in an order
/// that spreads each group over the producers.
fn crowd() -> Vec<String> {
    let mut out = Vec::new();
    for g in 0..100u64 {
        let b = base(g);
        out.push(b.clone());
        out.push(format!("{b} extra{}", g % 7));
        out.push(b.replacen("w", "v", 1));
        out.push(b.clone());
        out.push(base(10_000 + g));
        if g % 10 == 0 {
            out.push(String::new());
        }
    }
    // A fixed shuffle (a multiplicative step coprime with the length).
    let n = out.len();
    (0..n).map(|i| out[(i * 337) % n].clone()).collect()
}

const PRODUCERS: usize = 4;
/// The producers killed in the middle of their work.
const VICTIMS: [usize; 2] = [1, 2];
const THRESHOLD: f64 = 0.8;

fn crowd_settings() -> IndexSettings {
    // Unbounded buckets: every kept document that shares a key with a later one is compared
    // with it, so the invariants below are exact.
    settings(Verify::Jaccard, None)
}

fn crowd_id(i: usize) -> DocId {
    DocId::Str(format!("d{i}"))
}

/// One producer process of the multi-producer test (a no-op unless started by it): checks its
/// share of the documents in batches of 8. `NEARDUP_PRODUCER` is its number; the last one
/// retries the first one's documents, from the end; the victims go on with every document.
#[test]
fn producer_process() {
    let Ok(which) = std::env::var("NEARDUP_PRODUCER") else {
        return;
    };
    let which: usize = which.parse().unwrap();
    let url = std::env::var("NEARDUP_PRODUCER_URL").unwrap();
    let texts = crowd();
    let mut idx = RedisIndex::open(crowd_settings(), &url, "crowd").unwrap();
    let mut mine: Vec<usize> = (0..texts.len())
        .filter(|i| i % PRODUCERS == which % PRODUCERS)
        .collect();
    if which == PRODUCERS {
        mine.reverse();
    }
    if VICTIMS.contains(&which) {
        // Then everyone else's: a victim never runs out of work before it is killed, however
        // fast the others are, and its retries race theirs.
        mine.extend((0..texts.len()).filter(|i| i % PRODUCERS != which % PRODUCERS));
    }
    for batch in mine.chunks(8) {
        let as_text: Vec<Text<'_>> = batch.iter().map(|&i| Text::Str(&texts[i])).collect();
        let ids = batch.iter().map(|&i| Some(crowd_id(i))).collect();
        idx.check_many(&as_text, ids).unwrap();
    }
}

fn shingles_and_keys(settings: &IndexSettings, text: &str) -> (Vec<u32>, Vec<u64>, u128) {
    let s = &settings.sketcher;
    let mut scratch = Scratch::collecting_shingle_sets();
    let mut sig = vec![0; s.num_perm()];
    let mut row = vec![NO_KEY; settings.rule.columns(s.bands())];
    let r = settings
        .rule
        .sketch(s, text, &mut scratch, &mut sig, &mut row);
    let mut set = Vec::new();
    s.shingle_set(text, &mut Scratch::default(), &mut set);
    let bands = settings.rule.band_columns(s.bands());
    row.truncate(bands);
    row.retain(|k| *k != NO_KEY);
    (set, row, r.content_hash)
}

fn jaccard(a: &[u32], b: &[u32]) -> f64 {
    let (mut i, mut j, mut both) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                both += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - both;
    if union == 0 {
        1.0
    } else {
        both as f64 / union as f64
    }
}

#[test]
fn many_producer_processes_some_killed_leave_one_process_decisions() {
    let server = RedisServer::start();
    let url = server.url();
    let texts = crowd();
    // Made here first, so that the producers find its settings.
    let mut settings = crowd_settings();
    settings.deduper.threshold = THRESHOLD;
    let _ = RedisIndex::open(crowd_settings(), &url, "crowd").unwrap();

    let exe = std::env::current_exe().unwrap();
    let mut producers: Vec<_> = (0..=PRODUCERS)
        .map(|k| {
            Command::new(&exe)
                .args([
                    "producer_process",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("NEARDUP_PRODUCER", k.to_string())
                .env("NEARDUP_PRODUCER_URL", &url)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Producers 1 and 2 are killed (SIGKILL) in the middle of their work, at moments that
    // depend on the clock.
    let mut probe = RedisIndex::open(crowd_settings(), &url, "crowd").unwrap();
    let jitter = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 60) as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    for (victim, after) in VICTIMS.into_iter().zip([60 + jitter, 200 + jitter]) {
        while probe.len().unwrap() < after && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        producers[victim].kill().unwrap();
    }
    for (k, p) in producers.iter_mut().enumerate() {
        let status = p.wait().unwrap();
        if !VICTIMS.contains(&k) {
            assert!(status.success(), "producer {k}: {status}");
        }
    }
    let before: HashMap<DocId, Decision> = probe
        .decisions()
        .unwrap()
        .into_iter()
        .map(|d| (d.id.clone(), d))
        .collect();
    assert!(
        before.len() < texts.len(),
        "the killed producers left work undone"
    );

    // Retry everything: each document decided exactly once, the earlier decisions unchanged.
    let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
    let ids: Vec<_> = (0..texts.len()).map(|i| Some(crowd_id(i))).collect();
    let finals = probe.check_many(&as_text, ids).unwrap();
    for d in &finals {
        if let Some(b) = before.get(&d.id) {
            assert_eq!(b, d);
        }
    }
    let all = probe.decisions().unwrap();
    assert_eq!(all.len(), texts.len());
    assert_eq!(probe.len().unwrap(), texts.len() as u64);

    // The decisions are those of one process over the documents in commit order.
    let text_of: HashMap<DocId, &str> = (0..texts.len())
        .map(|i| (crowd_id(i), texts[i].as_str()))
        .collect();
    let mut replay = Index::new(crowd_settings()).unwrap();
    for d in &all {
        let again = replay
            .check(Text::Str(text_of[&d.id]), Some(d.id.clone()))
            .unwrap();
        assert_eq!(&again, d);
    }

    // And the invariants, checked on the texts themselves.
    let by_id: HashMap<DocId, &Decision> = all.iter().map(|d| (d.id.clone(), d)).collect();
    let signed: HashMap<DocId, _> = text_of
        .iter()
        .map(|(id, t)| (id.clone(), shingles_and_keys(&settings, t)))
        .collect();
    let (mut near, mut exact) = (0, 0);
    for d in &all {
        let Some(of) = &d.dup_of else {
            assert!(d.keep);
            continue;
        };
        let (mine, theirs) = (&signed[&d.id], &signed[of]);
        match d.reason {
            Reason::Near => {
                near += 1;
                assert!(by_id[of].keep, "{d:?} names a dropped document");
                let j = jaccard(&mine.0, &theirs.0);
                assert!(
                    j >= THRESHOLD && (j - d.similarity.unwrap()).abs() < 1e-9,
                    "{d:?}: {j}"
                );
            }
            Reason::Exact => {
                exact += 1;
                assert_eq!(mine.2, theirs.2, "{d:?}: not the same text");
                assert_ne!(by_id[of].reason, Reason::Exact, "{d:?} names a later copy");
            }
            r => panic!("{r:?} with dup_of: {d:?}"),
        }
    }
    assert!(near > 50 && exact > 50, "{near} near, {exact} exact");
    let kept: Vec<&DocId> = all
        .iter()
        .filter(|d| d.keep && d.reason == Reason::Unique)
        .map(|d| &d.id)
        .collect();
    for (n, a) in kept.iter().enumerate() {
        let ka: HashSet<u64> = signed[*a].1.iter().copied().collect();
        for b in &kept[n + 1..] {
            if signed[*b].1.iter().any(|k| ka.contains(k)) {
                let j = jaccard(&signed[*a].0, &signed[*b].0);
                assert!(j < THRESHOLD, "{a} and {b} both kept at {j}");
            }
        }
    }
}
