//! The facade's error type: what failed, with the values and the source error its message is
//! built from (so a binding maps it to its own exception types by the data, not the text).

use std::fmt;
use std::io;
use std::path::PathBuf;

use neardup_corpus::{InputProblem, WriteError};
use neardup_dedup::StepInputError;
use neardup_keys::KeysError;

/// Why a run failed. The CLI maps it to its exit status (`neardup::cli`: 2 for what the
/// arguments got wrong, 130 when interrupted, 1 otherwise).
///
/// Its message holds its causes' (the CLI and the Python package print one line), so
/// `source()` never returns a cause the message already printed: a variant whose message is
/// its inner error's passes on that error's source, any other returns none.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command-line argument the binary refuses (exit code 2); the library never makes it.
    #[error("{0}")]
    Usage(String),
    /// Settings the run cannot start with (exit code 2).
    #[error(transparent)]
    Config(ConfigError),
    /// The run's paths conflict: an output is, holds or would be read back as an input, outputs
    /// collide, or an output cannot be written (exit code 2).
    #[error(transparent)]
    Paths(crate::path_conflicts::PathConflicts),
    /// Stage 1 failed.
    #[error("stage 1: {0}")]
    Keys(neardup_keys::KeysError),
    /// Stage 2 failed.
    #[error("stage 2: {0}")]
    Dedup(neardup_dedup::DedupError),
    /// The inputs cannot be used: an argument that names nothing usable, an unusable input
    /// under `on_error = fail`, or no input file at all.
    #[error(transparent)]
    Inputs(InputsError),
    /// A file (or standard output) the run reads or writes failed.
    #[error("{}", op.message(target, error))]
    Io {
        /// Reading, writing or creating.
        op: IoOp,
        /// What was read or written.
        target: IoTarget,
        /// The system's error (in the message).
        error: io::Error,
    },
    /// Publishing the run's outputs (or beginning to) failed; the error names the file.
    #[error(transparent)]
    Publish(WriteError),
    /// A key-table or hot-key file given to a step (not made by this run) cannot be used.
    #[error(transparent)]
    KeyFile(KeysError),
    /// The outputs of an earlier distributed step given to this one are damaged, missing, or
    /// belong to another run (exit code 2: the arguments name the wrong files).
    #[error(transparent)]
    StepInput(StepInputError),
    /// The run's worker threads could not be started.
    #[error("cannot start {threads} threads: {error}")]
    Threads {
        /// How many were asked for.
        threads: usize,
        /// Why not (in the message).
        error: rayon::ThreadPoolBuildError,
    },
    /// The thread a run was running on ended without its result (it panicked).
    #[error("{thread} panicked")]
    ThreadLost {
        /// The thread, e.g. "the pipeline thread".
        thread: &'static str,
    },
    /// The evaluation (`neardup eval`) could not run.
    #[error(transparent)]
    Eval(crate::eval::EvalError),
    /// A saved index (`--against`, `--index-out`, `neardup index`) cannot be made, read or used
    /// (exit code 2 when it was made with other settings or the arguments do not fit it).
    #[error(transparent)]
    Index(neardup_index::IndexError),
    /// The online index's stores (`neardup index push`/`pull`/`stats` with Redis): a server
    /// that cannot be reached, a namespace with other settings or already holding an index
    /// (exit code 2 for those refusals), a path that is not an index.
    #[error(transparent)]
    Online(neardup_online::IndexError),
    /// A saved index asked of a step or a run that cannot make or use it (exit code 2).
    #[error(transparent)]
    IndexUse(IndexUseError),
    /// The bytes of a step's value are damaged, truncated or not neardup's.
    #[error(transparent)]
    Corrupt(CorruptValue),
    /// The outputs of earlier distributed steps given to this one are not the ones it needs:
    /// another step's, another run's, or not all of them (exit code 2).
    #[error(transparent)]
    StepOutputs(StepOutputsError),
    /// Key tables or a hot-key file given to a step that do not go with each other or with the
    /// settings (a [`KeysError::Config`] or [`KeysError::Incompatible`]; exit code 2: the
    /// arguments name the wrong files).
    #[error(transparent)]
    WrongKeyFiles(KeysError),
    /// The run was cancelled (its [`neardup_exec::CancelToken`]; the CLI: a signal) before
    /// its outputs were published; nothing was published and what it wrote was removed
    /// (exit code 130).
    #[error(
        "interrupted before the outputs were published; nothing was published and the files \
         the run had written were removed"
    )]
    Interrupted,
}

impl From<neardup_online::IndexError> for Error {
    fn from(e: neardup_online::IndexError) -> Self {
        Error::Online(e)
    }
}

impl From<neardup_index::IndexError> for Error {
    fn from(e: neardup_index::IndexError) -> Self {
        Error::Index(e)
    }
}

impl From<neardup_keys::KeysError> for Error {
    fn from(e: neardup_keys::KeysError) -> Self {
        match e {
            neardup_keys::KeysError::Interrupted => Error::Interrupted,
            e => Error::Keys(e),
        }
    }
}

impl From<neardup_dedup::DedupError> for Error {
    fn from(e: neardup_dedup::DedupError) -> Self {
        match e {
            neardup_dedup::DedupError::Interrupted => Error::Interrupted,
            e => Error::Dedup(e),
        }
    }
}

/// What an [`Error::Io`] was doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoOp {
    /// Reading.
    Read,
    /// Writing.
    Write,
    /// Creating a directory the run needs (`what` it is, e.g. "the spill directory").
    Create {
        /// What the directory is for.
        what: String,
    },
    /// Opening a framed stream of a step's output.
    OpenStream,
}

impl IoOp {
    /// The message of an [`Error::Io`] doing this to `target`.
    fn message(&self, target: &IoTarget, e: &io::Error) -> String {
        match self {
            IoOp::Read => format!("cannot read {target}: {e}"),
            IoOp::Write => format!("cannot write {target}: {e}"),
            IoOp::Create { what } => format!("cannot create {what} {target}: {e}"),
            IoOp::OpenStream => format!("{target}: {e}"),
        }
    }
}

/// What an [`Error::Io`] read or wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoTarget {
    /// A file or directory.
    Path(PathBuf),
    /// A stream of a step's value, by the name messages give it.
    Stream(String),
    /// Something without a path, as messages name it ("the decisions", "memory").
    Named(&'static str),
    /// Standard output.
    Stdout,
}

impl fmt::Display for IoTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoTarget::Path(p) => write!(f, "{}", p.display()),
            IoTarget::Stream(name) => f.write_str(name),
            IoTarget::Named(name) => f.write_str(name),
            IoTarget::Stdout => f.write_str("to standard output"),
        }
    }
}

impl Error {
    /// An [`Error::Io`] on the file `path`.
    pub(crate) fn io(op: IoOp, path: impl Into<PathBuf>, error: io::Error) -> Error {
        Error::Io {
            op,
            target: IoTarget::Path(path.into()),
            error,
        }
    }
}

/// Why the inputs cannot be used (an [`Error::Inputs`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum InputsError {
    /// Arguments that cannot be used as given (a missing path, a glob without a match, a file
    /// named explicitly whose format is unknown, standard input or a pipe, a name that is not
    /// UTF-8): each with its problem.
    #[error("{}", InputProblem::listed(.0, "input ", "\ninput "))]
    Unusable(Vec<InputProblem>),
    /// Inputs that could not be used, under `on_error = fail`.
    #[error(
        "{} (--on-error fail stops at the first unusable input)",
        InputProblem::listed(.0, "", "; ")
    )]
    FailOnProblem(Vec<InputProblem>),
    /// No input file was found; the problems met while looking.
    #[error("no input files found{}", InputProblem::listed(.0, ": ", "; "))]
    NoneFound(Vec<InputProblem>),
}

impl InputsError {
    /// The problems, in the order met.
    pub fn problems(&self) -> &[InputProblem] {
        match self {
            InputsError::Unusable(p)
            | InputsError::FailOnProblem(p)
            | InputsError::NoneFound(p) => p,
        }
    }
}

/// A distributed step, as errors about its outputs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// `sign` (its outputs: signed shards, one stream per group).
    Sign,
    /// `decide` (its outputs: decided groups, one stream per shard).
    Decide,
}

/// How a step and its outputs are named in messages, and who reads them next.
pub(crate) struct StepNames {
    /// The step, as errors name it.
    pub kind: StepKind,
    /// The step's name ("sign").
    pub step: &'static str,
    /// The CLI command.
    pub command: &'static str,
    /// The manifest's `format`.
    pub format: &'static str,
    /// What the step did to its samples ("signed").
    pub made: &'static str,
    /// The step reading its outputs.
    pub reader: &'static str,
    /// The steps whose outputs must come from the same hot-key file.
    pub hot_from: &'static str,
    /// What one stream is per ("group", "shard").
    pub unit: &'static str,
    /// The value's type, for messages about bytes.
    pub value: &'static str,
}

pub(crate) const SIGN_STEP: StepNames = StepNames {
    kind: StepKind::Sign,
    step: "sign",
    command: "neardup sign",
    format: "neardup-sign",
    made: "signed",
    reader: "decide",
    hot_from: "`sign`",
    unit: "group",
    value: "SignedShard",
};

pub(crate) const DECIDE_STEP: StepNames = StepNames {
    kind: StepKind::Decide,
    step: "decide",
    command: "neardup decide",
    format: "neardup-decide",
    made: "decided",
    reader: "write",
    hot_from: "`sign` and `decide`",
    unit: "shard",
    value: "DecidedGroup",
};

impl StepKind {
    fn names(self) -> &'static StepNames {
        match self {
            StepKind::Sign => &SIGN_STEP,
            StepKind::Decide => &DECIDE_STEP,
        }
    }
}

/// `"s"` when `n` is not 1.
fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The numbers, comma-separated.
fn listed(numbers: &[u32]) -> String {
    numbers
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A decision setting a step's output was made with, and the one given now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingChange {
    /// The setting, by its flag (`--threshold`, `--max-reps`, `--verify`, `--prefer`).
    pub setting: &'static str,
    /// Its value given now.
    pub here: String,
    /// Its value the output was made with.
    pub there: String,
}

impl fmt::Display for SettingChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} here, {} there",
            self.setting, self.here, self.there
        )
    }
}

/// The outputs of earlier distributed steps given to this one (directories or values) are not
/// the ones it needs (an [`Error::StepOutputs`], exit code 2). `origin` names an output for
/// people: its directory, or a value ("the signed value of shard 3").
#[derive(Debug, thiserror::Error)]
pub enum StepOutputsError {
    /// A directory without the step's manifest.
    #[error(
        "{}: not a `{}` output ({} cannot be read: {error})",
        dir.display(),
        step.names().command,
        manifest.display()
    )]
    NoManifest {
        /// The step whose output it should be.
        step: StepKind,
        /// The directory.
        dir: PathBuf,
        /// The manifest's path.
        manifest: PathBuf,
        /// Why it cannot be read.
        error: io::Error,
    },
    /// A directory whose manifest is not the step's.
    #[error(
        "{}: not a `{}` output ({} is not its manifest: {error})",
        dir.display(),
        step.names().command,
        manifest.display()
    )]
    NotManifest {
        /// The step whose output it should be.
        step: StepKind,
        /// The directory.
        dir: PathBuf,
        /// The manifest's path.
        manifest: PathBuf,
        /// Why it is not one.
        error: serde_json::Error,
    },
    /// An output of another step, or of another format version.
    #[error("{origin}: not a `{}` output of this version", step.names().command)]
    OtherFormat {
        /// The step whose output it should be.
        step: StepKind,
        /// The output.
        origin: String,
    },
    /// An output made with another hot-key file than the one given.
    #[error(
        "{origin} was {} with another hot-key file than the one given (--hot): give `{}` the \
         hot-key file {} used",
        step.names().made,
        step.names().reader,
        step.names().hot_from
    )]
    OtherHotKeys {
        /// The step that made it.
        step: StepKind,
        /// The output.
        origin: String,
    },
    /// An output made with other decision settings than the ones given.
    #[error(
        "{origin} was made by `{}` with other decision settings ({}): give every step the same \
         --threshold, --max-reps, --verify, --prefer and --against",
        step.names().command,
        changes.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    OtherSettings {
        /// The step that made it.
        step: StepKind,
        /// The output.
        origin: String,
        /// The settings that differ.
        changes: Vec<SettingChange>,
    },
    /// Bytes of one kind of value read as another.
    #[error(
        "these bytes are a {}, not a {}",
        found.map_or("step value of an unknown kind", |k| k.names().value),
        expected.names().value
    )]
    OtherKind {
        /// The value expected.
        expected: StepKind,
        /// The kind the bytes name (`None`: a kind this build does not know).
        found: Option<StepKind>,
    },
    /// A stream index outside the output's streams.
    #[error(
        "{unit} {index} is out of range: {origin} has {streams} {unit}{} (0 to {})",
        plural(*streams as usize),
        streams.saturating_sub(1),
        unit = step.names().unit
    )]
    OutOfRange {
        /// The step that made it.
        step: StepKind,
        /// The output.
        origin: String,
        /// The index asked for.
        index: u32,
        /// The output's streams.
        streams: u32,
    },
    /// A part of a value asked for a stream it does not hold.
    #[error(
        "{origin} holds no stream for {unit} {index} (it is a part holding {unit}s {held:?}): \
         take the part from the whole value",
        unit = step.names().unit
    )]
    PartWithout {
        /// The step that made it.
        step: StepKind,
        /// The part.
        origin: String,
        /// The index asked for.
        index: u32,
        /// The indices it holds.
        held: Vec<u32>,
    },
    /// A part of an output given to a step that needs a stream it does not hold.
    #[error(
        "{origin} holds the stream{s} of {unit}{s} {} only, and {wanted_by} needs {unit} \
         {index}'s: give the whole value, or its part for {unit} {index}",
        listed(held),
        unit = step.names().unit,
        s = plural(held.len())
    )]
    NotHeld {
        /// The step that made it.
        step: StepKind,
        /// The part.
        origin: String,
        /// The index needed.
        index: u32,
        /// The indices it holds.
        held: Vec<u32>,
        /// The step needing it, e.g. "`write` of shard 3".
        wanted_by: String,
    },
    /// `--group` outside the plan's groups.
    #[error(
        "--group {group} is out of range: the hot-key file's plan has {groups} group{} (0 to {})",
        plural(*groups as usize),
        groups.saturating_sub(1)
    )]
    GroupOutOfRange {
        /// The group asked for.
        group: u32,
        /// The plan's groups.
        groups: u32,
    },
    /// Two sign outputs of one shard.
    #[error(
        "{first} and {second} are both the sign output of shard {shard}: give each shard's once"
    )]
    SameShard {
        /// The first.
        first: String,
        /// The second.
        second: String,
        /// Their shard.
        shard: u32,
    },
    /// Sign outputs of some shards are missing.
    #[error(
        "the hot keys were counted from {shards} shards, and the sign outputs of shard{} {} are \
         missing: `decide` needs every shard's sign output",
        plural(missing.len()),
        listed(missing)
    )]
    MissingShards {
        /// The shards the hot keys were counted from.
        shards: u32,
        /// The shards without a sign output.
        missing: Vec<u32>,
    },
    /// Two decide outputs of one group.
    #[error(
        "{first} and {second} both decided group {group}: give each group's decide output once"
    )]
    SameGroup {
        /// The first.
        first: String,
        /// The second.
        second: String,
        /// Their group.
        group: u32,
    },
    /// Decide outputs of some groups are missing.
    #[error(
        "the plan has {groups} group{}, and the decide outputs of group{} {} are missing: \
         `write` needs every group's (--decided decided-0 … decided-{})",
        plural(*groups as usize),
        plural(missing.len()),
        listed(missing),
        groups.saturating_sub(1)
    )]
    MissingGroups {
        /// The plan's groups.
        groups: u32,
        /// The groups without a decide output.
        missing: Vec<u32>,
    },
    /// Sign outputs made with other sketch settings than the first one given.
    #[error("{origin}: signed with other settings than {first}")]
    SignedDifferently {
        /// The output.
        origin: String,
        /// The first output given.
        first: String,
    },
    /// The decide outputs name other input files for the shard than its key table.
    #[error(
        "{origin}: the decided files name other input files for shard {shard} than its key \
         table {table}: were the inputs moved or renamed after `sign`?"
    )]
    OtherInputs {
        /// The decide output.
        origin: String,
        /// The shard.
        shard: u32,
        /// The key table.
        table: String,
    },
}

/// What is wrong with the bytes of a step value (an [`Error::Corrupt`]); `value` is the value's
/// type as messages name it (`SignedShard`, `DecidedGroup`).
#[derive(Debug, thiserror::Error)]
pub enum CorruptValue {
    /// The bytes do not begin with a step value's marker.
    #[error(
        "these bytes are not a neardup step value (a {}'s to_bytes): they do not begin with its \
         marker",
        value.names().value
    )]
    NotAValue {
        /// The value expected.
        value: StepKind,
    },
    /// The bytes do not end with the value's end marker.
    #[error(
        "these {} bytes are truncated: they do not end with the value's end marker",
        value.names().value
    )]
    Truncated {
        /// The value expected.
        value: StepKind,
    },
    /// A format version this build does not read.
    #[error(
        "these bytes are a step value of format version {found}; this build reads version \
         {supported}"
    )]
    Version {
        /// The bytes' version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The checksum stored differs from the one computed.
    #[error(
        "these {} bytes are damaged: their checksum does not match",
        value.names().value
    )]
    Checksum {
        /// The value expected.
        value: StepKind,
    },
    /// A part (`what` it is) runs past the end of the bytes.
    #[error("these step-value bytes are damaged: {what} runs past their end")]
    RunsPast {
        /// The part, e.g. "the manifest".
        what: &'static str,
    },
    /// The manifest cannot be read.
    #[error(
        "these {} bytes hold an unreadable manifest: {error}",
        value.names().value
    )]
    Manifest {
        /// The value expected.
        value: StepKind,
        /// Why not (in the message).
        error: serde_json::Error,
    },
    /// Bytes follow the last stream.
    #[error(
        "these {} bytes are damaged: {bytes} bytes follow the last stream",
        value.names().value
    )]
    TrailingBytes {
        /// The value expected.
        value: StepKind,
        /// How many.
        bytes: usize,
    },
    /// A stream outside the manifest's, or held twice or out of order.
    #[error(
        "{origin}: holds a stream for {unit} {index}, and its manifest has {streams} {unit}s (0 \
         to {}), each once",
        streams.saturating_sub(1),
        unit = step.names().unit
    )]
    StreamIndex {
        /// The value.
        origin: String,
        /// The step that made it.
        step: StepKind,
        /// The stream's index.
        index: u32,
        /// The manifest's streams.
        streams: u32,
    },
    /// A stream of another length than the manifest records.
    #[error(
        "{origin}: the stream of {} {index} holds {held} bytes, and the manifest says \
         {expected}: it is truncated or altered",
        step.names().unit
    )]
    StreamLength {
        /// The value.
        origin: String,
        /// The step that made it.
        step: StepKind,
        /// The stream's index.
        index: u32,
        /// Bytes it holds.
        held: u64,
        /// Bytes the manifest records.
        expected: u64,
    },
    /// A step output directory's manifest whose checksum (its `checksum` field) is missing or
    /// differs from the one computed.
    #[error(
        "{} is damaged: its checksum does not match its contents (it was altered or written by \
         an older neardup); run `{}` again",
        manifest.display(),
        step.names().command
    )]
    ManifestChecksum {
        /// The manifest file.
        manifest: PathBuf,
        /// The step that made it.
        step: StepKind,
    },
    /// The value holds no stream.
    #[error("{origin}: holds none of its streams")]
    NoStreams {
        /// The value.
        origin: String,
    },
}

/// Settings a run cannot start with (an [`Error::Config`], exit code 2). Settings are named by
/// their flags, as the CLI and the messages of every front end name them.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A settings file cannot be read, or is not valid settings.
    #[error("{}: {problem}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why not.
        problem: SettingsFileProblem,
    },
    /// `--shingle` or `--step` is 0.
    #[error("--shingle and --step must be at least 1, got --shingle {shingle} --step {step}")]
    ShingleOrStep {
        /// `--shingle`.
        shingle: usize,
        /// `--step`.
        step: usize,
    },
    /// `tokenize = "custom:NAME"` without the tokenizer of that name handed in beside the
    /// settings.
    #[error(
        "tokenize \"custom:{0}\" names a tokenizer that a program hands in (the Python \
         package's tokenizer= callable, named {0:?}), and none was given here; the command line \
         takes only the native tokenizers (char, byte, word, ascii-word or alnum, jieba)"
    )]
    NoCustomTokenizer(String),
    /// A seed over 32 bits with `--hash datasketch`.
    #[error(
        "--seed must be at most {} with --hash datasketch (datasketch seeds are 32-bit), got \
         {seed}",
        u32::MAX
    )]
    DatasketchSeed {
        /// The seed.
        seed: u64,
    },
    /// `--keep-chars` does not parse.
    #[error("--keep-chars: {0}")]
    KeepChars(neardup_sketch::SketchError),
    /// The sketch settings are invalid together.
    #[error(transparent)]
    Sketch(neardup_sketch::SketchError),
    /// `--threshold` outside [0, 1].
    #[error("--threshold must be within [0, 1], got {0}")]
    Threshold(f64),
    /// `--num-perm` outside 1 to [`crate::limits::MAX_NUM_PERM`].
    #[error(
        "--num-perm must be between 1 and {max}, got {0}",
        max = crate::limits::MAX_NUM_PERM
    )]
    NumPerm(usize),
    /// `--bands` or `--rows` is 0.
    #[error("--bands and --rows must be at least 1, got --bands {bands} --rows {rows}")]
    BandsOrRowsZero {
        /// `--bands`.
        bands: usize,
        /// `--rows`.
        rows: usize,
    },
    /// `--bands` × `--rows` needs more signature positions than `--num-perm`.
    #[error(
        "--bands {bands} × --rows {rows} needs {needed} signature positions, more than \
         --num-perm {num_perm}: give --num-perm {needed} or more, or fewer bands or rows",
        needed = bands.saturating_mul(*rows)
    )]
    BandsExceedNumPerm {
        /// `--bands`.
        bands: usize,
        /// `--rows`.
        rows: usize,
        /// `--num-perm`.
        num_perm: usize,
    },
    /// `--bands` and `--rows` the sketch cannot use.
    #[error("--bands/--rows: {0}")]
    Bands(neardup_sketch::SketchError),
    /// No LSH parameters fit the threshold and width.
    #[error(transparent)]
    Lsh(neardup_sketch::SketchError),
    /// One of `--bands` and `--rows` without the other.
    #[error("--bands and --rows go together")]
    BandsWithoutRows,
    /// No `--field`.
    #[error("at least one --field is needed")]
    NoField,
    /// A `--field` or `--id-field` that is not a field path.
    #[error("--field or --id-field: {0}")]
    FieldPath(neardup_corpus::FieldPathError),
    /// Neither near-duplicate nor exact detection.
    #[error(
        "with near-duplicate detection off (keys.near = false), exact deduplication must be on \
         (keys.exact = true, i.e. no --no-exact)"
    )]
    NothingToDetect,
    /// `max_reps = 0` (no bound is `None`).
    #[error(
        "dedup.max_reps must be at least 1; no bound is None (0 in a settings file, --max-reps \
         0)"
    )]
    NoRepresentatives,
    /// `keys.chunk_bytes = 0`.
    #[error("keys.chunk_bytes must be positive (settings file)")]
    ChunkBytes,
    /// A run against a saved index, or saving one, with `min_key_count` other than 1.
    #[error(
        "a run against a saved index or saving one needs --min-key-count 1 (got {0}): with \
         more, records of a later run could change this run's decisions"
    )]
    IndexMinCount(u32),
    /// A run against a saved index, or saving one, with a preference other than input order.
    #[error(
        "a run against a saved index or saving one keeps the first copy (--prefer first): the \
         indexed runs' decisions are final, and a preference would rank later records before \
         theirs"
    )]
    IndexPrefer,
    /// More threads than [`crate::limits::MAX_THREADS`].
    #[error(
        "--threads must be at most {max} (0 uses every core), got {0}",
        max = crate::limits::MAX_THREADS
    )]
    Threads(usize),
    /// A run without inputs.
    #[error("no inputs given")]
    NoInputs,
    /// A plan of no groups.
    #[error("--groups must be at least 1")]
    NoGroups,
    /// A setting an in-memory table's run cannot use (`output`, `index_out`), or `format =
    /// "arrow"` in settings (only a table handed in is one).
    #[error("{0}")]
    TableRun(&'static str),
    /// Hot keys made with other sketch or field settings than the run's.
    #[error(
        "the hot keys do not match these settings (pass `apply`, `sign`, `decide` and `write` \
         the sketch and field options given to `keys`): {} (the hot keys' value first)",
        joined(differences)
    )]
    HotLayout {
        /// The settings that differ, the hot keys' value first.
        differences: Vec<neardup_keys::LayoutDifference>,
    },
}

/// The settings that differ, as one message lists them.
fn joined(differences: &[neardup_keys::LayoutDifference]) -> String {
    let listed: Vec<String> = differences.iter().map(ToString::to_string).collect();
    listed.join("; ")
}

/// Why a settings file cannot be used (a [`ConfigError::File`], whose message prints it): the
/// reader's or the parser's own error, its message and its causes.
#[derive(Debug, thiserror::Error)]
pub enum SettingsFileProblem {
    /// It cannot be read.
    #[error(transparent)]
    Read(io::Error),
    /// It is not valid TOML settings.
    #[error(transparent)]
    Toml(toml::de::Error),
    /// It is not valid JSON settings (or its settings cannot be merged).
    #[error(transparent)]
    Json(serde_json::Error),
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

/// A saved index asked of a step or a run that cannot make or use it ([`Error::IndexUse`]).
#[derive(Debug, thiserror::Error)]
pub enum IndexUseError {
    /// `--index-out` given to a distributed stage-2 step (`sign`, `decide`, `write`) or to
    /// `apply`, none of which makes an index: `neardup index` makes it from the run's tables and
    /// decisions.
    #[error(
        "`{step}` does not save an index (--index-out): make the index of a staged run with \
         `neardup index` from its key tables and decisions"
    )]
    NotSaved {
        /// The step.
        step: &'static str,
    },
    /// `--index-out` in one process whose key table spilled past `--memory-limit`.
    #[error(
        "--index-out needs stage 1's key table in memory, and this run's table exceeded \
         --memory-limit: raise the limit, or run the staged steps (`keys`, `hot`, `apply`) and \
         make the index with `neardup index`"
    )]
    TableSpilled,
    /// A `hot` step against an index given key tables in memory.
    #[error(
        "against a saved index, the hot step counts key-table files (tables in memory are \
         counted without the index's keys): save the tables and give their files"
    )]
    TablesInMemory,
    /// A `decide` step against an index given hot keys in memory (a summary holds no keys).
    #[error(
        "`decide` against a saved index needs the hot keys themselves: give the hot-key file (a \
         summary of keys in memory does not hold them)"
    )]
    HotKeysInMemory,
    /// The decisions file `neardup index` was given cannot be read.
    #[error("{}: cannot read the decisions: {error}", path.display())]
    Decisions {
        /// The file.
        path: PathBuf,
        /// Why (in the message).
        error: Box<neardup_corpus::ReadError>,
    },
}

/// A publication error as the facade reports it.
pub(crate) fn publish_error(e: WriteError) -> Error {
    if e.kind() == "interrupted" {
        Error::Interrupted
    } else {
        Error::Publish(e)
    }
}

/// Tables that are not the ones the hot keys were counted from, or that cannot go together, are
/// a mistake in the arguments, not a failure of stage 1.
pub(crate) fn wrong_tables(e: KeysError) -> Error {
    match e {
        e @ (KeysError::Config(_) | KeysError::Incompatible(_)) => Error::WrongKeyFiles(e),
        other => Error::Keys(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup_dedup::DedupError;
    use neardup_index::IndexError;
    use neardup_keys::Damage;

    /// The message and every source under it, as a reporter printing the chain shows them
    /// (anyhow's `{:#}`, a Python exception with its `__cause__`s).
    fn chain(e: &dyn std::error::Error) -> Vec<String> {
        let mut links = vec![e.to_string()];
        let mut next = e.source();
        while let Some(cause) = next {
            links.push(cause.to_string());
            next = cause.source();
        }
        links
    }

    #[test]
    fn a_chain_prints_each_cause_once() {
        use crate::path_conflicts::{NamedPath, PathConflict, PathConflicts, Unwritable};
        use neardup_online::IndexError as OnlineError;
        let cause = || io::Error::new(io::ErrorKind::NotFound, "the system's cause");
        let output = || NamedPath {
            what: "the decisions file (--decisions)".into(),
            path: "out/d.jsonl".into(),
        };
        let printed: Vec<Box<dyn std::error::Error>> = vec![
            Box::new(Error::io(IoOp::Read, "in/a.jsonl", cause())),
            Box::new(Error::Keys(KeysError::Io {
                path: "t/keys-0.ndk".into(),
                error: cause(),
            })),
            Box::new(Error::KeyFile(KeysError::Io {
                path: "t/hot.ndh".into(),
                error: cause(),
            })),
            Box::new(Error::Dedup(DedupError::Spill(cause()))),
            Box::new(Error::Dedup(DedupError::Step(StepInputError::Read {
                stream: "signed-0".into(),
                error: cause(),
            }))),
            Box::new(Error::Index(IndexError::Io {
                path: "run.ndx".into(),
                error: cause(),
            })),
            Box::new(Error::Config(ConfigError::File {
                path: "settings.toml".into(),
                problem: SettingsFileProblem::Read(cause()),
            })),
            Box::new(Error::Paths(PathConflicts {
                shown: vec![PathConflict::Unresolvable {
                    output: output(),
                    error: cause(),
                }],
                hidden: 0,
            })),
            Box::new(Error::Paths(PathConflicts {
                shown: vec![PathConflict::Unwritable {
                    output: output(),
                    dir: "out".into(),
                    problem: Unwritable::Refused(cause()),
                }],
                hidden: 2,
            })),
            Box::new(OnlineError::Spill(cause())),
            Box::new(OnlineError::Save {
                path: "i.ndx".into(),
                error: cause(),
            }),
            Box::new(OnlineError::File {
                path: "i.ndx".into(),
                error: IndexError::Io {
                    path: "i.ndx".into(),
                    error: cause(),
                },
            }),
        ];
        for e in &printed {
            let text = chain(e.as_ref()).join(": ");
            assert_eq!(text.matches("the system's cause").count(), 1, "{text}");
        }
        // A cause the message does not print stays out of it, and no link repeats the next.
        let truncated = Error::KeyFile(KeysError::Corrupt {
            path: Some("t/keys-0.ndk".into()),
            damage: Damage::Truncated(cause()),
        });
        assert_eq!(truncated.to_string(), "t/keys-0.ndk: file is truncated");
        let truncated: Box<dyn std::error::Error> = Box::new(truncated);
        for e in printed.iter().chain([&truncated]) {
            let links = chain(e.as_ref());
            for pair in links.windows(2) {
                assert!(!pair[0].contains(&pair[1]), "{links:?}");
            }
        }
    }

    #[test]
    fn messages_are_those_of_before() {
        // The messages thiserror builds are the ones the hand-written `Display` built.
        use crate::path_conflicts::{
            NamedPath, PathConflict, PathConflicts, SourceRelation, Unwritable,
        };
        use neardup_online::IndexError as OnlineError;
        let named = |what: &str, path: &str| NamedPath {
            what: what.into(),
            path: path.into(),
        };
        let conflicts = PathConflicts {
            shown: vec![
                PathConflict::HoldsSource {
                    output: named("the output directory", "data"),
                    relation: SourceRelation::DirectoryOf,
                    input_tree: named("the input glob", "data/*.jsonl"),
                },
                PathConflict::InsideSource {
                    output: named("the decisions file (--decisions)", "s3://b/in/d.jsonl"),
                    input_tree: named("the input prefix", "s3://b/in"),
                    object_storage: true,
                },
                PathConflict::IsInput {
                    output: named("the report (--report)", "r.json"),
                    input: named("the input", "link.json"),
                    same_path: false,
                },
                PathConflict::Unwritable {
                    output: named("the report (--report)", "ro/r.json"),
                    dir: "ro".into(),
                    problem: Unwritable::NotADirectory,
                },
                PathConflict::Unwritable {
                    output: named("the report (--report)", "ro/r.json"),
                    dir: "ro".into(),
                    problem: Unwritable::Refused(io::Error::other("read-only")),
                },
            ],
            hidden: 3,
        };
        assert_eq!(
            Error::Paths(conflicts).to_string(),
            "the output directory data is the directory of the input glob data/*.jsonl: the \
             outputs would replace or mix with the inputs; choose an output directory outside the \
             input tree\n\
             the decisions file (--decisions) s3://b/in/d.jsonl is within the input prefix \
             s3://b/in: a later run over it would read the outputs back as input; choose a path \
             outside it\n\
             the report (--report) r.json is the input link.json (the same file): writing it would \
             destroy the input; choose another path\n\
             cannot write the report (--report) ro/r.json: ro is not a directory\n\
             cannot write the report (--report) ro/r.json: ro does not accept new files \
             (read-only)\n\
             … and 3 more conflicts like these"
        );
        let e = Error::Config(ConfigError::File {
            path: "s.json".into(),
            problem: SettingsFileProblem::Json(
                serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
            ),
        });
        assert_eq!(
            e.to_string(),
            "s.json: EOF while parsing an object at line 1 column 1"
        );
        assert_eq!(
            OnlineError::Save {
                path: "i.ndx".into(),
                error: io::Error::other("full"),
            }
            .to_string(),
            "cannot save the index at i.ndx: full"
        );
        assert_eq!(
            OnlineError::SettingsDiffer {
                address: "127.0.0.1:6379".into(),
                namespace: "ns".into(),
                differences: vec!["seed: 1 vs 2".into(), "bands: 4 vs 8".into()],
            }
            .to_string(),
            "the namespace \"ns\" at 127.0.0.1:6379 was made with other settings (seed: 1 vs 2, \
             bands: 4 vs 8; the namespace's value first): use its settings, or another namespace"
        );
        assert_eq!(
            OnlineError::NoPath.to_string(),
            "give the path to save the index at (only an index opened from a file saves back to \
             its own)"
        );
        let e = Error::io(
            IoOp::Create {
                what: "the spill directory".into(),
            },
            "/tmp/s",
            io::Error::new(io::ErrorKind::PermissionDenied, "denied"),
        );
        assert_eq!(
            e.to_string(),
            "cannot create the spill directory /tmp/s: denied"
        );
        let e = Error::Keys(KeysError::Io {
            path: "k.ndk".into(),
            error: io::Error::other("gone"),
        });
        assert_eq!(e.to_string(), "stage 1: k.ndk: gone");
        assert_eq!(
            Error::Dedup(DedupError::WriterStopped).to_string(),
            "stage 2: output error: the output writer stopped"
        );
        assert_eq!(
            Error::ThreadLost {
                thread: "the pipeline thread"
            }
            .to_string(),
            "the pipeline thread panicked"
        );
        // The command is named once (it read "run `neardup neardup sign` again").
        let e = CorruptValue::ManifestChecksum {
            manifest: "sig-0/manifest.json".into(),
            step: StepKind::Sign,
        };
        assert_eq!(
            e.to_string(),
            "sig-0/manifest.json is damaged: its checksum does not match its contents (it was \
             altered or written by an older neardup); run `neardup sign` again"
        );
    }
}
