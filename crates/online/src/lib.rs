//! Online dedup: an index that documents are checked against one at a time or in batches, with
//! the decisions the batch engine (`neardup dedup`) makes over the same texts in the same order.
//!
//! [`Index`] holds the decision core of stage 2 ([`neardup_dedup::Deduper`]) with every key
//! counting: a batch run looks only at keys seen twice in the whole corpus, but a bucket whose key
//! occurs once never holds anything a later document meets, so deciding against all keys gives
//! the same verdicts (tested against the CLI in the Python tests). On top of the core it keeps:
//! - **ids**: each document has the caller's id (an integer or a string, never conflated) or
//!   the next free integer; decisions name the earlier document by its id;
//! - **idempotence**: the decision of every id checked, so that checking an id again (a retry
//!   after a timeout) returns the first decision and changes nothing;
//! - **batches**: [`Index::check_many`] signs its texts on all threads, then decides them in
//!   order, so a batch decides exactly as the same checks one by one.
//!
//! Stores ([`Store`]): this process's memory ([`MemoryIndex`]), a saved index file
//! ([`FileIndex`]: the format of `neardup dedup --index-out`, opened into memory and saved back,
//! so that batch runs and the online index share their indexes both ways), or a Redis server
//! shared by any number of producers ([`RedisIndex`]: the state every decision needs lives on
//! the server, and a script commits each decision only while what it was decided against is
//! unchanged, so that the decisions are those of one process over every producer's documents in
//! commit order).
//!
//! It owns the online verbs (check, query, insert), ids and the stores' state. It does not sign
//! (`neardup-sketch`, `neardup-keys`' row rule) or decide (`neardup-dedup`).
#![warn(missing_docs)]

mod sign;
mod memory;
mod file_store;
mod packed;
mod redis_store;
mod transfer;

use std::fmt;
use std::path::{Path, PathBuf};

use neardup_corpus::Reason;
use neardup_dedup::{Deduper, DeduperConfig, SettingsError};
use neardup_keys::RowRule;
use neardup_sketch::Sketcher;

pub use file_store::FileIndex;
pub use memory::MemoryIndex;
pub use redis_store::{RedisIndex, RedisStats};
pub use transfer::{
    Transferred, file_stats, namespace_stats, pull, push, save_file, shown_address,
};

/// A document's id: the caller's integer or string. `7` and `"7"` are different ids.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DocId {
    /// An integer id (also the ids the index gives documents checked without one).
    Int(i64),
    /// A string id.
    Str(String),
}

impl DocId {
    /// The id as the decision core keeps it: a tag telling integers from strings, then the
    /// value.
    pub(crate) fn encode(&self) -> String {
        match self {
            DocId::Int(n) => format!("i{n}"),
            DocId::Str(s) => format!("s{s}"),
        }
    }

    /// The id [`DocId::encode`] wrote.
    pub(crate) fn decode(s: &str) -> Option<DocId> {
        match s.split_at_checked(1)? {
            ("i", n) => n.parse().ok().map(DocId::Int),
            ("s", v) => Some(DocId::Str(v.to_string())),
            _ => None,
        }
    }
}

impl fmt::Display for DocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DocId::Int(n) => write!(f, "{n}"),
            DocId::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// The decision about one document.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The document.
    pub id: DocId,
    /// Whether it is kept (it then joins the index).
    pub keep: bool,
    /// Why: unique, near, exact, empty (kept or dropped per the `empty` setting) or error (no
    /// text: kept, as the batch engine keeps a record whose text cannot be read).
    pub reason: Reason,
    /// The earlier document it duplicates (a near duplicate's representative, an exact copy's
    /// first copy).
    pub dup_of: Option<DocId>,
    /// The similarity that decided (1.0 for exact copies; exact Jaccard under verify="exact").
    pub similarity: Option<f64>,
}

/// A text to check: a document's text, or nothing readable (a `None` or a value that is not a
/// string, which the batch engine decides `error` and keeps).
#[derive(Clone, Copy, Debug)]
pub enum Text<'a> {
    /// The text.
    Str(&'a str),
    /// No text could be taken from the document.
    Unreadable,
}

/// The settings of an index: how texts are signed and how they are decided.
#[derive(Clone, Debug)]
pub struct IndexSettings {
    /// Signatures and band keys.
    pub sketcher: Sketcher,
    /// Which keys a text's row holds.
    pub rule: RowRule,
    /// The decision rule.
    pub deduper: DeduperConfig,
    /// Whether empty texts are kept (`empty="keep"`).
    pub keep_empty: bool,
}

impl IndexSettings {
    /// The settings as a saved index and a shared store record them (the text selection is
    /// the batch engine's default: the index is given texts, not records).
    pub fn recorded(&self) -> neardup_index::IndexSettings {
        let keys = neardup_keys::KeysConfig {
            rule: self.rule,
            ..neardup_keys::KeysConfig::new(
                self.sketcher.clone(),
                neardup_corpus::TextSelector::single(neardup_corpus::FieldPath::top("text")),
            )
        };
        neardup_index::IndexSettings {
            layout: keys.layout(),
            min_count: 1,
            threshold: self.deduper.threshold,
            max_reps: self.deduper.max_reps,
            verify: self.deduper.verify,
        }
    }

    /// A decision core with these settings.
    pub(crate) fn deduper_core(&self) -> Result<Deduper, IndexError> {
        let s = &self.sketcher;
        Deduper::new(self.deduper.clone(), s.num_perm(), s.bands(), self.rule)
            .map_err(IndexError::Settings)
    }
}

/// Where an index keeps its state.
#[derive(Clone, Debug, PartialEq)]
pub enum Store {
    /// This process's memory.
    Memory,
    /// A saved index file (opened into memory, created when missing, saved back by
    /// [`Index::save`]).
    File(PathBuf),
    /// A Redis server (`redis://host:port/db`) and a namespace in it, shared by every producer
    /// that opens it.
    Redis {
        /// The server's URL.
        url: String,
        /// The namespace: every key of the index starts with `neardup:{namespace}:`.
        namespace: String,
    },
}

/// An online dedup index: see the crate docs. One type for every store; the verbs decide the
/// same way whatever the store.
pub enum Index {
    /// In this process's memory.
    Memory(Box<MemoryIndex>),
    /// In a saved index file (in memory while open).
    File(Box<FileIndex>),
    /// In a Redis server.
    Redis(Box<RedisIndex>),
}

/// An error the index met. Its message prints every cause it holds (a field named `error`), so
/// a reporter printing the chain (Python's `__cause__`) shows each once: only the causes of
/// those causes are its sources.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The settings are not valid.
    #[error(transparent)]
    Settings(SettingsError),
    /// The representatives' spill file failed (exact verification past `verify_memory`).
    #[error("exact verification's spill file failed: {0}")]
    Spill(std::io::Error),
    /// The Redis server could not be reached when the index was opened.
    #[error(
        "cannot reach the Redis server at {address}: {error} (is redis-server running there, and \
         is the URL redis://HOST:PORT/DB?)"
    )]
    Unreachable {
        /// The server's address (without a password).
        address: String,
        /// What the client met.
        error: redis::RedisError,
    },
    /// The namespace was made with other settings.
    #[error(
        "the namespace {namespace:?} at {address} was made with other settings ({}; the \
         namespace's value first): use its settings, or another namespace",
        differences.join(", ")
    )]
    SettingsDiffer {
        /// The server's address.
        address: String,
        /// The namespace.
        namespace: String,
        /// Each setting that differs, as "name: the namespace's value vs this index's".
        differences: Vec<String>,
    },
    /// The server was lost, or failed, in the middle of a batch.
    #[error(
        "the Redis server at {address} failed after {decided} of the batch's {total} documents \
         were decided: {error}; no document is half inserted, and checking the batch again with \
         the same ids gives each document its one decision"
    )]
    Lost {
        /// The server's address.
        address: String,
        /// Documents of the batch decided and committed before (in the order given, each id
        /// once); the next call of the script may or may not have been committed (the server
        /// runs a call whole or not at all), so checking the batch again with the same ids gives
        /// every document its one decision.
        decided: usize,
        /// Documents in the batch.
        total: usize,
        /// What the client met.
        error: redis::RedisError,
    },
    /// A command failed outside a batch (len, stats, query).
    #[error("the Redis server at {address} failed: {error}")]
    Redis {
        /// The server's address.
        address: String,
        /// What the client met.
        error: redis::RedisError,
    },
    /// Other producers kept getting in the way of a batch for an unreasonable number of rounds.
    #[error(
        "other producers on {address} kept changing what the batch reaches: {decided} of {total} \
         documents decided; try again"
    )]
    Contention {
        /// The server's address.
        address: String,
        /// Documents of the batch decided.
        decided: usize,
        /// Documents in the batch.
        total: usize,
    },
    /// A saved index file could not be read (or is not one, or is damaged).
    #[error("cannot open the index {}: {error}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What reading it met.
        error: neardup_index::IndexError,
    },
    /// A saved index file was made with other settings.
    #[error(
        "the index {} was made with other settings ({}; the file's value first): use its \
         settings, or another file",
        path.display(),
        differences.join(", ")
    )]
    FileSettingsDiffer {
        /// The file.
        path: PathBuf,
        /// Each setting that differs, as "name: the file's value vs this index's".
        differences: Vec<String>,
    },
    /// A path to save an index at holds something that is not an index this tool wrote.
    #[error(
        "{} is {what}: an index is only saved over an index this tool wrote; choose a new path",
        path.display()
    )]
    NotIndexFile {
        /// The path.
        path: PathBuf,
        /// What is there.
        what: String,
    },
    /// Saving the index failed.
    #[error("cannot save the index at {}: {error}", path.display())]
    Save {
        /// Where it was being saved.
        path: PathBuf,
        /// What writing met.
        error: std::io::Error,
    },
    /// [`Index::save`] without a path, for an index whose store is not a file.
    #[error(
        "give the path to save the index at (only an index opened from a file saves back to its \
         own)"
    )]
    NoPath,
    /// An index to push does not store its entries' sketches (a batch run's, verified by exact
    /// Jaccard, whose entries are read back from its inputs).
    #[error(
        "{} does not store its entries' shingle sets (a batch run verified by exact Jaccard reads \
         them back from its inputs): open it once with neardup.Index(store=...) and save it, \
         which stores them, then push that",
        path.display()
    )]
    NotSelfContained {
        /// The index file.
        path: PathBuf,
    },
    /// A namespace to push into holds an index (and replacing it was not asked for).
    #[error(
        "the namespace {namespace:?} at {address} already holds an index: push into another \
         namespace, or pass --replace to replace it"
    )]
    NamespaceInUse {
        /// The server's address.
        address: String,
        /// The namespace.
        namespace: String,
    },
    /// A namespace holds no index.
    #[error(
        "the namespace {namespace:?} at {address} holds no index (no producer opened it and \
         nothing was pushed into it)"
    )]
    NoNamespace {
        /// The server's address.
        address: String,
        /// The namespace.
        namespace: String,
    },
    /// The namespace holds something this version cannot read.
    #[error("the namespace {namespace:?} at {address} cannot be used: {what}")]
    Damaged {
        /// The server's address.
        address: String,
        /// The namespace.
        namespace: String,
        /// What cannot be read.
        what: String,
    },
}

impl Index {
    /// An empty index in this process's memory.
    pub fn new(settings: IndexSettings) -> Result<Index, IndexError> {
        MemoryIndex::new(settings).map(|m| Index::Memory(Box::new(m)))
    }

    /// The index in `store`: a new one in memory, or the one a Redis namespace holds (made
    /// when new, refused when made with other settings).
    pub fn open(settings: IndexSettings, store: &Store) -> Result<Index, IndexError> {
        match store {
            Store::Memory => Index::new(settings),
            Store::File(path) => FileIndex::open(settings, path).map(|f| Index::File(Box::new(f))),
            Store::Redis { url, namespace } => {
                RedisIndex::open(settings, url, namespace).map(|r| Index::Redis(Box::new(r)))
            }
        }
    }

    /// The settings.
    pub fn settings(&self) -> &IndexSettings {
        match self {
            Index::Memory(m) => m.settings(),
            Index::File(f) => f.memory().settings(),
            Index::Redis(r) => r.settings(),
        }
    }

    /// Documents checked or inserted (each id counted once; in Redis, by every producer).
    pub fn len(&mut self) -> Result<u64, IndexError> {
        match self {
            Index::Memory(m) => Ok(m.len() as u64),
            Index::File(f) => Ok(f.memory().len() as u64),
            Index::Redis(r) => r.len(),
        }
    }

    /// Whether nothing was checked or inserted yet.
    pub fn is_empty(&mut self) -> Result<bool, IndexError> {
        self.len().map(|n| n == 0)
    }

    /// The counters of the index as JSON: the decision core's
    /// ([`neardup_dedup::DeduperStats`]) in memory, the namespace's ([`RedisStats`]) in Redis.
    pub fn stats(&mut self) -> Result<serde_json::Value, IndexError> {
        Ok(match self {
            Index::Memory(m) => serde_json::to_value(m.stats()),
            Index::File(f) => serde_json::to_value(f.memory().stats()),
            Index::Redis(r) => serde_json::to_value(r.stats()?),
        }
        .expect("stats serialise"))
    }

    /// Decides `text` against everything inserted so far and inserts it when it is kept.
    /// Checking an id again returns its first decision and changes nothing.
    pub fn check(&mut self, text: Text<'_>, id: Option<DocId>) -> Result<Decision, IndexError> {
        let mut out = self.check_many(&[text], vec![id])?;
        Ok(out.pop().expect("one decision per text"))
    }

    /// [`Index::check`] for each text in order (`ids[i]` the id of `texts[i]`, `None` for the
    /// next free integer), signing the texts in parallel first: the same decisions as the
    /// checks one by one. An id given twice is decided at its first place.
    ///
    /// # Panics
    /// When `ids.len() != texts.len()`.
    pub fn check_many(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
    ) -> Result<Vec<Decision>, IndexError> {
        match self {
            Index::Memory(m) => m.check_many(texts, ids),
            Index::File(f) => f.memory_mut().check_many(texts, ids),
            Index::Redis(r) => r.check_many(texts, ids),
        }
    }

    /// The earlier documents `text` duplicates, with their similarity, inserting nothing: the
    /// first document with the same text (1.0), then the kept documents of its buckets whose
    /// similarity reaches the threshold. An empty list when `check` would keep it.
    pub fn query(&mut self, text: &str) -> Result<Vec<(DocId, f64)>, IndexError> {
        let mut out = self.query_many(&[text])?;
        Ok(out.pop().expect("one answer per text"))
    }

    /// [`Index::query`] for each text, signing them in parallel (and, in Redis, reading what
    /// they reach in one round trip); inserts nothing, so each is answered against the index
    /// as it was before the call.
    pub fn query_many(&mut self, texts: &[&str]) -> Result<Vec<Vec<(DocId, f64)>>, IndexError> {
        match self {
            Index::Memory(m) => Ok(m.query_many(texts)),
            Index::File(f) => Ok(f.memory_mut().query_many(texts)),
            Index::Redis(r) => r.query_many(texts),
        }
    }

    /// Adds documents without deciding them: each becomes the first document with its text
    /// (unless an earlier one has it) and a representative of each of its buckets with room, as
    /// a kept document does. An id already checked or inserted is left as it was. Returns the
    /// ids (given, or the next free integers).
    pub fn insert_many(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
    ) -> Result<Vec<DocId>, IndexError> {
        match self {
            Index::Memory(m) => m.insert_many(texts, ids),
            Index::File(f) => f.memory_mut().insert_many(texts, ids),
            Index::Redis(r) => r.insert_many(texts, ids),
        }
    }

    /// Saves the index at `path` (`None`: the file it was opened from), atomically, in the
    /// format of `neardup dedup --index-out` (so a batch run can use it `--against`); refused
    /// when `path` holds anything but a neardup index. An index in Redis is read in one atomic
    /// step and saved as `neardup index pull` saves it (the same bytes; producers may go on).
    /// Returns the bytes written.
    pub fn save(&mut self, path: Option<&Path>) -> Result<u64, IndexError> {
        match (self, path) {
            (Index::Memory(m), Some(p)) => m.save(p),
            (Index::File(f), p) => {
                let p = p.unwrap_or(f.path()).to_path_buf();
                f.memory().save(&p)
            }
            (Index::Redis(r), Some(p)) => r.save(p),
            (Index::Memory(_) | Index::Redis(_), None) => Err(IndexError::NoPath),
        }
    }
}
