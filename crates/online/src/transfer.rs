//! Moving an index between a saved index file and a Redis namespace (`neardup index push`,
//! `neardup index pull`) and the statistics of either (`neardup index stats`).
//!
//! A push writes what a producer needs of every document of a self-contained index into a
//! staging namespace, then one script publishes it under the namespace's keys (refused when the
//! namespace holds other settings, or an index unless replacing was asked for): producers see
//! the whole index or none of it. A pull reads the namespace in one atomic step and writes it as
//! an online index's file. Redis keeps what decisions need, not everything a file holds: the
//! band keys of each representative (not their order in its row), kept documents that joined no
//! bucket only when they are their text's first copy, and no clusters beyond `dup_of`; so a
//! pushed and pulled index decides as the file did, but is not the same bytes (a pulled index
//! pushed and pulled again is).

use std::collections::BTreeMap;

use hashbrown::HashMap;
use redis::Connection;

use neardup_corpus::{FieldPath, Reason, SampleAddr, TextSelector};
use neardup_dedup::Verify;
use neardup_index::{EntryRecord, SavedDecision, SavedIndex, StoredId};
use neardup_sketch::NO_KEY;

use crate::file_store::entry_doc_id;
use crate::memory::doc_id;
use crate::redis_store::{
    Keys, Recorded, RedisIndex, decode_rep, decode_sequenced, encode_decision, set_field, shown,
};
use crate::sign::Decided;
use crate::{DocId, IndexError};

/// What a push or a pull moved.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Transferred {
    /// Documents with a decision (ids).
    pub ids: u64,
    /// Documents that are a bucket's representative or a text's first copy.
    pub documents: u64,
    /// Representatives.
    pub representatives: u64,
}

fn connect(url: &str) -> Result<(Connection, String), IndexError> {
    let address = shown(url);
    let unreachable = |error| IndexError::Unreachable {
        address: address.clone(),
        error,
    };
    let client = redis::Client::open(url).map_err(unreachable)?;
    let con = client
        .get_connection_with_timeout(std::time::Duration::from_secs(5))
        .map_err(unreachable)?;
    Ok((con, address))
}

/// The settings a namespace records for an index made with `saved`'s (the online index is
/// given texts: no field selection).
fn recorded_of(saved: &SavedIndex) -> Recorded {
    let mut index = saved.settings().clone();
    index.layout.selector = TextSelector::single(FieldPath::top("text"));
    let keep = saved.online().is_none_or(|o| o.keep_empty);
    Recorded {
        index,
        empty: if keep { "keep" } else { "drop" }.to_string(),
    }
}

fn decided_of(d: &SavedDecision) -> Decided {
    Decided {
        keep: d.keep,
        reason: d.reason,
        dup_of: d.dup_of.as_ref().map(doc_id),
        similarity: d.similarity,
    }
}

/// Publishes a staged index under a namespace's keys. KEYS: the namespace's settings, meta,
/// ids, buckets, copies, reps, sets, then the staged meta, ids, buckets, copies, reps, sets.
/// ARGV: "replace" or "", the settings record.
const PUBLISH: &str = r#"
local s = redis.call('GET', KEYS[1])
if s and s ~= ARGV[2] then return 'settings' end
local busy = false
for i = 2, 7 do if redis.call('EXISTS', KEYS[i]) == 1 then busy = true end end
if busy and ARGV[1] ~= 'replace' then return 'busy' end
for i = 2, 7 do redis.call('DEL', KEYS[i]) end
redis.call('SET', KEYS[1], ARGV[2])
for i = 2, 7 do
  if redis.call('EXISTS', KEYS[6 + i]) == 1 then redis.call('RENAME', KEYS[6 + i], KEYS[i]) end
end
return 'ok'
"#;

/// Writes the index `saved` (read from `path`) into `namespace` of the server at `url`:
/// refused when it does not store its entries' sketches, when the namespace was made with other
/// settings (naming each), and when it holds an index unless `replace`.
pub fn push(
    saved: &SavedIndex,
    path: &std::path::Path,
    url: &str,
    namespace: &str,
    replace: bool,
) -> Result<Transferred, IndexError> {
    let exact = saved.settings().verify == Verify::Jaccard;
    let complete = if exact {
        saved.self_contained_with_shingles()
    } else {
        saved.self_contained()
    };
    if !complete {
        return Err(IndexError::NotSelfContained {
            path: path.to_path_buf(),
        });
    }
    let (mut con, address) = connect(url)?;
    let failed = |error| IndexError::Redis {
        address: address.clone(),
        error,
    };
    let keys = Keys::new(namespace);
    let recorded = recorded_of(saved);
    let json = serde_json::to_string(&recorded).expect("settings serialise");
    let differ = |con: &mut Connection| -> Result<Option<IndexError>, IndexError> {
        let theirs: Option<String> = redis::cmd("GET")
            .arg(&keys.settings)
            .query(con)
            .map_err(failed)?;
        let Some(theirs) = theirs else {
            return Ok(None);
        };
        let theirs: Recorded = serde_json::from_str(&theirs).map_err(|e| IndexError::Damaged {
            address: address.clone(),
            namespace: namespace.to_string(),
            what: format!("its settings record cannot be read ({e})"),
        })?;
        let differences = theirs.differences(&recorded);
        Ok(
            (!differences.is_empty()).then(|| IndexError::SettingsDiffer {
                address: address.clone(),
                namespace: namespace.to_string(),
                differences,
            }),
        )
    };
    if let Some(e) = differ(&mut con)? {
        return Err(e);
    }
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let staged = Keys::new(&format!("{namespace}.push-{}-{nonce}", std::process::id()));
    let result = stage(saved, &staged, &mut con).map_err(failed);
    let published = result.and_then(|moved| {
        let outcome: String = redis::Script::new(PUBLISH)
            .key(&keys.settings)
            .key(&keys.meta)
            .key(&keys.ids)
            .key(&keys.buckets)
            .key(&keys.copies)
            .key(&keys.reps)
            .key(&keys.sets)
            .key(&staged.meta)
            .key(&staged.ids)
            .key(&staged.buckets)
            .key(&staged.copies)
            .key(&staged.reps)
            .key(&staged.sets)
            .arg(if replace { "replace" } else { "" })
            .arg(&json)
            .invoke(&mut con)
            .map_err(failed)?;
        Ok((moved, outcome))
    });
    // What the script did not move is removed, whatever happened.
    let _: redis::RedisResult<()> = redis::cmd("DEL")
        .arg(&staged.meta)
        .arg(&staged.ids)
        .arg(&staged.buckets)
        .arg(&staged.copies)
        .arg(&staged.reps)
        .arg(&staged.sets)
        .query(&mut con);
    let (moved, outcome) = published?;
    match outcome.as_str() {
        "ok" => Ok(moved),
        "busy" => Err(IndexError::NamespaceInUse {
            address,
            namespace: namespace.to_string(),
        }),
        _ => Err(differ(&mut con)?.unwrap_or(IndexError::Damaged {
            address,
            namespace: namespace.to_string(),
            what: "its settings changed while the index was pushed".into(),
        })),
    }
}

/// Writes the index's state under the keys `to`, as the producers' scripts would have.
fn stage(saved: &SavedIndex, to: &Keys, con: &mut Connection) -> redis::RedisResult<Transferred> {
    let settings = saved.settings();
    let bands = settings.layout.bands;
    let max_reps = settings.max_reps;
    let names: Vec<String> = saved.files().iter().map(|f| f.name.clone()).collect();
    let mut held: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut copies: BTreeMap<u128, Vec<u8>> = BTreeMap::new();
    let mut reps: Vec<Vec<u8>> = Vec::new();
    let mut sets: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut documents = 0u64;
    for e in saved.stored_entries() {
        let name = entry_doc_id(&names, e.addr, e.id).encode();
        let mut joins = Vec::new();
        if let Some(row) = e.bands {
            for &key in row.iter().take(bands) {
                let n = held.get(&key).map_or(0, |h| h.len() / 4);
                if key != NO_KEY && max_reps.is_none_or(|m| n < m) && !joins.contains(&key) {
                    joins.push(key);
                }
            }
        }
        let first = e.content_key != NO_KEY && !copies.contains_key(&e.content_hash);
        if joins.is_empty() && !first {
            continue;
        }
        let docno = documents.to_le_bytes();
        documents += 1;
        if !joins.is_empty() {
            let rep = (reps.len() as u32).to_le_bytes();
            let mut body = docno.to_vec();
            body.extend_from_slice(&(name.len() as u32).to_le_bytes());
            body.extend_from_slice(name.as_bytes());
            for v in e.signature {
                body.extend_from_slice(&v.to_le_bytes());
            }
            reps.push(body);
            let set: Vec<u8> = e
                .shingles
                .unwrap_or_default()
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            if !set.is_empty() {
                sets.push((rep.to_vec(), set));
            }
            for key in joins {
                held.entry(key).or_default().extend_from_slice(&rep);
            }
        }
        if first {
            let mut v = docno.to_vec();
            v.extend_from_slice(name.as_bytes());
            copies.insert(e.content_hash, v);
        }
    }
    let decisions = saved.online().map_or(&[][..], |o| &o.decisions[..]);
    let mut counters: BTreeMap<&str, u64> = BTreeMap::new();
    let mut ids: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(decisions.len());
    for (seq, d) in decisions.iter().enumerate() {
        let mut v = (seq as u64).to_le_bytes().to_vec();
        v.extend_from_slice(&encode_decision(&decided_of(d)));
        ids.push((doc_id(&d.id).encode().into_bytes(), v));
        *counters.entry(d.reason.as_str()).or_default() += 1;
    }
    let next_auto = saved.online().map_or(0, |o| o.next_auto);
    let mut meta: Vec<(String, i64)> = vec![
        ("documents".into(), documents as i64),
        ("representatives".into(), reps.len() as i64),
        ("sequence".into(), decisions.len() as i64),
        ("next_auto".into(), next_auto),
    ];
    meta.extend(counters.iter().map(|(k, v)| (k.to_string(), *v as i64)));
    let moved = Transferred {
        ids: decisions.len() as u64,
        documents,
        representatives: reps.len() as u64,
    };
    redis::cmd("HSET")
        .arg(&to.meta)
        .arg(&meta)
        .query::<()>(con)?;
    let pairs = |key: &str, items: Vec<(Vec<u8>, Vec<u8>)>, con: &mut Connection| {
        for part in items.chunks(1000) {
            redis::cmd("HSET").arg(key).arg(part).query::<()>(con)?;
        }
        redis::RedisResult::Ok(())
    };
    pairs(&to.ids, ids, con)?;
    let mut buckets: Vec<(Vec<u8>, Vec<u8>)> = held
        .into_iter()
        .map(|(k, v)| (k.to_le_bytes().to_vec(), v))
        .collect();
    buckets.sort_unstable();
    pairs(&to.buckets, buckets, con)?;
    let copies = copies
        .into_iter()
        .map(|(h, v)| (h.to_le_bytes().to_vec(), v))
        .collect();
    pairs(&to.copies, copies, con)?;
    let reps = reps
        .into_iter()
        .enumerate()
        .map(|(r, v)| ((r as u32).to_le_bytes().to_vec(), v))
        .collect();
    pairs(&to.reps, reps, con)?;
    pairs(&to.sets, sets, con)?;
    Ok(moved)
}

type Hash = Vec<(Vec<u8>, Vec<u8>)>;

/// A representative's band keys, signature and shingle set.
type Held = (Vec<u64>, Vec<u32>, Option<std::sync::Arc<[u32]>>);

/// Reads `namespace` of the server at `url` in one atomic step as an online index's saved
/// index (refused when it holds no index).
pub fn pull(url: &str, namespace: &str) -> Result<(SavedIndex, Transferred), IndexError> {
    let (mut con, address) = connect(url)?;
    pull_over(&mut con, &address, namespace)
}

/// [`pull`] over an open connection to the server shown as `address` (what
/// [`crate::Index::save`] of an index in Redis writes, so the same bytes as a pull).
pub(crate) fn pull_over(
    con: &mut Connection,
    address: &str,
    namespace: &str,
) -> Result<(SavedIndex, Transferred), IndexError> {
    let address = address.to_string();
    let keys = Keys::new(namespace);
    let damaged = |what: String| IndexError::Damaged {
        address: address.clone(),
        namespace: namespace.to_string(),
        what,
    };
    type All = (
        Option<String>,
        std::collections::HashMap<String, i64>,
        Hash,
        Hash,
        Hash,
        Hash,
        Hash,
    );
    let (settings, meta, ids, buckets, copies, reps, sets): All = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg(&keys.settings)
        .cmd("HGETALL")
        .arg(&keys.meta)
        .cmd("HGETALL")
        .arg(&keys.ids)
        .cmd("HGETALL")
        .arg(&keys.buckets)
        .cmd("HGETALL")
        .arg(&keys.copies)
        .cmd("HGETALL")
        .arg(&keys.reps)
        .cmd("HGETALL")
        .arg(&keys.sets)
        .query(con)
        .map_err(|error| IndexError::Redis {
            address: address.clone(),
            error,
        })?;
    let settings = settings.ok_or_else(|| IndexError::NoNamespace {
        address: address.clone(),
        namespace: namespace.to_string(),
    })?;
    let recorded: Recorded = serde_json::from_str(&settings)
        .map_err(|e| damaged(format!("its settings record cannot be read ({e})")))?;
    let settings = recorded.index;
    let num_perm = settings
        .layout
        .sketch_description
        .split_whitespace()
        .find_map(|w| w.strip_prefix("num_perm=")?.parse::<usize>().ok())
        .ok_or_else(|| damaged("its settings name no num_perm".into()))?;
    let exact = settings.verify == Verify::Jaccard;
    let bands = settings.layout.bands;
    let columns = settings.layout.columns();
    let exact_key = settings.layout.rule.exact_key;

    let mut decisions: Vec<(u64, DocId, Decided)> = Vec::with_capacity(ids.len());
    for (id, blob) in ids {
        let id = std::str::from_utf8(&id)
            .ok()
            .and_then(DocId::decode)
            .ok_or_else(|| damaged("an id cannot be read".into()))?;
        let (seq, d) =
            decode_sequenced(&blob).ok_or_else(|| damaged("a decision cannot be read".into()))?;
        decisions.push((seq, id, d));
    }
    decisions.sort_by_key(|(seq, _, _)| *seq);

    // Per representative number: the band keys of the buckets that list it.
    let mut keys_of: HashMap<u32, Vec<u64>> = HashMap::new();
    for (key, held) in &buckets {
        let key = u64::from_le_bytes(
            key.as_slice()
                .try_into()
                .map_err(|_| damaged("a bucket's key cannot be read".into()))?,
        );
        for r in held.chunks_exact(4) {
            keys_of
                .entry(u32::from_le_bytes(r.try_into().expect("4")))
                .or_default()
                .push(key);
        }
    }
    /// A document the namespace holds.
    #[derive(Default)]
    struct Doc {
        id: Option<DocId>,
        /// As a representative: its band keys, signature and shingle set.
        rep: Option<Held>,
        first_of: Option<u128>,
    }
    let mut docs: BTreeMap<u64, Doc> = BTreeMap::new();
    let set_of: HashMap<&[u8], &[u8]> = sets
        .iter()
        .map(|(field, set)| (field.as_slice(), set.as_slice()))
        .collect();
    for (rep, body) in &reps {
        let r = u32::from_le_bytes(
            rep.as_slice()
                .try_into()
                .map_err(|_| damaged("a representative's number cannot be read".into()))?,
        );
        let set = set_field(body, r, num_perm).and_then(|f| set_of.get(f.as_slice()).copied());
        let rec = decode_rep(body, set, num_perm, exact)
            .ok_or_else(|| damaged(format!("representative {r} cannot be read")))?;
        let mut held = keys_of.remove(&r).unwrap_or_default();
        held.sort_unstable();
        held.resize(bands.max(held.len()), NO_KEY);
        let doc = docs.entry(rec.docno).or_default();
        doc.id = DocId::decode(&rec.id);
        doc.rep = Some((held, rec.signature, rec.shingles));
    }
    for (hash, first) in &copies {
        let hash = u128::from_le_bytes(
            hash.as_slice()
                .try_into()
                .map_err(|_| damaged("a first copy's text hash cannot be read".into()))?,
        );
        if first.len() < 9 {
            return Err(damaged("a first copy's record is too short".into()));
        }
        let docno = u64::from_le_bytes(first[..8].try_into().expect("8"));
        let doc = docs.entry(docno).or_default();
        doc.id = std::str::from_utf8(&first[8..])
            .ok()
            .and_then(DocId::decode);
        doc.first_of = Some(hash);
    }

    let mut saved = SavedIndex::new_online(settings, num_perm, exact, recorded.empty == "keep");
    let file = saved.online().expect("online").file;
    let decision_of: HashMap<&DocId, &Decided> =
        decisions.iter().map(|(_, id, d)| (id, d)).collect();
    let docno_of: HashMap<&DocId, u64> = docs
        .iter()
        .filter_map(|(n, d)| Some((d.id.as_ref()?, *n)))
        .collect();
    let zeros = vec![0u32; num_perm];
    let mut representatives = 0u64;
    for (&docno, doc) in &docs {
        let id = doc
            .id
            .as_ref()
            .ok_or_else(|| damaged(format!("document {docno}'s id cannot be read")))?;
        let decided = decision_of.get(id);
        let kept = doc.rep.is_some() || decided.is_none_or(|d| d.keep);
        // A dropped first copy's cluster: the kept document its `dup_of` leads to.
        let mut cluster = docno;
        let mut at = decided.and_then(|d| d.dup_of.as_ref());
        for _ in 0..docs.len() {
            let Some(of) = at else { break };
            let Some(&n) = docno_of.get(of) else { break };
            cluster = n;
            match decision_of.get(of) {
                Some(d) if !d.keep => at = d.dup_of.as_ref(),
                _ => break,
            }
        }
        let mut row = vec![NO_KEY; columns];
        if let Some((held, _, _)) = &doc.rep {
            row[..bands].copy_from_slice(&held[..bands]);
            representatives += 1;
        }
        if let (true, Some(h)) = (exact_key, doc.first_of) {
            row[bands] = neardup_keys::content_key(h);
        }
        let (signature, shingles) = match &doc.rep {
            Some((_, sig, sets)) => (&sig[..], sets.as_deref()),
            None => (&zeros[..], None),
        };
        saved.push_entry(EntryRecord {
            record: docno,
            kept,
            cluster: SampleAddr {
                file,
                record: cluster,
                field: 0,
            },
            row: &row,
            content_hash: doc.first_of.unwrap_or(0),
            id: Some(stored_id_of(id)),
            signature,
            shingles: shingles.or(exact.then_some(&[][..])),
        });
    }
    let moved = Transferred {
        ids: decisions.len() as u64,
        documents: docs.len() as u64,
        representatives,
    };
    let online = saved.online_mut().expect("online");
    online.next_record = meta.get("documents").copied().unwrap_or(0).max(0) as u64;
    online.next_auto = meta.get("next_auto").copied().unwrap_or(0);
    for (_, id, d) in &decisions {
        online.decisions.push(SavedDecision {
            id: stored_id_of(id),
            keep: d.keep,
            reason: d.reason,
            dup_of: d.dup_of.as_ref().map(stored_id_of),
            similarity: d.similarity,
        });
    }
    for _ in 0..moved.ids {
        saved.count_sample();
    }
    Ok((saved, moved))
}

/// A server's address as messages show it (the URL without a password).
pub fn shown_address(url: &str) -> String {
    shown(url)
}

/// Saves `saved` at `path` atomically, never over anything but a neardup index; returns the
/// bytes written.
pub fn save_file(saved: &SavedIndex, path: &std::path::Path) -> Result<u64, IndexError> {
    crate::file_store::save_saved(saved, path)
}

fn stored_id_of(id: &DocId) -> StoredId {
    crate::memory::stored_id(id)
}

/// What `neardup index stats` shows of a saved index of `bytes` bytes.
pub fn file_stats(saved: &SavedIndex, bytes: u64) -> serde_json::Value {
    let (representatives, buckets) = saved.representatives_and_buckets();
    // Documents kept: those with a decision by it, and the kept entries of batch runs (which
    // record no decisions).
    let decisions = saved.online().map_or(&[][..], |o| &o.decisions[..]);
    let decided: hashbrown::HashSet<&StoredId> = decisions.iter().map(|d| &d.id).collect();
    let kept = decisions.iter().filter(|d| d.keep).count()
        + saved
            .entry_ids()
            .filter(|(kept, id)| *kept && id.is_none_or(|id| !decided.contains(id)))
            .count();
    let mut out = serde_json::json!({
        "store": "file",
        "documents": saved.samples(),
        "entries": saved.entries(),
        "kept": kept,
        "representatives": representatives,
        "buckets": buckets,
        "self_contained": saved.self_contained(),
        "files": saved.files().iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
        "settings": saved.settings(),
        "bytes": bytes,
    });
    if let Some(o) = saved.online() {
        let mut by_reason: BTreeMap<&str, u64> = BTreeMap::new();
        for d in &o.decisions {
            *by_reason.entry(d.reason.as_str()).or_default() += 1;
        }
        out["ids"] = o.decisions.len().into();
        out["decisions"] = serde_json::to_value(by_reason).expect("counts");
    }
    out
}

/// What `neardup index stats` shows of a namespace.
pub fn namespace_stats(url: &str, namespace: &str) -> Result<serde_json::Value, IndexError> {
    let (mut con, address) = connect(url)?;
    let keys = Keys::new(namespace);
    let failed = |error| IndexError::Redis {
        address: address.clone(),
        error,
    };
    type Counts = (
        Option<String>,
        std::collections::HashMap<String, u64>,
        u64,
        u64,
        u64,
    );
    let (settings, meta, ids, buckets, copies): Counts = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg(&keys.settings)
        .cmd("HGETALL")
        .arg(&keys.meta)
        .cmd("HLEN")
        .arg(&keys.ids)
        .cmd("HLEN")
        .arg(&keys.buckets)
        .cmd("HLEN")
        .arg(&keys.copies)
        .query(&mut con)
        .map_err(failed)?;
    let settings = settings.ok_or_else(|| IndexError::NoNamespace {
        address: address.clone(),
        namespace: namespace.to_string(),
    })?;
    let recorded: Recorded = serde_json::from_str(&settings).map_err(|e| IndexError::Damaged {
        address: address.clone(),
        namespace: namespace.to_string(),
        what: format!("its settings record cannot be read ({e})"),
    })?;
    let mut bytes = 0u64;
    for key in keys.all() {
        let used: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query(&mut con)
            .map_err(failed)?;
        bytes += used.unwrap_or(0);
    }
    let reasons = [
        Reason::Unique,
        Reason::Near,
        Reason::Exact,
        Reason::Empty,
        Reason::Error,
    ];
    let decisions: BTreeMap<&str, u64> = reasons
        .iter()
        .map(|r| (r.as_str(), meta.get(r.as_str()).copied().unwrap_or(0)))
        .chain([("inserted", meta.get("inserted").copied().unwrap_or(0))])
        .collect();
    let dropped_empty = if recorded.empty == "drop" {
        decisions["empty"]
    } else {
        0
    };
    let kept = ids.saturating_sub(decisions["near"] + decisions["exact"] + dropped_empty);
    Ok(serde_json::json!({
        "store": "redis",
        "address": address,
        "namespace": namespace,
        "documents": ids,
        "ids": ids,
        "kept": kept,
        "decisions": decisions,
        "representatives": meta.get("representatives").copied().unwrap_or(0),
        "buckets": buckets,
        "texts": copies,
        "settings": recorded.index,
        "empty": recorded.empty,
        "bytes": bytes,
    }))
}

impl RedisIndex {
    /// Reads the namespace in one atomic step and saves it at `path` as `neardup index pull`
    /// does (atomically, never over anything but an index). Returns the bytes written.
    pub fn save(&mut self, path: &std::path::Path) -> Result<u64, IndexError> {
        let (con, address, namespace) = self.connection();
        let (saved, _) = pull_over(con, address, namespace)?;
        crate::file_store::save_saved(&saved, path)
    }
}
