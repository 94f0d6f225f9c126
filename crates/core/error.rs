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
#[derive(Debug)]
pub enum Error {
    /// A command-line argument the binary refuses (exit code 2); the library never makes it.
    Usage(String),
    /// Settings the run cannot start with (exit code 2).
    Config(ConfigError),
    /// The run's paths conflict: an output is, holds or would be read back as an input, outputs
    /// collide, or an output cannot be written (exit code 2).
    Paths(crate::paths::PathConflicts),
    /// Stage 1 failed.
    Keys(neardup_keys::KeysError),
    /// Stage 2 failed.
    Dedup(neardup_dedup::DedupError),
    /// The inputs cannot be used: an argument that names nothing usable, an unusable input
    /// under `on_error = fail`, or no input file at all.
    Inputs(InputsError),
    /// A file (or standard output) the run reads or writes failed.
    Io {
        /// Reading, writing or creating.
        op: IoOp,
        /// What was read or written.
        target: IoTarget,
        /// The system's error.
        source: io::Error,
    },
    /// Publishing the run's outputs (or beginning to) failed; the error names the file.
    Publish(WriteError),
    /// A key-table or hot-key file given to a step (not made by this run) cannot be used.
    KeyFile(KeysError),
    /// The outputs of an earlier distributed step given to this one are damaged, missing, or
    /// belong to another run (exit code 2: the arguments name the wrong files).
    StepInput(StepInputError),
    /// The run's worker threads could not be started.
    Threads {
        /// How many were asked for.
        threads: usize,
        /// Why not.
        source: rayon::ThreadPoolBuildError,
    },
    /// The thread a run was running on ended without its result (it panicked).
    ThreadLost {
        /// The thread, e.g. "the pipeline thread".
        thread: &'static str,
    },
    /// The evaluation (`neardup eval`) could not run.
    Eval(crate::eval::EvalError),
    /// A saved index (`--against`, `--index-out`, `neardup index`) cannot be made, read or used
    /// (exit code 2 when it was made with other settings or the arguments do not fit it).
    Index(neardup_index::IndexError),
    /// The online index's stores (`neardup index push`/`pull`/`stats` with Redis): a server
    /// that cannot be reached, a namespace with other settings or already holding an index
    /// (exit code 2 for those refusals), a path that is not an index.
    Online(neardup_online::IndexError),
    /// A saved index asked of a step or a run that cannot make or use it (exit code 2).
    IndexUse(IndexUseError),
    /// The bytes of a step's value are damaged, truncated or not neardup's.
    Corrupt(CorruptValue),
    /// The outputs of earlier distributed steps given to this one are not the ones it needs:
    /// another step's, another run's, or not all of them (exit code 2).
    StepOutputs(StepOutputsError),
    /// Key tables or a hot-key file given to a step that do not go with each other or with the
    /// settings (a [`KeysError::Config`] or [`KeysError::Incompatible`]; exit code 2: the
    /// arguments name the wrong files).
    WrongKeyFiles(KeysError),
    /// The run was cancelled (its [`neardup_exec::CancelToken`]; the CLI: a signal) before
    /// its outputs were published; nothing was published and what it wrote was removed
    /// (exit code 130).
    Interrupted,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) => f.write_str(m),
            Error::Config(e) => e.fmt(f),
            Error::Paths(e) => e.fmt(f),
            Error::Corrupt(e) => e.fmt(f),
            Error::StepOutputs(e) => e.fmt(f),
            Error::WrongKeyFiles(e) => e.fmt(f),
            Error::Inputs(e) => e.fmt(f),
            Error::Io { op, target, source } => match op {
                IoOp::Read => write!(f, "cannot read {target}: {source}"),
                IoOp::Write => write!(f, "cannot write {target}: {source}"),
                IoOp::Create { what } => write!(f, "cannot create {what} {target}: {source}"),
                IoOp::OpenStream => write!(f, "{target}: {source}"),
            },
            Error::Publish(e) => e.fmt(f),
            Error::KeyFile(e) => e.fmt(f),
            Error::StepInput(e) => e.fmt(f),
            Error::Threads { threads, source } => {
                write!(f, "cannot start {threads} threads: {source}")
            }
            Error::ThreadLost { thread } => write!(f, "{thread} panicked"),
            Error::Eval(e) => e.fmt(f),
            Error::Index(e) => e.fmt(f),
            Error::Online(e) => e.fmt(f),
            Error::IndexUse(e) => e.fmt(f),
            Error::Interrupted => f.write_str(
                "interrupted before the outputs were published; nothing was published and the \
                 files the run had written were removed",
            ),
            Error::Keys(e) => write!(f, "stage 1: {e}"),
            Error::Dedup(e) => write!(f, "stage 2: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Keys(e) | Error::KeyFile(e) | Error::WrongKeyFiles(e) => Some(e),
            Error::Corrupt(e) => Some(e),
            Error::Config(e) => Some(e),
            Error::Paths(e) => Some(e),
            Error::StepOutputs(e) => Some(e),
            Error::Dedup(e) => Some(e),
            Error::Inputs(_) => None,
            Error::Io { source, .. } => Some(source),
            Error::Publish(e) => Some(e),
            Error::StepInput(e) => Some(e),
            Error::Threads { source, .. } => Some(source),
            Error::Eval(e) => Some(e),
            Error::Index(e) => Some(e),
            Error::Online(e) => Some(e),
            Error::IndexUse(_)
            | Error::Usage(_)
            | Error::ThreadLost { .. }
            | Error::Interrupted => None,
        }
    }
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
    pub(crate) fn io(op: IoOp, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            target: IoTarget::Path(path.into()),
            source,
        }
    }
}

/// Why the inputs cannot be used (an [`Error::Inputs`]).
#[derive(Debug, Clone)]
pub enum InputsError {
    /// Arguments that cannot be used as given (a missing path, a glob without a match, a file
    /// named explicitly whose format is unknown, standard input or a pipe, a name that is not
    /// UTF-8): each with its problem.
    Unusable(Vec<InputProblem>),
    /// Inputs that could not be used, under `on_error = fail`.
    FailOnProblem(Vec<InputProblem>),
    /// No input file was found; the problems met while looking.
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

impl fmt::Display for InputsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let listed = |problems: &[InputProblem], sep: &str, prefix: &str| {
            problems
                .iter()
                .map(|p| format!("{prefix}{}: {}", p.input, p.message))
                .collect::<Vec<_>>()
                .join(sep)
        };
        match self {
            InputsError::Unusable(p) => f.write_str(&listed(p, "\n", "input ")),
            InputsError::FailOnProblem(p) => write!(
                f,
                "{} (--on-error fail stops at the first unusable input)",
                listed(p, "; ", "")
            ),
            InputsError::NoneFound(p) if p.is_empty() => f.write_str("no input files found"),
            InputsError::NoneFound(p) => {
                write!(f, "no input files found: {}", listed(p, "; ", ""))
            }
        }
    }
}

impl std::error::Error for InputsError {}

/// A distributed step, as errors about its outputs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// `sign` (its outputs: signed shards, one stream per group).
    Sign,
    /// `decide` (its outputs: decided groups, one stream per shard).
    Decide,
}

impl StepKind {
    fn names(self) -> &'static crate::step_values::StepNames {
        match self {
            StepKind::Sign => &crate::step_values::SIGN_STEP,
            StepKind::Decide => &crate::step_values::DECIDE_STEP,
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
#[derive(Debug)]
pub enum StepOutputsError {
    /// A directory without the step's manifest.
    NoManifest {
        /// The step whose output it should be.
        step: StepKind,
        /// The directory.
        dir: PathBuf,
        /// The manifest's path.
        manifest: PathBuf,
        /// Why it cannot be read.
        source: io::Error,
    },
    /// A directory whose manifest is not the step's.
    NotManifest {
        /// The step whose output it should be.
        step: StepKind,
        /// The directory.
        dir: PathBuf,
        /// The manifest's path.
        manifest: PathBuf,
        /// Why it is not one.
        source: serde_json::Error,
    },
    /// An output of another step, or of another format version.
    OtherFormat {
        /// The step whose output it should be.
        step: StepKind,
        /// The output.
        origin: String,
    },
    /// An output made with another hot-key file than the one given.
    OtherHotKeys {
        /// The step that made it.
        step: StepKind,
        /// The output.
        origin: String,
    },
    /// An output made with other decision settings than the ones given.
    OtherSettings {
        /// The step that made it.
        step: StepKind,
        /// The output.
        origin: String,
        /// The settings that differ.
        changes: Vec<SettingChange>,
    },
    /// Bytes of one kind of value read as another.
    OtherKind {
        /// The value expected.
        expected: StepKind,
        /// The kind the bytes name (`None`: a kind this build does not know).
        found: Option<StepKind>,
    },
    /// A stream index outside the output's streams.
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
    GroupOutOfRange {
        /// The group asked for.
        group: u32,
        /// The plan's groups.
        groups: u32,
    },
    /// Two sign outputs of one shard.
    SameShard {
        /// The first.
        first: String,
        /// The second.
        second: String,
        /// Their shard.
        shard: u32,
    },
    /// Sign outputs of some shards are missing.
    MissingShards {
        /// The shards the hot keys were counted from.
        shards: u32,
        /// The shards without a sign output.
        missing: Vec<u32>,
    },
    /// Two decide outputs of one group.
    SameGroup {
        /// The first.
        first: String,
        /// The second.
        second: String,
        /// Their group.
        group: u32,
    },
    /// Decide outputs of some groups are missing.
    MissingGroups {
        /// The plan's groups.
        groups: u32,
        /// The groups without a decide output.
        missing: Vec<u32>,
    },
    /// Sign outputs made with other sketch settings than the first one given.
    SignedDifferently {
        /// The output.
        origin: String,
        /// The first output given.
        first: String,
    },
    /// The decide outputs name other input files for the shard than its key table.
    OtherInputs {
        /// The decide output.
        origin: String,
        /// The shard.
        shard: u32,
        /// The key table.
        table: String,
    },
}

impl fmt::Display for StepOutputsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepOutputsError::NoManifest {
                step,
                dir,
                manifest,
                source,
            } => write!(
                f,
                "{}: not a `{}` output ({} cannot be read: {source})",
                dir.display(),
                step.names().command,
                manifest.display()
            ),
            StepOutputsError::NotManifest {
                step,
                dir,
                manifest,
                source,
            } => write!(
                f,
                "{}: not a `{}` output ({} is not its manifest: {source})",
                dir.display(),
                step.names().command,
                manifest.display()
            ),
            StepOutputsError::OtherFormat { step, origin } => write!(
                f,
                "{origin}: not a `{}` output of this version",
                step.names().command
            ),
            StepOutputsError::OtherHotKeys { step, origin } => {
                let n = step.names();
                write!(
                    f,
                    "{origin} was {} with another hot-key file than the one given (--hot): give \
                     `{}` the hot-key file {} used",
                    n.made, n.reader, n.hot_from
                )
            }
            StepOutputsError::OtherSettings {
                step,
                origin,
                changes,
            } => {
                let changes: Vec<String> = changes.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "{origin} was made by `{}` with other decision settings ({}): give every \
                     step the same --threshold, --max-reps, --verify, --prefer and --against",
                    step.names().command,
                    changes.join("; ")
                )
            }
            StepOutputsError::OtherKind { expected, found } => write!(
                f,
                "these bytes are a {}, not a {}",
                found.map_or("step value of an unknown kind", |k| k.names().value),
                expected.names().value
            ),
            StepOutputsError::OutOfRange {
                step,
                origin,
                index,
                streams,
            } => {
                let unit = step.names().unit;
                write!(
                    f,
                    "{unit} {index} is out of range: {origin} has {streams} {unit}{} (0 to {})",
                    plural(*streams as usize),
                    streams.saturating_sub(1)
                )
            }
            StepOutputsError::PartWithout {
                step,
                origin,
                index,
                held,
            } => {
                let unit = step.names().unit;
                write!(
                    f,
                    "{origin} holds no stream for {unit} {index} (it is a part holding {unit}s \
                     {held:?}): take the part from the whole value"
                )
            }
            StepOutputsError::NotHeld {
                step,
                origin,
                index,
                held,
                wanted_by,
            } => {
                let unit = step.names().unit;
                let s = plural(held.len());
                write!(
                    f,
                    "{origin} holds the stream{s} of {unit}{s} {} only, and {wanted_by} needs \
                     {unit} {index}'s: give the whole value, or its part for {unit} {index}",
                    listed(held)
                )
            }
            StepOutputsError::GroupOutOfRange { group, groups } => write!(
                f,
                "--group {group} is out of range: the hot-key file's plan has {groups} group{} \
                 (0 to {})",
                plural(*groups as usize),
                groups.saturating_sub(1)
            ),
            StepOutputsError::SameShard {
                first,
                second,
                shard,
            } => write!(
                f,
                "{first} and {second} are both the sign output of shard {shard}: give each \
                 shard's once"
            ),
            StepOutputsError::MissingShards { shards, missing } => write!(
                f,
                "the hot keys were counted from {shards} shards, and the sign outputs of shard{} \
                 {} are missing: `decide` needs every shard's sign output",
                plural(missing.len()),
                listed(missing)
            ),
            StepOutputsError::SameGroup {
                first,
                second,
                group,
            } => write!(
                f,
                "{first} and {second} both decided group {group}: give each group's decide \
                 output once"
            ),
            StepOutputsError::MissingGroups { groups, missing } => write!(
                f,
                "the plan has {groups} group{}, and the decide outputs of group{} {} are \
                 missing: `write` needs every group's (--decided decided-0 … decided-{})",
                plural(*groups as usize),
                plural(missing.len()),
                listed(missing),
                groups.saturating_sub(1)
            ),
            StepOutputsError::SignedDifferently { origin, first } => {
                write!(f, "{origin}: signed with other settings than {first}")
            }
            StepOutputsError::OtherInputs {
                origin,
                shard,
                table,
            } => write!(
                f,
                "{origin}: the decided files name other input files for shard {shard} than its \
                 key table {table}: were the inputs moved or renamed after `sign`?"
            ),
        }
    }
}

impl std::error::Error for StepOutputsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StepOutputsError::NoManifest { source, .. } => Some(source),
            StepOutputsError::NotManifest { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What is wrong with the bytes of a step value (an [`Error::Corrupt`]); `value` is the value's
/// type as messages name it (`SignedShard`, `DecidedGroup`).
#[derive(Debug)]
pub enum CorruptValue {
    /// The bytes do not begin with a step value's marker.
    NotAValue {
        /// The value expected.
        value: StepKind,
    },
    /// The bytes do not end with the value's end marker.
    Truncated {
        /// The value expected.
        value: StepKind,
    },
    /// A format version this build does not read.
    Version {
        /// The bytes' version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The checksum stored differs from the one computed.
    Checksum {
        /// The value expected.
        value: StepKind,
    },
    /// A part (`what` it is) runs past the end of the bytes.
    RunsPast {
        /// The part, e.g. "the manifest".
        what: &'static str,
    },
    /// The manifest cannot be read.
    Manifest {
        /// The value expected.
        value: StepKind,
        /// Why not.
        source: serde_json::Error,
    },
    /// Bytes follow the last stream.
    TrailingBytes {
        /// The value expected.
        value: StepKind,
        /// How many.
        bytes: usize,
    },
    /// A stream outside the manifest's, or held twice or out of order.
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
    ManifestChecksum {
        /// The manifest file.
        manifest: PathBuf,
        /// The step that made it.
        step: StepKind,
    },
    /// The value holds no stream.
    NoStreams {
        /// The value.
        origin: String,
    },
}

impl fmt::Display for CorruptValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptValue::NotAValue { value } => write!(
                f,
                "these bytes are not a neardup step value (a {}'s to_bytes): they do not begin \
                 with its marker",
                value.names().value
            ),
            CorruptValue::Truncated { value } => write!(
                f,
                "these {} bytes are truncated: they do not end with the value's end marker",
                value.names().value
            ),
            CorruptValue::Version { found, supported } => write!(
                f,
                "these bytes are a step value of format version {found}; this build reads \
                 version {supported}"
            ),
            CorruptValue::Checksum { value } => write!(
                f,
                "these {} bytes are damaged: their checksum does not match",
                value.names().value
            ),
            CorruptValue::ManifestChecksum { manifest, step } => write!(
                f,
                "{} is damaged: its checksum does not match its contents (it was altered or \
                 written by an older neardup); run `neardup {}` again",
                manifest.display(),
                step.names().command
            ),
            CorruptValue::RunsPast { what } => write!(
                f,
                "these step-value bytes are damaged: {what} runs past their end"
            ),
            CorruptValue::Manifest { value, source } => write!(
                f,
                "these {} bytes hold an unreadable manifest: {source}",
                value.names().value
            ),
            CorruptValue::TrailingBytes { value, bytes } => write!(
                f,
                "these {} bytes are damaged: {bytes} bytes follow the last stream",
                value.names().value
            ),
            CorruptValue::StreamIndex {
                origin,
                step,
                index,
                streams,
            } => {
                let unit = step.names().unit;
                write!(
                    f,
                    "{origin}: holds a stream for {unit} {index}, and its manifest has {streams} \
                     {unit}s (0 to {}), each once",
                    streams.saturating_sub(1)
                )
            }
            CorruptValue::StreamLength {
                origin,
                step,
                index,
                held,
                expected,
            } => write!(
                f,
                "{origin}: the stream of {} {index} holds {held} bytes, and the manifest says \
                 {expected}: it is truncated or altered",
                step.names().unit
            ),
            CorruptValue::NoStreams { origin } => write!(f, "{origin}: holds none of its streams"),
        }
    }
}

impl std::error::Error for CorruptValue {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CorruptValue::Manifest { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Settings a run cannot start with (an [`Error::Config`], exit code 2). Settings are named by
/// their flags, as the CLI and the messages of every front end name them.
#[derive(Debug)]
pub enum ConfigError {
    /// A settings file cannot be read, or is not valid settings.
    File {
        /// The file.
        path: PathBuf,
        /// Why not.
        problem: SettingsFileProblem,
    },
    /// `--shingle` or `--step` is 0.
    ShingleOrStep {
        /// `--shingle`.
        shingle: usize,
        /// `--step`.
        step: usize,
    },
    /// `tokenize = "custom:NAME"` without the tokenizer of that name handed in beside the
    /// settings.
    NoCustomTokenizer(String),
    /// A seed over 32 bits with `--hash datasketch`.
    DatasketchSeed {
        /// The seed.
        seed: u64,
    },
    /// `--keep-chars` does not parse.
    KeepChars(neardup_sketch::SketchError),
    /// The sketch settings are invalid together.
    Sketch(neardup_sketch::SketchError),
    /// `--threshold` outside [0, 1].
    Threshold(f64),
    /// `--num-perm` outside 1 to [`crate::MAX_NUM_PERM`].
    NumPerm(usize),
    /// `--bands` or `--rows` is 0.
    BandsOrRowsZero {
        /// `--bands`.
        bands: usize,
        /// `--rows`.
        rows: usize,
    },
    /// `--bands` × `--rows` needs more signature positions than `--num-perm`.
    BandsExceedNumPerm {
        /// `--bands`.
        bands: usize,
        /// `--rows`.
        rows: usize,
        /// `--num-perm`.
        num_perm: usize,
    },
    /// `--bands` and `--rows` the sketch cannot use.
    Bands(neardup_sketch::SketchError),
    /// No LSH parameters fit the threshold and width.
    Lsh(neardup_sketch::SketchError),
    /// One of `--bands` and `--rows` without the other.
    BandsWithoutRows,
    /// No `--field`.
    NoField,
    /// A `--field` or `--id-field` that is not a field path.
    FieldPath(neardup_corpus::FieldPathError),
    /// Neither near-duplicate nor exact detection.
    NothingToDetect,
    /// `max_reps = 0` (no bound is `None`).
    NoRepresentatives,
    /// `keys.chunk_bytes = 0`.
    ChunkBytes,
    /// A run against a saved index, or saving one, with `min_key_count` other than 1.
    IndexMinCount(u32),
    /// A run against a saved index, or saving one, with a preference other than input order.
    IndexPrefer,
    /// More threads than [`crate::MAX_THREADS`].
    Threads(usize),
    /// A run without inputs.
    NoInputs,
    /// A plan of no groups.
    NoGroups,
    /// A setting an in-memory table's run cannot use (`output`, `index_out`), or `format =
    /// "arrow"` in settings (only a table handed in is one).
    TableRun(&'static str),
    /// Hot keys made with other sketch or field settings than the run's.
    HotLayout {
        /// The settings that differ, the hot keys' value first.
        differences: Vec<neardup_keys::LayoutDifference>,
    },
}

/// Why a settings file cannot be used (a [`ConfigError::File`]).
#[derive(Debug)]
pub enum SettingsFileProblem {
    /// It cannot be read.
    Read(io::Error),
    /// It is not valid TOML settings.
    Toml(toml::de::Error),
    /// It is not valid JSON settings (or its settings cannot be merged).
    Json(serde_json::Error),
}

impl fmt::Display for SettingsFileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsFileProblem::Read(e) => e.fmt(f),
            SettingsFileProblem::Toml(e) => e.fmt(f),
            SettingsFileProblem::Json(e) => e.fmt(f),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::File { path, problem } => write!(f, "{}: {problem}", path.display()),
            ConfigError::ShingleOrStep { shingle, step } => write!(
                f,
                "--shingle and --step must be at least 1, got --shingle {shingle} --step {step}"
            ),
            ConfigError::NoCustomTokenizer(name) => write!(
                f,
                "tokenize \"custom:{name}\" names a tokenizer that a program hands in (the Python \
                 package's tokenizer= callable, named {name:?}), and none was given here; the \
                 command line takes only the native tokenizers (char, byte, word, ascii-word or \
                 alnum, jieba)"
            ),
            ConfigError::DatasketchSeed { seed } => write!(
                f,
                "--seed must be at most {} with --hash datasketch (datasketch seeds are 32-bit), \
                 got {seed}",
                u32::MAX
            ),
            ConfigError::KeepChars(e) => write!(f, "--keep-chars: {e}"),
            ConfigError::Sketch(e) | ConfigError::Lsh(e) => e.fmt(f),
            ConfigError::Threshold(t) => write!(f, "--threshold must be within [0, 1], got {t}"),
            ConfigError::NumPerm(n) => write!(
                f,
                "--num-perm must be between 1 and {}, got {n}",
                crate::MAX_NUM_PERM
            ),
            ConfigError::BandsOrRowsZero { bands, rows } => write!(
                f,
                "--bands and --rows must be at least 1, got --bands {bands} --rows {rows}"
            ),
            ConfigError::BandsExceedNumPerm {
                bands,
                rows,
                num_perm,
            } => {
                let needed = bands.saturating_mul(*rows);
                write!(
                    f,
                    "--bands {bands} × --rows {rows} needs {needed} signature positions, more \
                     than --num-perm {num_perm}: give --num-perm {needed} or more, or fewer \
                     bands or rows"
                )
            }
            ConfigError::Bands(e) => write!(f, "--bands/--rows: {e}"),
            ConfigError::BandsWithoutRows => f.write_str("--bands and --rows go together"),
            ConfigError::NoField => f.write_str("at least one --field is needed"),
            ConfigError::FieldPath(e) => write!(f, "--field or --id-field: {e}"),
            ConfigError::NothingToDetect => f.write_str(
                "with near-duplicate detection off (keys.near = false), exact deduplication must \
                 be on (keys.exact = true, i.e. no --no-exact)",
            ),
            ConfigError::NoRepresentatives => f.write_str(
                "dedup.max_reps must be at least 1; no bound is None (0 in a settings file, \
                 --max-reps 0)",
            ),
            ConfigError::ChunkBytes => {
                f.write_str("keys.chunk_bytes must be positive (settings file)")
            }
            ConfigError::IndexMinCount(n) => write!(
                f,
                "a run against a saved index or saving one needs --min-key-count 1 (got {n}): \
                 with more, records of a later run could change this run's decisions"
            ),
            ConfigError::IndexPrefer => f.write_str(
                "a run against a saved index or saving one keeps the first copy (--prefer \
                 first): the indexed runs' decisions are final, and a preference would rank \
                 later records before theirs",
            ),
            ConfigError::Threads(n) => write!(
                f,
                "--threads must be at most {} (0 uses every core), got {n}",
                crate::MAX_THREADS
            ),
            ConfigError::NoInputs => f.write_str("no inputs given"),
            ConfigError::NoGroups => f.write_str("--groups must be at least 1"),
            ConfigError::TableRun(what) => f.write_str(what),
            ConfigError::HotLayout { differences } => {
                f.write_str(
                    "the hot keys do not match these settings (pass `apply`, `sign`, `decide` \
                     and `write` the sketch and field options given to `keys`): ",
                )?;
                for (i, d) in differences.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    d.fmt(f)?;
                }
                f.write_str(" (the hot keys' value first)")
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::File { problem, .. } => match problem {
                SettingsFileProblem::Read(e) => Some(e),
                SettingsFileProblem::Toml(e) => Some(e),
                SettingsFileProblem::Json(e) => Some(e),
            },
            ConfigError::KeepChars(e)
            | ConfigError::Sketch(e)
            | ConfigError::Bands(e)
            | ConfigError::Lsh(e) => Some(e),
            ConfigError::FieldPath(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

/// A saved index asked of a step or a run that cannot make or use it ([`Error::IndexUse`]).
#[derive(Debug)]
pub enum IndexUseError {
    /// `--index-out` given to a distributed stage-2 step (`sign`, `decide`, `write`) or to
    /// `apply`, none of which makes an index: `neardup index` makes it from the run's tables and
    /// decisions.
    NotSaved {
        /// The step.
        step: &'static str,
    },
    /// `--index-out` in one process whose key table spilled past `--memory-limit`.
    TableSpilled,
    /// A `hot` step against an index given key tables in memory.
    TablesInMemory,
    /// A `decide` step against an index given hot keys in memory (a summary holds no keys).
    HotKeysInMemory,
    /// The decisions file `neardup index` was given cannot be read.
    Decisions {
        /// The file.
        path: PathBuf,
        /// Why.
        source: Box<neardup_corpus::ReadError>,
    },
}

impl fmt::Display for IndexUseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexUseError::NotSaved { step } => write!(
                f,
                "`{step}` does not save an index (--index-out): make the index of a staged run \
                 with `neardup index` from its key tables and decisions"
            ),
            IndexUseError::TableSpilled => f.write_str(
                "--index-out needs stage 1's key table in memory, and this run's table exceeded \
                 --memory-limit: raise the limit, or run the staged steps (`keys`, `hot`, \
                 `apply`) and make the index with `neardup index`",
            ),
            IndexUseError::TablesInMemory => f.write_str(
                "against a saved index, the hot step counts key-table files (tables in memory \
                 are counted without the index's keys): save the tables and give their files",
            ),
            IndexUseError::HotKeysInMemory => f.write_str(
                "`decide` against a saved index needs the hot keys themselves: give the \
                 hot-key file (a summary of keys in memory does not hold them)",
            ),
            IndexUseError::Decisions { path, source } => {
                write!(f, "{}: cannot read the decisions: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for IndexUseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IndexUseError::Decisions { source, .. } => Some(source),
            _ => None,
        }
    }
}
