//! The index in a Redis server, shared by any number of producer processes and machines.
//!
//! **What the server holds** (keys `neardup:{namespace}:…`), all that a decision needs, so that
//! any producer decides exactly as one process holding everything would:
//! - `settings`: the settings the namespace was made with (JSON); a producer with other
//!   settings is refused, naming each setting that differs;
//! - `ids` (hash): every document id checked or inserted → its decision (so a retry gets it);
//! - `reps` (hash): representative number → the kept document's number, id and MinHash
//!   signature (what other producers compare with);
//! - `sets` (hash): token → under `verify="exact"`, a representative's shingle set (what they
//!   verify against; the record names the token): written by the producer beside the commit
//!   script's call, in one transaction with it, so that the script never makes a set a Lua
//!   string (the server hashes every byte of those) and reads signatures without sets;
//! - `buckets` (hash): band key → the numbers of its representatives, in the order they joined
//!   (at most `max_reps`);
//! - `copies` (hash): 128-bit content hash → the first document with that text (number and id);
//! - `meta` (hash): counters (documents, representatives, the next free integer id, decisions
//!   by reason).
//!
//! **How a batch is decided.** A producer signs its texts, reads the state its documents reach
//! in one round trip (the ids, the buckets of their band keys, their texts' first copies), then
//! the representatives those buckets name (which never change once written, and are cached),
//! seeds a decision core
//! with it ([`Deduper::seed`]) and decides the documents in order, as the in-memory index does.
//! Then one server-side script commits the decisions in order, each only if what it was decided
//! against has not changed: its id is still undecided, each of its buckets still holds the
//! representatives it was compared with (buckets only grow, so a length says it) or gained only
//! representatives that are no candidates for it (their estimated similarity is below the
//! decision core's floor, so it is decided the same with them; the script compares the
//! signatures) and left room for its joins under `max_reps`, and its text still has no first
//! copy when it is to become one. A document another producer got in the way of is refused, and so is every later document of the batch that a refused one would have
//! changed: one that matched it or its first copy, or whose joins a bucket's room under
//! `max_reps` decided where a refused one would have joined. A later document that only met a
//! refused one's representative without matching it is decided the same without it, and is
//! committed against the buckets less what the refused ones would have added. The others
//! stand, and the producer reads again and decides the refused ones anew. A committed decision is therefore the one a single
//! process would make over all producers' documents in the order of their commits: two
//! producers that see near-copies at the same moment never both keep them, and one producer
//! alone gets the in-memory index's decisions.
//! A document's keys, its representative, its first copy and its decision go in together in
//! one script call, or not at all.
#![allow(clippy::too_many_arguments)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hashbrown::{HashMap, HashSet};
use redis::{Connection, Script};
use serde::{Deserialize, Serialize};

use neardup_corpus::Reason;
use neardup_dedup::{Deduper, SampleAddr, Verdict};
use neardup_sketch::NO_KEY;

use crate::packed::{PackedCall, PackedCommands};
use crate::sign::{self, Decided, Signed, Signer};
use crate::{Decision, DocId, IndexError, IndexSettings, Text};

/// Commits decisions in order, each only while what it was decided against is unchanged and
/// no document refused before it in the round would have changed it; returns, per document, 2
/// numbers: -1 (refused) or 0 (committed) or 1 + the number of the representative it became,
/// and its document number (-1: none).
///
/// KEYS: meta, ids, buckets, copies, reps, sets. ARGV ([`RedisIndex::commit_chunk`] writes
/// them):
/// - 1: the number of representatives when the batch's view was read (-1: unknown, refuse on any
///   newcomer);
/// - 2: this round's own representatives committed by earlier calls (packed u32);
/// - 3: the fewest equal signature positions that make a candidate;
/// - 4: `num_perm`;
/// - 5: `max_reps` (0: none);
/// - 6: per band key of the call (below), the representatives its bucket held as the decisions
///   expect at this call: at the read, plus this round's own committed by earlier calls
///   (packed u32);
/// - 7: the band keys (their places in the call's list, packed u32, from 1) that documents of the
///   round refused by earlier calls would have joined;
/// - 8 to 12: the counts of: decision counters' names, band keys, content hashes earlier refused
///   documents would have made first copies, content hashes this call makes first copies,
///   documents;
/// - 13 on: those names, band keys (every key a document of the call checks or joins,
///   once), tainted hashes and first-copy hashes, then the documents column by column: ids,
///   specs, decisions, content hashes ("" when none), representatives' records less their
///   document numbers ("" when none: id's length (u32), id, signature, and where its shingle
///   set is: [`SET_TOKEN`] and its token), the tokens of their shingle sets ("" when none;
///   the producer writes the sets under them beside the call, in one transaction with it, and
///   the call removes those of the documents it refuses), signatures (its signature when it
///   has checks and is no representative, "" otherwise).
///
/// A spec packs the document's counter (u8, its place in the names), flags (u8: 1 when it
/// becomes its text's first copy, 2 when any refused representative in a bucket it checks may
/// have changed it, "strict"), the counts of its checks, tight keys and joins (u32 each), then
/// the places of those keys (u32 each): the buckets it was decided against, those whose room
/// under max_reps decided its joins, the buckets it joins (a key twice joins twice).
///
/// A bucket that holds more than its documents were decided against holds representatives
/// other producers committed since the read (those numbered from the count at the read on,
/// less this round's own): the same for every document of the call that checks it, since what
/// the call's own commits add to it, the documents after them expect too. When none of those
/// is a candidate for a document (fewer equal signature positions than the floor, as the
/// decision core skips them) and its joins still have room, it is decided the same with them
/// and committed; otherwise refused. When no bucket gained any and nothing was refused, no
/// document's checks need looking at.
///
/// A refused document's representative is one the others were compared with and did not
/// match (a match is flagged strict, or is in a bucket the document does not check): without it
/// a document is decided the same (kept: no candidate matched, so none of fewer does; a near
/// duplicate: the first candidate that matched is still first), so it is committed when each
/// bucket it checks holds what it was decided against less what the refused ones would have
/// added, unless that bucket's room decided its joins (a tight key): then fewer
/// representatives could have let it join more.
///
/// The state every document is checked against is read first, in one command per hash (the
/// ids, every bucket the call checks or joins, the first copies it would make), and followed
/// through the call in Lua tables as documents are committed; the writes then go in one command
/// per hash, representatives first and decisions last. A command per document and bucket was
/// most of the server's time, and then the Lua strings and table operations of about a hundred
/// arguments per document: each band key is now an argument once per call, and a document's
/// keys are places in that list, read only where needed. A script's writes cannot fail once the
/// first has been made (the server refuses a write script for memory only before it starts
/// writing), so the call commits every document it accepts, or none.
const COMMIT: &str = r#"
local meta, ids, buckets, copies, reps, sets = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- `count` u32 words of `s` from byte `from`, unpacked a part at a time (one unpack returns at
-- most a few thousand values).
local formats = {}
local function words(s, from, count)
  local k = math.min(count, 256)
  local f = formats[k]
  if not f then f = '<' .. string.rep('I4', k); formats[k] = f end
  if count <= 256 then
    if count == 0 then return {} end
    local out = {struct.unpack(f, s, from)}
    out[count + 1] = nil
    return out
  end
  local out, got = {}, 0
  while got < count do
    k = math.min(count - got, 256)
    f = formats[k]
    if not f then f = '<' .. string.rep('I4', k); formats[k] = f end
    local part = {struct.unpack(f, s, from + 4 * got)}
    for i = 1, k do out[got + i] = part[i] end
    got = got + k
  end
  return out
end
-- Fields ARGV[from..to] of hash `key`, in parts of 4000 (unpack's stack holds 8000 values).
local function hmget(key, from, to)
  if to - from < 4000 then return redis.call('HMGET', key, unpack(ARGV, from, to)) end
  local out = {}
  for i = from, to, 4000 do
    local part = redis.call('HMGET', key, unpack(ARGV, i, math.min(i + 3999, to)))
    for k = 1, #part do out[i - from + k] = part[k] end
  end
  return out
end
local function hset(key, fields)
  for i = 1, #fields, 1000 do
    redis.call('HSET', key, unpack(fields, i, math.min(i + 999, #fields)))
  end
end

local read_reps = tonumber(ARGV[1])
local own = {}
local own_packed = ARGV[2]
for _, r in ipairs(words(own_packed, 1, #own_packed / 4)) do own[r] = true end
local floor_count = tonumber(ARGV[3])
local num_perm = tonumber(ARGV[4])
local max_reps = tonumber(ARGV[5])
local expected = ARGV[6]
local nc, nk, nt, nf, n = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]),
  tonumber(ARGV[11]), tonumber(ARGV[12])
local counters_at = 13
local keys_at = counters_at + nc
local tainted_at = keys_at + nk
local firsts_at = tainted_at + nt
local id_at = firsts_at + nf
local spec_at, blob_at, hash_at = id_at + n, id_at + 2 * n, id_at + 3 * n
local body_at, token_at, sig_at = id_at + 4 * n, id_at + 5 * n, id_at + 6 * n

-- Per band key (by its place): its bucket's bytes at the start of the call (false: none), and
-- the bytes other producers added since the read (nil: none).
local held, extra = {}, {}
local grown = false
-- Per band key: the representatives the call's commits append to its bucket, and the keys in
-- the order they first got one.
local appended, appended_order = {}, {}
if nk > 0 then
  held = hmget(buckets, keys_at, keys_at + nk - 1)
  local base = words(expected, 1, nk)
  for k = 1, nk do
    local h = held[k]
    local e = (h and #h or 0) - 4 * base[k]
    if e ~= 0 then
      extra[k] = e
      grown = true
    end
  end
end
-- Band keys a refused document would have joined, and content hashes it would have made a
-- first copy: what the documents after it that read them wait for.
local gone = {}
local any_gone = false
for _, k in ipairs(words(ARGV[7], 1, #ARGV[7] / 4)) do gone[k] = true; any_gone = true end
local missing_hash = {}
for i = tainted_at, tainted_at + nt - 1 do missing_hash[ARGV[i]] = true end

local decided = n > 0 and hmget(ids, id_at, id_at + n - 1) or {}
local has_copy = {}
if nf > 0 then
  local got = hmget(copies, firsts_at, firsts_at + nf - 1)
  for i = 1, nf do has_copy[ARGV[firsts_at + i - 1]] = got[i] and true or false end
end

-- The representatives other producers added to a bucket since the view was read, newest
-- first: a bucket grows at its end in the order representatives are numbered.
local arrived_in = {}
local function arrivals(k)
  local got = arrived_in[k]
  if got then return got end
  got = {}
  local h = held[k] or ''
  local i = #h - 3
  while i >= 1 do
    local r = struct.unpack('<I4', h, i)
    if r < read_reps then break end
    if not own[r] then got[#got + 1] = r end
    i = i - 4
  end
  arrived_in[k] = got
  return got
end
-- A signature's words from byte `from` of `s` (nil when `s` is too short).
local function signature_at(s, from)
  if #s < from - 1 + 4 * num_perm then return nil end
  return words(s, from, num_perm)
end
local sigs = {}
local function rep_sig(r)
  local s = sigs[r]
  if s == nil then
    s = false
    local rec = redis.call('HGET', reps, struct.pack('<I4', r))
    if rec and #rec >= 12 then s = signature_at(rec, 13 + struct.unpack('<I4', rec, 9)) or false end
    sigs[r] = s
  end
  return s
end
-- Whether document `d`, decided without `newcomers` (representatives that arrived in buckets it
-- checks), is decided the same with them: none is a candidate (an estimate below the floor is
-- never compared further), and each bucket it joins still has room under max_reps. A
-- comparison stops as soon as its outcome is known.
local spare = num_perm - floor_count
local function stands(d, body, joins, newcomers)
  if max_reps > 0 and joins then
    local count = {}
    for _, k in ipairs(joins) do
      local h, pieces = held[k], appended[k]
      local now = count[k] or ((h and #h / 4 or 0) + (pieces and #pieces or 0))
      if now >= max_reps then return false end
      count[k] = now + 1
    end
  end
  if floor_count <= 0 then return false end
  local mine
  if body ~= '' then
    mine = #body >= 4 and signature_at(body, 5 + struct.unpack('<I4', body))
  else
    mine = signature_at(ARGV[sig_at + d - 1], 1)
  end
  if not mine then return false end
  for r in pairs(newcomers) do
    local theirs = rep_sig(r)
    if not theirs then return false end
    local equal, unequal = 0, 0
    for p = 1, num_perm do
      if mine[p] == theirs[p] then
        equal = equal + 1
        if equal >= floor_count then return false end
      else
        unequal = unequal + 1
        if unequal > spare then break end
      end
    end
  end
  return true
end

local m = redis.call('HMGET', meta, 'documents', 'representatives', 'sequence')
local documents, representatives, sequence = tonumber(m[1]) or 0, tonumber(m[2]) or 0, tonumber(m[3]) or 0
local counted = {}
local id_fields, rep_fields, copy_fields = {}, {}, {}
local unset = {}
local out = {}
local refused = 0
for d = 1, n do
  local spec = ARGV[spec_at + d - 1]
  local counter, flags, nchecks, ntight, njoins = struct.unpack('<BBI4I4I4', spec)
  local first = flags % 2 == 1
  local joins_from = 15 + 4 * (nchecks + ntight)
  local joins = nil
  local ok = not decided[d]
  local newcomers = nil
  if ok and (grown or any_gone) and nchecks > 0 then
    local checks = words(spec, 15, nchecks)
    local strict = flags >= 2
    local tight = ntight > 0 and words(spec, 15 + 4 * nchecks, ntight)
    for c = 1, nchecks do
      local k = checks[c]
      if gone[k] then
        local stops = strict
        if not stops and tight then
          for _, t in ipairs(tight) do if t == k then stops = true end end
        end
        if stops then
          ok = false
          break
        end
      end
      local e = extra[k]
      if e then
        -- Other producers' representatives arrived: judged below, when they are all there is.
        local got = read_reps >= 0 and e > 0 and arrivals(k)
        if not got or 4 * #got ~= e then
          ok = false
          break
        end
        newcomers = newcomers or {}
        for _, r in ipairs(got) do newcomers[r] = true end
      end
    end
  end
  local hash = ARGV[hash_at + d - 1]
  if ok and hash ~= '' and missing_hash[hash] then ok = false end
  if ok and first and has_copy[hash] then ok = false end
  local body = ARGV[body_at + d - 1]
  if njoins > 0 then joins = words(spec, joins_from, njoins) end
  if ok and newcomers then ok = stands(d, body, joins, newcomers) end
  if not ok then
    -- What it would have written is not there: the documents after it that read it wait.
    refused = refused + 1
    if joins then
      for _, k in ipairs(joins) do gone[k] = true end
      any_gone = true
    end
    if first then missing_hash[hash] = true end
    -- Its shingle set, written beside this call, goes with it.
    local token = ARGV[token_at + d - 1]
    if token ~= '' then unset[#unset + 1] = token end
    out[2 * d - 1] = -1
    out[2 * d] = -1
  else
    local docno, docnum = '', -1
    if body ~= '' or first then
      docnum = documents
      documents = documents + 1
      docno = struct.pack('<I8', docnum)
    end
    local became = 0
    local id = ARGV[id_at + d - 1]
    if body ~= '' then
      local rep = struct.pack('<I4', representatives)
      representatives = representatives + 1
      became = representatives
      rep_fields[#rep_fields + 1] = rep
      rep_fields[#rep_fields + 1] = docno .. body
      for _, k in ipairs(joins or {}) do
        local pieces = appended[k]
        if not pieces then
          pieces = {}
          appended[k] = pieces
          appended_order[#appended_order + 1] = k
        end
        pieces[#pieces + 1] = rep
      end
    end
    if first then
      copy_fields[#copy_fields + 1] = hash
      copy_fields[#copy_fields + 1] = docno .. id
      has_copy[hash] = true
    end
    id_fields[#id_fields + 1] = id
    id_fields[#id_fields + 1] = struct.pack('<I8', sequence) .. ARGV[blob_at + d - 1]
    sequence = sequence + 1
    counted[counter] = (counted[counter] or 0) + 1
    out[2 * d - 1] = became
    out[2 * d] = docnum
  end
end

hset(reps, rep_fields)
for i = 1, #unset, 1000 do
  redis.call('HDEL', sets, unpack(unset, i, math.min(i + 999, #unset)))
end
local bucket_fields = {}
for _, k in ipairs(appended_order) do
  bucket_fields[#bucket_fields + 1] = ARGV[keys_at + k - 1]
  local pieces = appended[k]
  bucket_fields[#bucket_fields + 1] = (held[k] or '') .. (#pieces == 1 and pieces[1] or table.concat(pieces))
end
hset(buckets, bucket_fields)
hset(copies, copy_fields)
hset(ids, id_fields)
local meta_fields = {'documents', string.format('%d', documents),
                     'representatives', string.format('%d', representatives),
                     'sequence', string.format('%d', sequence)}
for c, k in pairs(counted) do
  local counter = ARGV[counters_at + c - 1]
  meta_fields[#meta_fields + 1] = counter
  meta_fields[#meta_fields + 1] = string.format('%d', (tonumber(redis.call('HGET', meta, counter)) or 0) + k)
end
redis.call('HSET', meta, unpack(meta_fields))
if refused > 0 then redis.call('HINCRBY', meta, 'conflicts', refused) end
return out
"#;

/// Reserves integer ids no document has. KEYS: meta, ids. ARGV: how many, then the ids the
/// batch gives (encoded), which are not to be handed out.
const RESERVE: &str = r#"
local n = tonumber(ARGV[1])
local given = {}
for i = 2, #ARGV do given[ARGV[i]] = true end
local out = {}
while #out < n do
  local v = redis.call('HINCRBY', KEYS[1], 'next_auto', 1) - 1
  local id = 'i' .. string.format('%d', v)
  if not given[id] and redis.call('HEXISTS', KEYS[2], id) == 0 then out[#out + 1] = v end
end
return out
"#;

/// Documents committed per script call, so that the server is never held long by one producer.
const COMMIT_CHUNK: usize = 256;

/// Rounds of reading again after another producer got in the way before giving up: each round
/// commits at least one document unless another producer committed one meanwhile.
const MAX_ROUNDS: usize = 100_000;

/// The most and the fewest documents a round reads, decides and commits (see
/// [`RedisIndex::run`]).
const ROUND_MAX: usize = 1 << 16;
const ROUND_MIN: usize = 16;

/// The largest buffer of a commit call a producer keeps for the next.
const PACKED_KEPT: usize = 64 << 20;

/// Bytes of representatives a producer caches (they never change once written).
const CACHE_BYTES: usize = 256 << 20;

/// What a namespace records of the settings it was made with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Recorded {
    pub(crate) index: neardup_index::IndexSettings,
    pub(crate) empty: String,
}

impl Recorded {
    fn of(settings: &IndexSettings) -> Recorded {
        Recorded {
            index: settings.recorded(),
            empty: if settings.keep_empty { "keep" } else { "drop" }.to_string(),
        }
    }

    pub(crate) fn differences(&self, mine: &Recorded) -> Vec<String> {
        let mut out = self.index.differences(&mine.index);
        if self.empty != mine.empty {
            out.push(format!("empty: {} vs {}", self.empty, mine.empty));
        }
        out
    }
}

/// A representative as the server holds it.
pub(crate) struct RepRecord {
    pub(crate) docno: u64,
    pub(crate) id: String,
    pub(crate) signature: Vec<u32>,
    /// Shared with the decision cores seeded from the cache (never copied into them).
    pub(crate) shingles: Option<Arc<[u32]>>,
}

impl RepRecord {
    fn bytes(&self) -> usize {
        64 + self.id.len()
            + 4 * self.signature.len()
            + 4 * self.shingles.as_ref().map_or(0, |s| s.len())
    }
}

/// The server's keys of one namespace.
pub(crate) struct Keys {
    pub(crate) settings: String,
    pub(crate) meta: String,
    pub(crate) ids: String,
    pub(crate) buckets: String,
    pub(crate) copies: String,
    pub(crate) reps: String,
    pub(crate) sets: String,
}

impl Keys {
    pub(crate) fn new(namespace: &str) -> Keys {
        let k = |s: &str| format!("neardup:{namespace}:{s}");
        Keys {
            settings: k("settings"),
            meta: k("meta"),
            ids: k("ids"),
            buckets: k("buckets"),
            copies: k("copies"),
            reps: k("reps"),
            sets: k("sets"),
        }
    }

    /// Every key of the namespace.
    pub(crate) fn all(&self) -> [&String; 7] {
        [
            &self.settings,
            &self.meta,
            &self.ids,
            &self.buckets,
            &self.copies,
            &self.reps,
            &self.sets,
        ]
    }
}

/// Counters and sizes of a namespace (see [`RedisIndex::stats`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RedisStats {
    /// The namespace.
    pub namespace: String,
    /// Document ids checked or inserted.
    pub ids: u64,
    /// Decisions by reason (and `inserted` for documents added without a decision).
    pub decisions: BTreeMap<String, u64>,
    /// Kept documents that represent at least one bucket.
    pub representatives: u64,
    /// Buckets holding at least one representative.
    pub buckets: u64,
    /// Distinct texts seen (first copies).
    pub texts: u64,
    /// Documents whose commit was refused because another producer had changed what they were
    /// decided against, or because they read what such a document would have written (each
    /// was read and decided again).
    pub conflicts: u64,
    /// Bytes the server reports for each of the namespace's keys (`MEMORY USAGE`), summed.
    pub memory_bytes: u64,
}

/// An online dedup index in a Redis server (see the module docs).
pub struct RedisIndex {
    settings: IndexSettings,
    address: String,
    namespace: String,
    keys: Keys,
    con: Connection,
    commit: Script,
    reserve: Script,
    cache: HashMap<u32, RepRecord>,
    cache_bytes: usize,
    all_hot: Vec<bool>,
    band_columns: usize,
    /// How many documents the next round takes.
    round_size: usize,
    /// Documents per commit script call ([`COMMIT_CHUNK`]; tests make it smaller so that what
    /// one call refuses reaches the next).
    commit_chunk: usize,
    /// The buffer the last commit call was written in ([`PackedCall::new`]).
    packed: Vec<u8>,
    /// The first half of this producer's shingle set tokens (see [`SET_TOKEN`]).
    token_prefix: [u8; 8],
    /// Tokens handed out so far (their second half).
    tokens: u64,
}

/// The address in messages: the URL without a password.
pub(crate) fn shown(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

impl RedisIndex {
    /// Connects to the server at `url` (`redis://host:port/db`) and opens `namespace`, recording
    /// the settings when it is new and refusing them when it was made with others.
    pub fn open(
        settings: IndexSettings,
        url: &str,
        namespace: &str,
    ) -> Result<RedisIndex, IndexError> {
        let address = shown(url);
        let unreachable = |error| IndexError::Unreachable {
            address: address.clone(),
            error,
        };
        let client = redis::Client::open(url).map_err(unreachable)?;
        let mut con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .map_err(unreachable)?;
        con.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(unreachable)?;
        con.set_write_timeout(Some(Duration::from_secs(60)))
            .map_err(unreachable)?;
        let keys = Keys::new(namespace);
        let mine = Recorded::of(&settings);
        let json = serde_json::to_string(&mine).expect("settings serialise");
        let (stored, producer): (Option<String>, u64) = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(&keys.settings)
            .arg(&json)
            .arg("NX")
            .ignore()
            .cmd("GET")
            .arg(&keys.settings)
            .cmd("HINCRBY")
            .arg(&keys.meta)
            .arg("producers")
            .arg(1)
            .query(&mut con)
            .map_err(unreachable)?;
        // What makes this producer's shingle set tokens its own: its number among the
        // namespace's producers, and the clock for a namespace replaced meanwhile.
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut token_prefix = [0u8; 8];
        token_prefix[..4].copy_from_slice(&(producer as u32).to_le_bytes());
        token_prefix[4..].copy_from_slice(&clock.to_le_bytes());
        let stored = stored.ok_or_else(|| IndexError::Damaged {
            address: address.clone(),
            namespace: namespace.to_string(),
            what: "its settings are missing right after they were written".into(),
        })?;
        let theirs: Recorded = serde_json::from_str(&stored).map_err(|e| IndexError::Damaged {
            address: address.clone(),
            namespace: namespace.to_string(),
            what: format!("its settings record cannot be read ({e})"),
        })?;
        let differences = theirs.differences(&mine);
        if !differences.is_empty() {
            return Err(IndexError::SettingsDiffer {
                address,
                namespace: namespace.to_string(),
                differences,
            });
        }
        let columns = settings.rule.columns(settings.sketcher.bands());
        Ok(RedisIndex {
            band_columns: settings.rule.band_columns(settings.sketcher.bands()),
            all_hot: vec![true; columns],
            settings,
            address,
            namespace: namespace.to_string(),
            keys,
            con,
            commit: Script::new(COMMIT),
            reserve: Script::new(RESERVE),
            cache: HashMap::new(),
            cache_bytes: 0,
            round_size: ROUND_MAX,
            commit_chunk: COMMIT_CHUNK,
            packed: Vec::new(),
            token_prefix,
            tokens: 0,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &IndexSettings {
        &self.settings
    }

    /// The server's address as messages show it.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn failed(&self, error: redis::RedisError) -> IndexError {
        IndexError::Redis {
            address: self.address.clone(),
            error,
        }
    }

    /// The connection, the server's address and the namespace: what a transfer reads the
    /// namespace over ([`crate::transfer`], which `RedisIndex::save` is).
    pub(crate) fn connection(&mut self) -> (&mut Connection, &str, &str) {
        (&mut self.con, &self.address, &self.namespace)
    }

    /// Documents checked or inserted (each id once), by every producer.
    pub fn len(&mut self) -> Result<u64, IndexError> {
        redis::cmd("HLEN")
            .arg(&self.keys.ids)
            .query(&mut self.con)
            .map_err(|e| self.failed(e))
    }

    /// Whether no document was checked or inserted yet.
    pub fn is_empty(&mut self) -> Result<bool, IndexError> {
        self.len().map(|n| n == 0)
    }

    /// The namespace's counters and the server memory its keys take.
    pub fn stats(&mut self) -> Result<RedisStats, IndexError> {
        let k = &self.keys;
        type Counts = (std::collections::HashMap<String, u64>, u64, u64, u64);
        let (meta, ids, buckets, copies): Counts = redis::pipe()
            .atomic()
            .cmd("HGETALL")
            .arg(&k.meta)
            .cmd("HLEN")
            .arg(&k.ids)
            .cmd("HLEN")
            .arg(&k.buckets)
            .cmd("HLEN")
            .arg(&k.copies)
            .query(&mut self.con)
            .map_err(|e| IndexError::Redis {
                address: self.address.clone(),
                error: e,
            })?;
        let mut memory_bytes = 0;
        for key in k.all() {
            let used: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .query(&mut self.con)
                .map_err(|e| IndexError::Redis {
                    address: self.address.clone(),
                    error: e,
                })?;
            memory_bytes += used.unwrap_or(0);
        }
        let decisions = ["unique", "near", "exact", "empty", "error", "inserted"]
            .iter()
            .map(|r| (r.to_string(), meta.get(*r).copied().unwrap_or(0)))
            .collect();
        Ok(RedisStats {
            namespace: self.namespace.clone(),
            ids,
            decisions,
            representatives: meta.get("representatives").copied().unwrap_or(0),
            buckets,
            texts: copies,
            conflicts: meta.get("conflicts").copied().unwrap_or(0),
            memory_bytes,
        })
    }

    /// Every document's decision, in the order they were committed (a document inserted without
    /// a decision is kept, `unique`). Reads the whole namespace's ids.
    pub fn decisions(&mut self) -> Result<Vec<Decision>, IndexError> {
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            type Page = (u64, Vec<(Vec<u8>, Vec<u8>)>);
            let (next, items): Page = redis::cmd("HSCAN")
                .arg(&self.keys.ids)
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query(&mut self.con)
                .map_err(|e| self.failed(e))?;
            for (id, blob) in items {
                let id = std::str::from_utf8(&id).ok().and_then(DocId::decode);
                let (Some(id), Some((seq, d))) = (id, decode_sequenced(&blob)) else {
                    return Err(IndexError::Damaged {
                        address: self.address.clone(),
                        namespace: self.namespace.clone(),
                        what: "a recorded decision cannot be read".into(),
                    });
                };
                out.push((seq, d.to_decision(id)));
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        out.sort_by_key(|(seq, _)| *seq);
        Ok(out.into_iter().map(|(_, d)| d).collect())
    }

    /// See [`crate::Index::check_many`]. A server lost in the middle is an error naming how far
    /// the batch got.
    pub fn check_many(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
    ) -> Result<Vec<Decision>, IndexError> {
        self.run(texts, ids, Verb::Check).map(|(ids, decided)| {
            ids.into_iter()
                .map(|id| decided[&id].to_decision(id))
                .collect()
        })
    }

    /// See [`crate::Index::insert_many`].
    pub fn insert_many(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
    ) -> Result<Vec<DocId>, IndexError> {
        self.run(texts, ids, Verb::Insert).map(|(ids, _)| ids)
    }

    /// See [`crate::Index::query_many`]: one read of everything the texts reach.
    pub fn query_many(&mut self, texts: &[&str]) -> Result<Vec<Vec<(DocId, f64)>>, IndexError> {
        let signed = Signer::new(&self.settings).sign_texts(texts);
        let reached: Vec<&Signed> = signed.iter().flatten().collect();
        if reached.is_empty() {
            return Ok(vec![Vec::new(); texts.len()]);
        }
        let view = self.read_view(&[], &reached).map_err(|e| self.failed(e))?;
        let mut core = self.seeded(&view)?;
        Ok(signed
            .iter()
            .map(|s| match s {
                Some(s) => sign::matches(&mut core, &self.all_hot, s),
                None => Vec::new(),
            })
            .collect())
    }

    /// Checks or inserts a batch: ids, signing, then rounds of reading, deciding and
    /// committing until every document is decided.
    fn run(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
        verb: Verb,
    ) -> Result<(Vec<DocId>, HashMap<DocId, Decided>), IndexError> {
        assert_eq!(texts.len(), ids.len(), "one id per text");
        let total = texts.len();
        let lost = |address: &str, decided: usize, error| IndexError::Lost {
            address: address.to_string(),
            decided,
            total,
            error,
        };
        let ids = self
            .assign_ids(ids)
            .map_err(|e| lost(&self.address, 0, e))?;
        // The first occurrence of each id is decided; later ones get its decision.
        let mut seen = HashSet::new();
        let firsts: Vec<usize> = (0..ids.len())
            .filter(|&i| seen.insert(ids[i].clone()))
            .collect();
        let mut decided: HashMap<DocId, Decided> = HashMap::new();
        // Every first occurrence is signed, even one whose id turns out to be decided already
        // (a retry): the first round reads the ids with the rest, one round trip fewer.
        let mut fresh = vec![false; texts.len()];
        for &i in &firsts {
            fresh[i] = true;
        }
        let signed = Signer::new(&self.settings).sign_all(texts, &fresh);
        let mut pending = firsts;
        let mut rounds = 0;
        while !pending.is_empty() {
            rounds += 1;
            if rounds > MAX_ROUNDS {
                return Err(IndexError::Contention {
                    address: self.address.clone(),
                    decided: total - pending.len(),
                    total,
                });
            }
            let take = self.round_size.min(pending.len());
            let mut left = self
                .round(&ids, &signed, &pending[..take], verb, &mut decided)
                .map_err(|e| match e {
                    RoundError::Redis(source) => {
                        lost(&self.address, count_done(&ids, &decided), source)
                    }
                    RoundError::Index(e) => e,
                })?;
            // The longer a round, the more other producers commit between its read and its
            // commit: rounds shrink while many of their documents are refused, and grow back
            // while none are (a producer alone always decides a batch in one round).
            self.round_size = if left.is_empty() {
                self.round_size.saturating_mul(2).min(ROUND_MAX)
            } else if left.len() * 8 > take {
                (self.round_size / 2).max(ROUND_MIN)
            } else {
                self.round_size
            };
            left.extend_from_slice(&pending[take..]);
            pending = left;
        }
        Ok((ids, decided))
    }

    /// One round: reads what `pending` reaches, decides it in order, commits as much as is
    /// still valid. Returns the documents left.
    fn round(
        &mut self,
        ids: &[DocId],
        signed: &[Option<Signed>],
        pending: &[usize],
        verb: Verb,
        decided: &mut HashMap<DocId, Decided>,
    ) -> Result<Vec<usize>, RoundError> {
        let plan = self.plan(ids, signed, pending, verb, decided)?;
        self.commit_planned(ids, signed, &plan, decided)
    }

    /// Reads what `pending` reaches and decides it in order: what to commit. An id another
    /// producer decided meanwhile goes straight into `decided`.
    fn plan(
        &mut self,
        ids: &[DocId],
        signed: &[Option<Signed>],
        pending: &[usize],
        verb: Verb,
        decided: &mut HashMap<DocId, Decided>,
    ) -> Result<Plan, RoundError> {
        let pending_ids: Vec<&DocId> = pending.iter().map(|&i| &ids[i]).collect();
        let reached: Vec<&Signed> = pending
            .iter()
            .filter_map(|&i| signed[i].as_ref().filter(|s| s.has_keys()))
            .collect();
        let view = self.read_view(&pending_ids, &reached)?;
        let mut core = self.seeded(&view)?;
        let num_perm = self.settings.sketcher.num_perm();
        let floor = core.candidate_floor();
        // As the decision core compares: a share of equal positions below the floor is none.
        let floor_count = (0..=num_perm)
            .find(|&c| c as f64 / num_perm as f64 >= floor)
            .unwrap_or(num_perm + 1);
        let mut lengths: HashMap<u64, usize> = view
            .buckets
            .iter()
            .map(|(k, held)| (*k, held.len() / 4))
            .collect();
        let held_at_read = lengths.clone();
        let mut copies: HashSet<u128> = view.copies.keys().copied().collect();
        let exact_column = self.settings.rule.exact_key.then_some(self.band_columns);
        let max_reps = self.settings.deduper.max_reps;
        // What the buckets the view read hold, and the buckets this batch's own representatives
        // join (by their place in the round): where a near duplicate met the one it matched is
        // looked up when one does (most representatives never are).
        let view_buckets: HashMap<u64, &[u8]> = view
            .buckets
            .iter()
            .map(|(k, held)| (*k, &held[..]))
            .collect();
        let mut own_joins: HashMap<u64, Vec<u64>> = HashMap::new();
        let cache = &self.cache;
        let holds = |own_joins: &HashMap<u64, Vec<u64>>, key: &u64, of: SampleAddr| {
            if of.file == BATCH_FILE {
                own_joins.get(&of.record).is_some_and(|j| j.contains(key))
            } else {
                view_buckets
                    .get(key)
                    .is_some_and(|held| words(held).any(|r| committed_addr(cache[&r].docno) == of))
            }
        };

        // `decided` gets each decision once it is on the server.
        let mut ops: Vec<(usize, Commit, Decided)> = Vec::new();
        for (n, (&i, known)) in pending.iter().zip(&view.ids).enumerate() {
            if let Some(d) = known {
                // Another producer decided this id meanwhile (a retry): its decision stands.
                decided.insert(ids[i].clone(), d.clone());
                continue;
            }
            let addr = SampleAddr {
                file: BATCH_FILE,
                record: n as u64,
                field: 0,
            };
            let s = signed[i].as_ref();
            let reps_before = core.stats().representatives;
            let (decision, verdict) = match verb {
                Verb::Check => sign::decide(
                    &mut core,
                    &self.all_hot,
                    self.settings.keep_empty,
                    addr,
                    &ids[i],
                    s,
                )
                .map_err(RoundError::Index)?,
                Verb::Insert => {
                    let d = sign::insert(&mut core, &self.all_hot, addr, &ids[i], s)
                        .map_err(RoundError::Index)?;
                    let v = s.filter(|s| s.has_keys()).map(|_| Verdict::Unique);
                    (d, v)
                }
            };
            let mut op = Commit {
                id: ids[i].encode(),
                blob: encode_decision(&decision),
                counter: match verb {
                    Verb::Insert => "inserted",
                    Verb::Check => decision.reason.as_str(),
                },
                checks: Vec::new(),
                content_hash: None,
                first_copy: false,
                strict: false,
                tight: Vec::new(),
                joins: Vec::new(),
                head: Vec::new(),
                set: Vec::new(),
                token: None,
                signature: Vec::new(),
            };
            if let (Some(s), Some(verdict)) = (s, verdict) {
                let exact = matches!(verdict, Verdict::Exact { .. });
                if let Some(col) = exact_column
                    && s.row[col] != NO_KEY
                {
                    op.content_hash = Some(s.content_hash);
                    op.first_copy = !exact && copies.insert(s.content_hash);
                }
                if !exact {
                    // The buckets whose growth could change the decision: every one for a kept
                    // document (a newcomer may be its near copy); for a near duplicate only
                    // those of the bands before the one where it met its match (the decision
                    // core compares band by band, and a bucket only grows at its end, after
                    // the match), and that band's too when the match is this batch's own, so
                    // that it is refused with its match.
                    let bands = match verdict {
                        Verdict::Near { of, .. } => {
                            let met = s.row[..self.band_columns]
                                .iter()
                                .position(|k| holds(&own_joins, k, of));
                            // A match of this batch's own may be refused: then so is this one.
                            op.strict = of.file == BATCH_FILE || met.is_none();
                            match met {
                                Some(b) if of.file == BATCH_FILE => b + 1,
                                Some(b) => b,
                                None => self.band_columns,
                            }
                        }
                        _ => self.band_columns,
                    };
                    for &key in &s.row[..bands] {
                        // A row has a few keys: a list finds one twice faster than a set.
                        if key != NO_KEY && !op.checks.contains(&key) {
                            op.checks.push(key);
                        }
                    }
                }
                if matches!(verdict, Verdict::Unique) {
                    // As the decision core's join_buckets: each band with room, in band order.
                    for &key in &s.row[..self.band_columns] {
                        let held = lengths.entry(key).or_insert(0);
                        if key == NO_KEY {
                            continue;
                        }
                        if max_reps.is_some_and(|m| *held >= m) {
                            // Full: with fewer representatives it could have joined.
                            if !op.tight.contains(&key) {
                                op.tight.push(key);
                            }
                            continue;
                        }
                        *held += 1;
                        op.joins.push(key);
                    }
                    if !op.joins.is_empty() {
                        let sets = s.shingles.as_deref().unwrap_or(&[]);
                        if !sets.is_empty() {
                            let mut token = [0u8; 16];
                            token[..8].copy_from_slice(&self.token_prefix);
                            token[8..].copy_from_slice(&self.tokens.to_le_bytes());
                            self.tokens += 1;
                            op.token = Some(token);
                            op.set = sets.iter().flat_map(|v| v.to_le_bytes()).collect();
                        }
                        op.head = rep_head(&op.id, s, op.token.as_ref());
                        own_joins.insert(addr.record, op.joins.clone());
                    }
                }
                if op.head.is_empty() && !op.checks.is_empty() {
                    // Its representative's record holds it otherwise.
                    op.signature = s.sig.iter().flat_map(|v| v.to_le_bytes()).collect();
                }
            }
            debug_assert_eq!(
                core.stats().representatives - reps_before,
                u64::from(!op.joins.is_empty()),
                "the simulated joins are the core's"
            );
            ops.push((i, op, decision));
        }
        Ok(Plan {
            ops,
            held_at_read,
            reps_at_read: view.reps_at_read,
            floor_count,
        })
    }

    /// Commits `ops` in order. A document another producer got in the way of is refused, and
    /// so is every later one it would have changed (the script follows what the refused ones
    /// would have written through a call; [`Earlier`] carries it to the next): they are left to
    /// be read and decided again, the others stand. Returns the documents left.
    fn commit_planned(
        &mut self,
        ids: &[DocId],
        signed: &[Option<Signed>],
        plan: &Plan,
        decided: &mut HashMap<DocId, Decided>,
    ) -> Result<Vec<usize>, RoundError> {
        let ops = &plan.ops;
        let mut left = Vec::new();
        let mut earlier = Earlier::default();
        let mut at = 0;
        while at < ops.len() {
            let end = (at + self.commit_chunk).min(ops.len());
            let outcome = self.commit_chunk(plan, &ops[at..end], &earlier)?;
            for ((i, op, d), (rep, docno)) in ops[at..end].iter().zip(outcome) {
                match rep {
                    Committed::Refused => {
                        left.push(*i);
                        earlier.tainted_keys.extend(op.joins.iter().copied());
                        if let (true, Some(h)) = (op.first_copy, op.content_hash) {
                            earlier.tainted_hashes.push(h);
                        }
                    }
                    Committed::Representative(r) => {
                        earlier.own.extend_from_slice(&r.to_le_bytes());
                        for key in &op.joins {
                            *earlier.joined.entry(*key).or_insert(0) += 1;
                        }
                        // This producer's own representative: no need to read it back.
                        let s = signed[*i].as_ref().expect("a representative was signed");
                        self.cache_rep(
                            r,
                            RepRecord {
                                docno,
                                id: op.id.clone(),
                                signature: s.sig.clone(),
                                shingles: s.shingles.as_deref().map(Arc::from),
                            },
                        );
                        decided.insert(ids[*i].clone(), d.clone());
                    }
                    Committed::Plain => {
                        decided.insert(ids[*i].clone(), d.clone());
                    }
                }
            }
            at = end;
        }
        Ok(left)
    }

    /// Runs the commit script over `ops`, with what earlier calls of the round did (the band
    /// keys and content hashes refused documents would have written, the representatives
    /// committed and their joins); returns what became of each document and its document number.
    /// The arguments are laid out as the script says: each band key once, a document's keys as
    /// places in that list.
    fn commit_chunk(
        &mut self,
        plan: &Plan,
        ops: &[(usize, Commit, Decided)],
        earlier: &Earlier,
    ) -> Result<Vec<(Committed, u64)>, RoundError> {
        let mut places: HashMap<u64, u32> = HashMap::new();
        let mut keys: Vec<u64> = Vec::new();
        let mut counters: Vec<&str> = Vec::new();
        let mut specs: Vec<Vec<u8>> = Vec::with_capacity(ops.len());
        let mut firsts: Vec<u128> = Vec::new();
        for (_, op, _) in ops {
            let mut place = |key: u64| {
                *places.entry(key).or_insert_with(|| {
                    keys.push(key);
                    keys.len() as u32
                })
            };
            let counter = match counters.iter().position(|c| *c == op.counter) {
                Some(c) => c + 1,
                None => {
                    counters.push(op.counter);
                    counters.len()
                }
            };
            let flags = u8::from(op.first_copy) | (u8::from(op.strict) << 1);
            let lists = op.checks.len() + op.tight.len() + op.joins.len();
            let mut spec = Vec::with_capacity(14 + 4 * lists);
            spec.push(counter as u8);
            spec.push(flags);
            for n in [op.checks.len(), op.tight.len(), op.joins.len()] {
                spec.extend_from_slice(&(n as u32).to_le_bytes());
            }
            for &key in op.checks.iter().chain(&op.tight).chain(&op.joins) {
                spec.extend_from_slice(&place(key).to_le_bytes());
            }
            specs.push(spec);
            if let (true, Some(h)) = (op.first_copy, op.content_hash) {
                firsts.push(h);
            }
        }
        // What each bucket holds when nobody else wrote to it since the read.
        let mut expected = Vec::with_capacity(4 * keys.len());
        let mut tainted = Vec::new();
        for key in &keys {
            let held = plan.held_at_read.get(key).copied().unwrap_or(0)
                + earlier.joined.get(key).copied().unwrap_or(0);
            expected.extend_from_slice(&(held as u32).to_le_bytes());
            if earlier.tainted_keys.contains(key) {
                tainted.extend_from_slice(&places[key].to_le_bytes());
            }
        }
        let k = &self.keys;
        let mut inv = PackedCall::new(
            &self.commit,
            &[&k.meta, &k.ids, &k.buckets, &k.copies, &k.reps, &k.sets],
            std::mem::take(&mut self.packed),
        );
        // The representatives' heads and the signatures are most of it: room for them at once.
        inv.reserve(
            ops.iter()
                .map(|(_, op, _)| op.head.len() + op.signature.len() + 200)
                .sum(),
        );
        inv.arg(plan.reps_at_read)
            .arg(&earlier.own[..])
            .arg(plan.floor_count)
            .arg(self.settings.sketcher.num_perm())
            .arg(self.settings.deduper.max_reps.unwrap_or(0))
            .arg(&expected[..])
            .arg(&tainted[..])
            .arg(counters.len())
            .arg(keys.len())
            .arg(earlier.tainted_hashes.len())
            .arg(firsts.len())
            .arg(ops.len());
        for counter in &counters {
            inv.arg(*counter);
        }
        for key in &keys {
            inv.arg(&key.to_le_bytes()[..]);
        }
        for h in earlier.tainted_hashes.iter().chain(&firsts) {
            inv.arg(&h.to_le_bytes()[..]);
        }
        for (_, op, _) in ops {
            inv.arg(&op.id);
        }
        for spec in &specs {
            inv.arg(&spec[..]);
        }
        for (_, op, _) in ops {
            inv.arg(&op.blob);
        }
        for (_, op, _) in ops {
            match op.content_hash {
                Some(h) => inv.arg(&h.to_le_bytes()[..]),
                None => inv.arg(""),
            };
        }
        for (_, op, _) in ops {
            inv.arg(&op.head[..]);
        }
        for (_, op, _) in ops {
            match &op.token {
                Some(t) => inv.arg(&t[..]),
                None => inv.arg(""),
            };
        }
        for (_, op, _) in ops {
            inv.arg(&op.signature[..]);
        }
        let sets: Vec<(&[u8], &[u8])> = ops
            .iter()
            .filter_map(|(_, op, _)| op.token.as_ref().map(|t| (&t[..], &op.set[..])))
            .collect();
        let raw: Result<Vec<i64>, redis::RedisError> = if sets.is_empty() {
            inv.invoke(&self.commit, &mut self.con)
        } else {
            // The shingle sets go in beside the call, in one transaction with it (the script
            // removes those of the documents it refuses): as the script's arguments they would
            // be made Lua strings, every byte of which the server hashes.
            let mut tx = PackedCommands::transaction();
            for part in sets.chunks(500) {
                tx.command("HSET", 1 + 2 * part.len()).arg(&k.sets);
                for (token, set) in part {
                    tx.arg(*token).arg(*set);
                }
            }
            tx.call(&mut inv);
            match tx.query(&mut self.con) {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    // A server that lost its scripts (restarted, SCRIPT FLUSH) ran the rest:
                    // the same sets under the same tokens are written again with the call.
                    self.commit.load(&mut self.con)?;
                    tx.query(&mut self.con)
                }
                other => other,
            }
            .and_then(|mut answers| {
                redis::from_redis_value(answers.pop().unwrap_or(redis::Value::Nil))
                    .map_err(Into::into)
            })
        };
        if inv.capacity() <= PACKED_KEPT {
            self.packed = inv.into_buffer();
        }
        let raw = raw.map_err(RoundError::Redis)?;
        if raw.len() != 2 * ops.len() {
            return Err(RoundError::Redis(damaged(
                "the commit script answered for other documents than it was given",
            )));
        }
        Ok(raw
            .chunks_exact(2)
            .map(|p| {
                let state = match p[0] {
                    r if r < 0 => Committed::Refused,
                    0 => Committed::Plain,
                    r => Committed::Representative((r - 1) as u32),
                };
                (state, p[1].max(0) as u64)
            })
            .collect())
    }

    /// Keeps a representative read or written, within the cache's bound.
    fn cache_rep(&mut self, r: u32, rec: RepRecord) {
        if self.cache_bytes > CACHE_BYTES {
            self.cache.clear();
            self.cache_bytes = 0;
        }
        self.cache_bytes += rec.bytes();
        if let Some(old) = self.cache.insert(r, rec) {
            self.cache_bytes -= old.bytes();
        }
    }

    /// Gives each document without an id the next integer no document has, reserved on the
    /// server so that no two producers hand out the same.
    fn assign_ids(&mut self, ids: Vec<Option<DocId>>) -> Result<Vec<DocId>, redis::RedisError> {
        let missing = ids.iter().filter(|i| i.is_none()).count();
        if missing == 0 {
            return Ok(ids.into_iter().flatten().collect());
        }
        let mut inv = self.reserve.prepare_invoke();
        inv.key(&self.keys.meta).key(&self.keys.ids).arg(missing);
        for id in ids.iter().flatten() {
            if matches!(id, DocId::Int(_)) {
                inv.arg(id.encode());
            }
        }
        let fresh: Vec<i64> = inv.invoke(&mut self.con)?;
        let mut fresh = fresh.into_iter();
        Ok(ids
            .into_iter()
            .map(|id| id.unwrap_or_else(|| DocId::Int(fresh.next().expect("one id reserved each"))))
            .collect())
    }

    /// Reads the decisions of `ids` and the buckets and first copies the signed documents
    /// reach.
    fn read_view(&mut self, ids: &[&DocId], docs: &[&Signed]) -> Result<View, redis::RedisError> {
        let mut keys: Vec<u64> = Vec::new();
        let mut hashes: Vec<u128> = Vec::new();
        let mut seen_keys = HashSet::new();
        let mut seen_hashes = HashSet::new();
        let exact_column = self.settings.rule.exact_key.then_some(self.band_columns);
        for s in docs {
            for &key in &s.row[..self.band_columns] {
                if key != NO_KEY && seen_keys.insert(key) {
                    keys.push(key);
                }
            }
            if let Some(col) = exact_column
                && s.row[col] != NO_KEY
                && seen_hashes.insert(s.content_hash)
            {
                hashes.push(s.content_hash);
            }
        }
        // Plain reads in one round trip, without a script (whose arguments and answers the
        // server would copy into Lua strings) or a transaction: the view need not be one moment's,
        // as the commit checks everything a decision took from it that can change (an id still
        // undecided, a bucket's length, a text still without a first copy), and what cannot (a
        // representative, a first copy) is written before anything names it.
        let k = &self.keys;
        // One moment's view after all: the number of representatives then tells the commit
        // which of a bucket's came later (see the commit script).
        let mut reads = PackedCommands::transaction();
        reads
            .command("HMGET", 2)
            .arg(&k.meta)
            .arg("representatives");
        if !ids.is_empty() {
            reads.command("HMGET", 1 + ids.len()).arg(&k.ids);
            for id in ids {
                reads.arg(&id.encode());
            }
        }
        if !keys.is_empty() {
            reads.command("HMGET", 1 + keys.len()).arg(&k.buckets);
            for key in &keys {
                reads.arg(key.to_le_bytes());
            }
        }
        if !hashes.is_empty() {
            reads.command("HMGET", 1 + hashes.len()).arg(&k.copies);
            for h in &hashes {
                reads.arg(h.to_le_bytes());
            }
        }
        type Raw = Vec<Option<Vec<u8>>>;
        let mut answers = reads
            .query(&mut self.con)?
            .into_iter()
            .map(redis::from_redis_value::<Raw>)
            .collect::<Result<Vec<Raw>, _>>()?;
        let mut next = |asked: usize| -> Raw {
            if asked == 0 {
                Vec::new()
            } else {
                answers.remove(0)
            }
        };
        let counter = next(1);
        let (raw_ids, raw_buckets, raw_copies) =
            (next(ids.len()), next(keys.len()), next(hashes.len()));
        let reps_at_read = match counter.first() {
            Some(Some(b)) => std::str::from_utf8(b)
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or_else(|| damaged("the count of representatives cannot be read"))?,
            Some(None) => 0,
            None => return Err(damaged("the server did not answer for the counters")),
        };
        if raw_ids.len() != ids.len()
            || raw_buckets.len() != keys.len()
            || raw_copies.len() != hashes.len()
        {
            return Err(damaged(
                "the server answered a read for other fields than were asked",
            ));
        }
        let ids = raw_ids
            .into_iter()
            .map(|b| match b {
                None => Some(None),
                Some(b) => decode_decision(&b).map(Some),
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| damaged("a recorded decision cannot be read"))?;
        let mut buckets = Vec::new();
        for (key, held) in keys.iter().zip(raw_buckets) {
            let Some(held) = held else { continue };
            if held.len() % 4 != 0 {
                return Err(damaged(
                    "a bucket's length is not a whole number of entries",
                ));
            }
            buckets.push((*key, held));
        }
        let mut copies = HashMap::new();
        for (h, first) in hashes.iter().zip(raw_copies) {
            let Some(first) = first else { continue };
            if first.len() < 9 {
                return Err(damaged("a first copy's record is too short"));
            }
            let docno = u64::from_le_bytes(first[..8].try_into().expect("8 bytes"));
            let id = String::from_utf8(first[8..].to_vec())
                .map_err(|_| damaged("a first copy's id is not UTF-8"))?;
            copies.insert(*h, (docno, id));
        }
        self.fetch_reps(buckets.iter().flat_map(|(_, held)| words(held)))?;
        Ok(View {
            ids,
            buckets,
            copies,
            reps_at_read,
        })
    }

    /// Brings the representatives `wanted` names into the cache.
    fn fetch_reps(&mut self, wanted: impl Iterator<Item = u32>) -> Result<(), redis::RedisError> {
        let mut wanted: Vec<u32> = wanted.collect();
        wanted.sort_unstable();
        wanted.dedup();
        // Emptied before choosing what to read, so that every representative wanted is there
        // after.
        if self.cache_bytes > CACHE_BYTES {
            self.cache.clear();
            self.cache_bytes = 0;
        }
        let missing: Vec<u32> = wanted
            .into_iter()
            .filter(|r| !self.cache.contains_key(r))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let num_perm = self.settings.sketcher.num_perm();
        let with_sets = self.settings.deduper.verify == neardup_dedup::Verify::Jaccard;
        for part in missing.chunks(4096) {
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(&self.keys.reps);
            for r in part {
                cmd.arg(&r.to_le_bytes()[..]);
            }
            let got: Vec<Option<Vec<u8>>> = cmd.query(&mut self.con)?;
            if got.len() != part.len() {
                return Err(damaged(
                    "the server answered a read for other representatives than were asked",
                ));
            }
            // Then the shingle sets the records name, in one more command.
            let fields: Vec<Option<Vec<u8>>> = part
                .iter()
                .zip(&got)
                .map(|(r, b)| {
                    b.as_deref()
                        .filter(|_| with_sets)
                        .and_then(|b| set_field(b, *r, num_perm))
                })
                .collect();
            let asked: Vec<&Vec<u8>> = fields.iter().flatten().collect();
            let mut sets: Vec<Option<Vec<u8>>> = Vec::new();
            if !asked.is_empty() {
                sets = redis::cmd("HMGET")
                    .arg(&self.keys.sets)
                    .arg(&asked)
                    .query(&mut self.con)?;
                if sets.len() != asked.len() {
                    return Err(damaged(
                        "the server answered a read for other shingle sets than were asked",
                    ));
                }
            }
            let mut sets = sets.into_iter();
            for ((r, record), field) in part.iter().zip(got).zip(&fields) {
                let set = if field.is_some() {
                    sets.next().flatten()
                } else {
                    None
                };
                let rec = record
                    .as_deref()
                    .and_then(|b| decode_rep(b, set.as_deref(), num_perm, with_sets))
                    .ok_or_else(|| {
                        damaged(&format!("representative {r} is missing or cannot be read"))
                    })?;
                self.cache_bytes += rec.bytes();
                self.cache.insert(*r, rec);
            }
        }
        Ok(())
    }

    /// A decision core holding what `view` read: the representatives of its buckets (each
    /// joining the buckets that list it, in the order they were made) and its first copies.
    fn seeded(&self, view: &View) -> Result<Deduper, IndexError> {
        // Each representative with the buckets that list it, in the order they were made (the
        // sort is stable: a representative's buckets stay in the view's order). Seeded from the
        // cache as they are, without a copy into a `PriorState`: most of a round's
        // representatives are those of the last, and their shingle sets are kilobytes.
        let mut joins: Vec<(u32, u64)> = view
            .buckets
            .iter()
            .flat_map(|(key, held)| words(held).map(move |r| (r, *key)))
            .collect();
        joins.sort_by_key(|(r, _)| *r);
        let mut core = self.settings.deduper_core()?;
        let mut bands = Vec::new();
        for group in joins.chunk_by(|a, b| a.0 == b.0) {
            let rec = &self.cache[&group[0].0];
            bands.clear();
            bands.extend(group.iter().map(|(_, key)| *key));
            core.seed_shared_representative(
                committed_addr(rec.docno),
                Some(&rec.id),
                &rec.signature,
                rec.shingles.as_ref(),
                &bands,
            );
        }
        for (h, (docno, id)) in &view.copies {
            core.seed_copy(*h, committed_addr(*docno), committed_addr(*docno), Some(id));
        }
        Ok(core)
    }
}

/// Check or insert.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verb {
    Check,
    Insert,
}

/// What went wrong in a round.
enum RoundError {
    Redis(redis::RedisError),
    Index(IndexError),
}

impl From<IndexError> for RoundError {
    fn from(e: IndexError) -> Self {
        RoundError::Index(e)
    }
}

impl From<redis::RedisError> for RoundError {
    fn from(e: redis::RedisError) -> Self {
        RoundError::Redis(e)
    }
}

/// What a batch reaches of the server's state.
struct View {
    /// Per id asked: its recorded decision.
    ids: Vec<Option<Decided>>,
    /// Per band key reached that has representatives: their numbers, in order, as the server
    /// holds them (4 bytes each, little-endian: [`words`]).
    buckets: Vec<(u64, Vec<u8>)>,
    /// Per content hash reached that has a first copy: its document number and id.
    copies: HashMap<u128, (u64, String)>,
    /// Representatives on the server at the read (all of the buckets' are below this number).
    reps_at_read: u64,
}

/// A round's decisions, to commit ([`RedisIndex::commit_planned`]).
struct Plan {
    /// Per document decided: its place in the batch, its commit and its decision.
    ops: Vec<(usize, Commit, Decided)>,
    /// Per band key reached that has representatives: how many its bucket held at the read.
    held_at_read: HashMap<u64, usize>,
    /// Representatives on the server when the view was read.
    reps_at_read: u64,
    /// The fewest equal signature positions that make a representative a candidate.
    floor_count: usize,
}

/// What the earlier commit calls of a round did, which the later ones take into account.
#[derive(Default)]
struct Earlier {
    /// Band keys refused documents would have joined.
    tainted_keys: HashSet<u64>,
    /// Content hashes refused documents would have made first copies.
    tainted_hashes: Vec<u128>,
    /// The representatives committed (packed u32): not newcomers to the later calls.
    own: Vec<u8>,
    /// Per band key, the joins of the representatives committed.
    joined: HashMap<u64, usize>,
}

/// What the commit script did with a document.
enum Committed {
    /// Refused: another producer changed what it was decided against, or it read what a
    /// refused document would have written.
    Refused,
    /// Committed, not a representative.
    Plain,
    /// Committed as the representative of this number.
    Representative(u32),
}

/// A namespace's record that cannot be read, as the error a read returns.
fn damaged(what: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "damaged namespace",
        what.to_string(),
    ))
}

/// One document's commit (see the commit script).
struct Commit {
    id: String,
    blob: Vec<u8>,
    counter: &'static str,
    /// The band keys whose buckets it was decided against.
    checks: Vec<u64>,
    content_hash: Option<u128>,
    first_copy: bool,
    /// Refused when any bucket it checks lacks a refused document's representative (its match
    /// may be one).
    strict: bool,
    /// Band keys whose buckets were full when it would have joined them.
    tight: Vec<u64>,
    joins: Vec<u64>,
    /// Its representative's record less the document number ([`rep_head`]; empty when it is
    /// none).
    head: Vec<u8>,
    /// Its representative's shingle set (empty when it is none or empty), written under
    /// `token` beside the commit script's call.
    set: Vec<u8>,
    token: Option<[u8; 16]>,
    /// Its signature when it has checks and no body (which holds it): what the commit
    /// compares with representatives that arrived after the read.
    signature: Vec<u8>,
}

/// Documents of the batch decided so far (first occurrences).
fn count_done(ids: &[DocId], decided: &HashMap<DocId, Decided>) -> usize {
    ids.iter().filter(|id| decided.contains_key(*id)).count()
}

/// The file of a batch's own documents in a seeded core.
const BATCH_FILE: u32 = 1;

/// The address a committed document has in a seeded core (a batch's own are in
/// [`BATCH_FILE`]).
fn committed_addr(docno: u64) -> SampleAddr {
    SampleAddr {
        file: 0,
        record: docno,
        field: 0,
    }
}

/// A representative's record as the server stores it in `reps`, less the document number the
/// script puts before it: its id's length and id, its signature, then, when its shingle set is
/// in `sets` under a token, [`SET_TOKEN`] and the token.
fn rep_head(id: &str, s: &Signed, token: Option<&[u8; 16]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + id.len() + 4 * s.sig.len() + 17);
    out.extend_from_slice(&(id.len() as u32).to_le_bytes());
    out.extend_from_slice(id.as_bytes());
    for v in &s.sig {
        out.extend_from_slice(&v.to_le_bytes());
    }
    if let Some(t) = token {
        out.push(SET_TOKEN);
        out.extend_from_slice(t);
    }
    out
}

/// The byte after a representative record's signature that says its shingle set is in `sets`
/// under the 16-byte token that follows ([`rep_head`]).
pub(crate) const SET_TOKEN: u8 = 0xff;

/// A representative record's parts: document number, id, signature, and what follows it.
fn rep_parts(b: &[u8], num_perm: usize) -> Option<(u64, String, &[u8], &[u8])> {
    let docno = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let id_len = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?) as usize;
    let id = String::from_utf8(b.get(12..12 + id_len)?.to_vec()).ok()?;
    let sig = b.get(12 + id_len..12 + id_len + 4 * num_perm)?;
    Some((docno, id, sig, &b[12 + id_len + 4 * num_perm..]))
}

/// The field of `sets` that holds representative `r`'s shingle set by its record `b`: the token
/// after its signature, or else its number; none when the record holds the set itself.
pub(crate) fn set_field(b: &[u8], r: u32, num_perm: usize) -> Option<Vec<u8>> {
    let (_, _, _, after) = rep_parts(b, num_perm)?;
    match after {
        [] => Some(r.to_le_bytes().to_vec()),
        [SET_TOKEN, token @ ..] if token.len() == 16 => Some(token.to_vec()),
        _ => None,
    }
}

/// A representative as the server holds it: its record in `reps` (the document number, written
/// by the script, then [`rep_head`]'s: id length and id, signature, and the token of its
/// shingle set) and its shingle set in `sets` (`set`, read from [`set_field`]; none when the
/// set is empty). A record written before the sets had a hash of their own holds its set after
/// the signature, and is read as such; one without a token has its set under its number.
pub(crate) fn decode_rep(
    b: &[u8],
    set: Option<&[u8]>,
    num_perm: usize,
    with_sets: bool,
) -> Option<RepRecord> {
    let (docno, id, sig, after) = rep_parts(b, num_perm)?;
    let apart = match after {
        [] => true,
        [SET_TOKEN, token @ ..] if token.len() == 16 => true,
        _ if after.len() % 4 == 0 => false,
        _ => return None,
    };
    let shingles = match (with_sets, apart, set) {
        (false, _, _) => None,
        (true, false, _) => Some(words(after).collect()),
        (true, true, Some(set)) if set.len() % 4 != 0 => return None,
        (true, true, set) => Some(words(set.unwrap_or_default()).collect()),
    };
    Some(RepRecord {
        docno,
        id,
        signature: words(sig).collect(),
        shingles,
    })
}

/// Little-endian words of `b` (whose length is a multiple of 4).
fn words(b: &[u8]) -> impl ExactSizeIterator<Item = u32> + '_ {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

/// A decision as a producer sends it: keep, reason, similarity (NaN: none), then the id it
/// duplicates (encoded; nothing when none). The server puts the decision's place in the order of
/// commits before it ([`decode_decision`] reads both).
pub(crate) fn encode_decision(d: &Decided) -> Vec<u8> {
    let mut out = vec![u8::from(d.keep), d.reason.code()];
    out.extend_from_slice(&d.similarity.unwrap_or(f64::NAN).to_le_bytes());
    if let Some(of) = &d.dup_of {
        out.extend_from_slice(of.encode().as_bytes());
    }
    out
}

fn decode_decision(b: &[u8]) -> Option<Decided> {
    decode_sequenced(b).map(|(_, d)| d)
}

/// A decision as the server keeps it, and its place in the order of commits.
pub(crate) fn decode_sequenced(b: &[u8]) -> Option<(u64, Decided)> {
    let seq = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    decode_sent(&b[8..]).map(|d| (seq, d))
}

fn decode_sent(b: &[u8]) -> Option<Decided> {
    let keep = match b.first()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let reason = Reason::from_code(*b.get(1)?)?;
    let sim = f64::from_le_bytes(b.get(2..10)?.try_into().ok()?);
    let rest = std::str::from_utf8(b.get(10..)?).ok()?;
    let dup_of = if rest.is_empty() {
        None
    } else {
        Some(DocId::decode(rest)?)
    };
    Some(Decided {
        keep,
        reason,
        dup_of,
        similarity: (!sim.is_nan()).then_some(sim),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_round_trip() {
        for d in [
            Decided::plain(true, Reason::Unique),
            Decided::plain(false, Reason::Empty),
            Decided {
                keep: false,
                reason: Reason::Near,
                dup_of: Some(DocId::Str("a|b\u{0}é".into())),
                similarity: Some(0.8125),
            },
            Decided {
                keep: false,
                reason: Reason::Exact,
                dup_of: Some(DocId::Int(-3)),
                similarity: Some(1.0),
            },
        ] {
            let mut stored = 7u64.to_le_bytes().to_vec();
            stored.extend(encode_decision(&d));
            assert_eq!(decode_sequenced(&stored), Some((7, d)));
        }
        assert_eq!(decode_decision(&[0, 0, 0, 0, 0, 0, 0, 0, 2, 0]), None);
    }

    /// A representative's record and its shingle set in `sets` are read together, the set
    /// found under the token the record names or else under its number; a record that holds
    /// its set after the signature (written before the sets had a hash of their own) is read
    /// the same; a set that is not whole words, or a record with a broken tail, is refused.
    #[test]
    fn representatives_read_with_their_sets_or_inline() {
        let sig = [1u32, 2, 3];
        let set = [7u32, 9];
        let words = |w: &[u32]| w.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        let mut record = 5u64.to_le_bytes().to_vec();
        record.extend_from_slice(&2u32.to_le_bytes());
        record.extend_from_slice(b"sx");
        record.extend(words(&sig));
        let token = [3u8; 16];
        let mut tokened = record.clone();
        tokened.push(SET_TOKEN);
        tokened.extend_from_slice(&token);
        let mut inline = record.clone();
        inline.extend(words(&set));
        assert_eq!(set_field(&record, 4, 3), Some(4u32.to_le_bytes().to_vec()));
        assert_eq!(set_field(&tokened, 4, 3), Some(token.to_vec()));
        assert_eq!(set_field(&inline, 4, 3), None);
        let apart = decode_rep(&record, Some(&words(&set)), 3, true).unwrap();
        let by_token = decode_rep(&tokened, Some(&words(&set)), 3, true).unwrap();
        let old = decode_rep(&inline, None, 3, true).unwrap();
        for rec in [&apart, &by_token, &old] {
            assert_eq!((rec.docno, rec.id.as_str()), (5, "sx"));
            assert_eq!(rec.signature, sig);
            assert_eq!(rec.shingles.as_deref(), Some(&set[..]));
        }
        assert_eq!(
            decode_rep(&record, None, 3, true)
                .unwrap()
                .shingles
                .as_deref(),
            Some(&[][..])
        );
        assert_eq!(decode_rep(&tokened, None, 3, false).unwrap().shingles, None);
        assert!(decode_rep(&record, Some(&[1, 2, 3]), 3, true).is_none());
        assert!(decode_rep(&record[..record.len() - 4], None, 3, true).is_none());
        assert!(decode_rep(&tokened[..tokened.len() - 2], None, 3, true).is_none());
    }

    /// The shingle sets written beside a commit call stay only for the representatives it
    /// committed: a refused one's goes with it, and a server that lost its scripts
    /// (`SCRIPT FLUSH`) gets the sets and the call again, once.
    #[test]
    fn shingle_sets_stay_only_with_committed_representatives() {
        let server = Server::start();
        let mut a = RedisIndex::open(settings(), &server.url(), "t").unwrap();
        let mut b = RedisIndex::open(settings(), &server.url(), "t").unwrap();
        let texts = [words(1), words(2)];
        let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
        let ids: Vec<DocId> = ["p", "q"]
            .iter()
            .map(|i| DocId::Str(i.to_string()))
            .collect();
        let signed = Signer::new(&a.settings).sign_all(&as_text, &[true; 2]);
        let mut decided = HashMap::new();
        let planned = planned_checks(&mut a, &ids, &signed, &mut decided);
        assert!(planned.ops.iter().all(|(_, op, _)| op.token.is_some()));
        // Another producer decides p first, so a's p is refused.
        b.check_many(&[Text::Str("")], vec![Some(ids[0].clone())])
            .unwrap();
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut a.con).unwrap();
        let left = committed(&mut a, &ids, &signed, &planned, &mut decided);
        assert_eq!(left, [0]);
        let sets: Vec<Vec<u8>> = redis::cmd("HKEYS")
            .arg(&a.keys.sets)
            .query(&mut a.con)
            .unwrap();
        assert_eq!(sets, [planned.ops[1].1.token.unwrap().to_vec()]);
        // Read back by another producer: q's set is its own.
        let again = b.check_many(&as_text[1..], vec![Some(DocId::Str("q2".into()))]);
        let again = again.unwrap();
        assert_eq!(again[0].dup_of, Some(ids[1].clone()), "{:?}", again[0]);
        assert_eq!(again[0].similarity, Some(1.0));
    }

    /// A `redis-server` of the test's own on a free loopback port, stopped by its pid.
    struct Server {
        child: std::process::Child,
        port: u16,
        _dir: tempfile::TempDir,
    }

    impl Server {
        fn start() -> Server {
            let program =
                std::env::var("NEARDUP_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let dir = tempfile::tempdir().unwrap();
            let child = std::process::Command::new(program)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let server = Server {
                child,
                port,
                _dir: dir,
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "redis-server did not start"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            server
        }

        fn url(&self) -> String {
            format!("redis://127.0.0.1:{}/0", self.port)
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn settings() -> IndexSettings {
        use neardup_sketch::{LshParams, Shingler, SketchConfig, Sketcher};
        IndexSettings {
            sketcher: Sketcher::new(SketchConfig::new(
                Shingler::Chars { k: 5, step: 1 },
                128,
                LshParams::new(16, 8).unwrap(),
            ))
            .unwrap(),
            rule: neardup_keys::RowRule::default(),
            deduper: neardup_dedup::DeduperConfig {
                verify: neardup_dedup::Verify::Jaccard,
                max_reps: None,
                ..neardup_dedup::DeduperConfig::default()
            },
            keep_empty: true,
        }
    }

    fn words(seed: u64) -> String {
        (0..60)
            .map(|i| format!("w{}", (i * 31 + seed * 977) % 1009))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Settings whose bands are pairs of rows (`num_perm / 2` of them), so that texts far below
    /// the threshold share buckets: what the conflict tests need to make neighbours meet.
    fn loose_settings(num_perm: usize, max_reps: Option<usize>) -> IndexSettings {
        let mut loose = settings();
        loose.sketcher = neardup_sketch::Sketcher::new(neardup_sketch::SketchConfig::new(
            neardup_sketch::Shingler::Chars { k: 5, step: 1 },
            num_perm,
            neardup_sketch::LshParams::new(num_perm / 2, 2).unwrap(),
        ))
        .unwrap();
        loose.deduper.max_reps = max_reps;
        loose
    }

    /// `a`'s round over every one of `ids` planned as checks, as `check_many` plans it before
    /// committing: the tests let another producer commit in between.
    fn planned_checks(
        a: &mut RedisIndex,
        ids: &[DocId],
        signed: &[Option<Signed>],
        decided: &mut HashMap<DocId, Decided>,
    ) -> Plan {
        let pending: Vec<usize> = (0..ids.len()).collect();
        let Ok(planned) = a.plan(ids, signed, &pending, Verb::Check, decided) else {
            panic!("planning failed");
        };
        planned
    }

    /// Commits `planned`: the places of the documents refused.
    fn committed(
        a: &mut RedisIndex,
        ids: &[DocId],
        signed: &[Option<Signed>],
        planned: &Plan,
        decided: &mut HashMap<DocId, Decided>,
    ) -> Vec<usize> {
        let Ok(left) = a.commit_planned(ids, signed, planned, decided) else {
            panic!("committing failed");
        };
        left
    }

    /// Another producer commits between a batch's read and its commit: the document it got in
    /// the way of is refused, and so is the later one that was decided against that document,
    /// while the one neither touches is committed in the same call. The refused ones are then
    /// decided anew, and every decision is one process's over the documents in commit order.
    #[test]
    fn a_conflict_refuses_only_what_it_touches() {
        // One call, and one call per document: what a refused one would have written reaches the
        // later calls.
        for chunk in [COMMIT_CHUNK, 1] {
            let server = Server::start();
            let mut a = RedisIndex::open(settings(), &server.url(), "t").unwrap();
            a.commit_chunk = chunk;
            let mut b = RedisIndex::open(settings(), &server.url(), "t").unwrap();
            let x = words(1);
            let texts = [x.clone(), format!("{x} tail"), words(2)];
            let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
            let ids: Vec<DocId> = ["p", "q", "r"]
                .iter()
                .map(|i| DocId::Str(i.to_string()))
                .collect();
            let signed = Signer::new(&a.settings).sign_all(&as_text, &[true; 3]);
            let mut decided = HashMap::new();
            let planned = planned_checks(&mut a, &ids, &signed, &mut decided);
            let keeps: Vec<bool> = planned.ops.iter().map(|(_, _, d)| d.keep).collect();
            assert_eq!(keeps, [true, false, true], "q was decided against p");

            let other = format!("{x} other");
            let theirs = b
                .check_many(&[Text::Str(&other)], vec![Some(DocId::Str("b".into()))])
                .unwrap();
            assert!(theirs[0].keep);
            let left = committed(&mut a, &ids, &signed, &planned, &mut decided);
            assert_eq!(left, [0, 1], "p refused, q with it, r committed");
            assert_eq!(decided.len(), 1);
            assert_eq!(a.stats().unwrap().conflicts, 2);

            let again = a
                .check_many(&as_text, ids.iter().cloned().map(Some).collect())
                .unwrap();
            let b_id = DocId::Str("b".into());
            assert_eq!(again[0].dup_of.as_ref(), Some(&b_id), "{:?}", again[0]);
            assert_eq!(again[1].dup_of.as_ref(), Some(&b_id), "{:?}", again[1]);
            assert!(again[2].keep);

            let all = a.decisions().unwrap();
            let order: Vec<&DocId> = all.iter().map(|d| &d.id).collect();
            let named = |i: &str| DocId::Str(i.to_string());
            assert_eq!(order, [&b_id, &named("r"), &named("p"), &named("q")]);
            let text_of = |id: &DocId| match id {
                DocId::Str(s) if s == "b" => other.clone(),
                DocId::Str(s) if s == "p" => texts[0].clone(),
                DocId::Str(s) if s == "q" => texts[1].clone(),
                _ => texts[2].clone(),
            };
            let mut replay = crate::Index::new(settings()).unwrap();
            for d in &all {
                let got = replay
                    .check(Text::Str(&text_of(&d.id)), Some(d.id.clone()))
                    .unwrap();
                assert_eq!(&got, d);
            }
        }
    }

    /// A document refused only because another producer decided its id meanwhile (an empty
    /// text, which joins no bucket) leaves the later document that met its representative
    /// without matching it committed in the same call, against the buckets without it, unless
    /// the bucket's room under `max_reps` decided that later document's joins: then it is
    /// refused too (without the refused one it would have joined). Either way every decision
    /// is one process's over the documents in commit order.
    #[test]
    fn a_refused_neighbour_refuses_only_what_it_changed() {
        let cases = [(None, vec![0], 1), (Some(1), vec![0, 1], 2)];
        for ((max_reps, left_expected, conflicts), chunk) in cases
            .into_iter()
            .flat_map(|c| [(c.clone(), COMMIT_CHUNK), (c, 1)])
        {
            let server = Server::start();
            let loose = loose_settings(128, max_reps);
            let mut a = RedisIndex::open(loose.clone(), &server.url(), "t").unwrap();
            a.commit_chunk = chunk;
            let mut b = RedisIndex::open(loose.clone(), &server.url(), "t").unwrap();
            let p_words = words(1);
            let half: Vec<&str> = p_words.split(' ').take(30).collect();
            let texts = [p_words.clone(), format!("{} {}", half.join(" "), words(3))];
            let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
            let ids: Vec<DocId> = ["p", "q"]
                .iter()
                .map(|i| DocId::Str(i.to_string()))
                .collect();
            let signed = Signer::new(&a.settings).sign_all(&as_text, &[true; 2]);
            let rows: Vec<&[u64]> = signed
                .iter()
                .map(|s| &s.as_ref().unwrap().row[..a.band_columns])
                .collect();
            assert!(
                rows[1].iter().any(|k| *k != NO_KEY && rows[0].contains(k)),
                "p and q share a bucket"
            );
            let mut decided = HashMap::new();
            let planned = planned_checks(&mut a, &ids, &signed, &mut decided);
            let keeps: Vec<bool> = planned.ops.iter().map(|(_, _, d)| d.keep).collect();
            assert_eq!(keeps, [true, true], "q met p without matching it");
            assert_eq!(planned.ops[1].1.tight.is_empty(), max_reps.is_none());

            let theirs = b
                .check_many(&[Text::Str("")], vec![Some(ids[0].clone())])
                .unwrap();
            let left = committed(&mut a, &ids, &signed, &planned, &mut decided);
            assert_eq!(left, left_expected, "max_reps {max_reps:?}");
            assert_eq!(a.stats().unwrap().conflicts, conflicts);

            let again = a
                .check_many(&as_text, ids.iter().cloned().map(Some).collect())
                .unwrap();
            assert_eq!(again[0], theirs[0], "p keeps the other producer's decision");
            assert!(again[1].keep);
            let all = a.decisions().unwrap();
            let mut replay = crate::Index::new(loose).unwrap();
            for d in &all {
                let text = if d.id == ids[0] { "" } else { &texts[1] };
                let got = replay.check(Text::Str(text), Some(d.id.clone())).unwrap();
                assert_eq!(&got, d);
            }
            assert_eq!(all.len(), 2);
        }
    }

    /// Another producer commits a representative into a bucket a planned document checks
    /// between the read and the commit. A document it is no candidate for (its estimated
    /// similarity is below the floor) is decided the same with it, so it is committed in the
    /// same call, unless the newcomer took the room under `max_reps` one of its joins had; a
    /// document it is a candidate for (a near copy) is refused and decided anew against it.
    /// Either way every decision is one process's over the documents in commit order.
    #[test]
    fn a_newcomer_refuses_only_what_it_is_a_candidate_for() {
        // 600 permutations: the script unpacks a signature in parts.
        let cases = [
            (None, 128, vec![1], 1),
            (Some(1), 128, vec![0, 1], 2),
            (None, 600, vec![1], 1),
        ];
        // One call, and one call per document: the earlier call's own representative is no
        // newcomer to the later.
        for ((max_reps, num_perm, left_expected, conflicts), chunk) in cases
            .into_iter()
            .flat_map(|c| [(c.clone(), COMMIT_CHUNK), (c, 1)])
        {
            let server = Server::start();
            let loose = loose_settings(num_perm, max_reps);
            let mut a = RedisIndex::open(loose.clone(), &server.url(), "t").unwrap();
            a.commit_chunk = chunk;
            let mut b = RedisIndex::open(loose.clone(), &server.url(), "t").unwrap();
            let p_words = words(1);
            let half: Vec<&str> = p_words.split(' ').take(30).collect();
            // q shares a bucket with p without being near it; r is p's near copy.
            let texts = [
                format!("{} {}", half.join(" "), words(3)),
                format!("{p_words} tail"),
            ];
            let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
            let ids: Vec<DocId> = ["q", "r"]
                .iter()
                .map(|i| DocId::Str(i.to_string()))
                .collect();
            let signed = Signer::new(&a.settings).sign_all(&as_text, &[true; 2]);
            let p_signed = Signer::new(&a.settings).sign_texts(&[&p_words]);
            let p_sig = &p_signed[0].as_ref().unwrap().sig;
            let q = signed[0].as_ref().unwrap();
            assert!(
                q.row[..a.band_columns]
                    .iter()
                    .any(|k| *k != NO_KEY && p_signed[0].as_ref().unwrap().row.contains(k)),
                "p and q share a bucket"
            );
            assert!(
                neardup_sketch::similarity(&q.sig, p_sig) < 0.5,
                "p is no candidate for q"
            );
            let mut decided = HashMap::new();
            let planned = planned_checks(&mut a, &ids, &signed, &mut decided);
            let keeps: Vec<bool> = planned.ops.iter().map(|(_, _, d)| d.keep).collect();
            assert_eq!(keeps, [true, true], "both kept before p is there");

            let theirs = b
                .check_many(&[Text::Str(&p_words)], vec![Some(DocId::Str("p".into()))])
                .unwrap();
            assert!(theirs[0].keep);
            let left = committed(&mut a, &ids, &signed, &planned, &mut decided);
            assert_eq!(left, left_expected, "max_reps {max_reps:?}");
            assert_eq!(a.stats().unwrap().conflicts, conflicts);

            let again = a
                .check_many(&as_text, ids.iter().cloned().map(Some).collect())
                .unwrap();
            assert!(again[0].keep);
            assert_eq!(
                again[1].dup_of,
                Some(DocId::Str("p".into())),
                "{:?}",
                again[1]
            );
            let all = a.decisions().unwrap();
            let order: Vec<String> = all.iter().map(|d| d.id.encode()).collect();
            assert_eq!(order, ["sp", "sq", "sr"]);
            let mut replay = crate::Index::new(loose).unwrap();
            for d in &all {
                let text = match d.id.encode().as_str() {
                    "sp" => p_words.clone(),
                    "sq" => texts[0].clone(),
                    _ => texts[1].clone(),
                };
                let got = replay.check(Text::Str(&text), Some(d.id.clone())).unwrap();
                assert_eq!(&got, d);
            }
        }
    }

    /// One producer alone, one document per commit call: what the round's earlier calls
    /// committed into a bucket (its own representatives) is what the later documents were
    /// decided against, so nothing is refused, and the decisions are the in-memory index's,
    /// duplicates included.
    #[test]
    fn a_round_s_own_commits_refuse_nothing() {
        let server = Server::start();
        let loose = loose_settings(128, None);
        let mut a = RedisIndex::open(loose.clone(), &server.url(), "t").unwrap();
        a.commit_chunk = 1;
        let p_words = words(1);
        let half: Vec<&str> = p_words.split(' ').take(30).collect();
        // q shares a bucket with p without being near it; r is p's near copy, s its exact copy.
        let texts = [
            p_words.clone(),
            format!("{} {}", half.join(" "), words(3)),
            format!("{p_words} tail"),
            p_words.clone(),
            words(4),
        ];
        let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
        let ids: Vec<Option<DocId>> = (0..texts.len() as i64)
            .map(|i| Some(DocId::Int(i)))
            .collect();
        let got = a.check_many(&as_text, ids.clone()).unwrap();
        assert_eq!(a.stats().unwrap().conflicts, 0);
        let mut memory = crate::Index::new(loose).unwrap();
        let want = memory.check_many(&as_text, ids).unwrap();
        assert_eq!(got, want);
        let keeps: Vec<bool> = got.iter().map(|d| d.keep).collect();
        assert_eq!(keeps, [true, true, false, false, true]);
    }

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(shown("redis://:secret@host:1/0"), "redis://…@host:1/0");
        assert_eq!(
            shown("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
    }
}
