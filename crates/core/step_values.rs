//! The outputs of the `sign` and `decide` steps as values: [`SignedShard`] and [`DecidedGroup`],
//! each its step's manifest and streams, readable and writable as bytes (for object stores, which
//! have no paths) and as the directory the CLI writes.
//!
//! A value may hold only some of its streams: [`SignedShard::group`] keeps one group's (all a
//! `decide` task needs from a shard) and [`DecidedGroup::shard`] one shard's (all a `write` task
//! needs from a group), so a scheduler ships each task only its part. Such a part is the same
//! type, with the same checks; a step refuses a value that lacks the stream it needs.
//!
//! The bytes (`docs/formats.md`, "Step values"): a magic, a format version, the kind, the
//! manifest as JSON, the streams held (index and length each), an xxh3-64 checksum of all that
//! and an end magic. Damaged, truncated or foreign bytes are refused with [`Error::Corrupt`].

use std::borrow::Cow;
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use neardup_corpus::frame::{Frame, FrameError, TRAILER_BYTES};
use neardup_corpus::{Publication, PublishOptions};
use neardup_dedup::{RecordReader, StepSink};
use neardup_exec::CancelToken;
use serde::Serialize;
use serde::de::DeserializeOwned;
use xxhash_rust::xxh3::xxh3_64;

use crate::error::{
    CorruptValue, DECIDE_STEP, Error, IoOp, IoTarget, SIGN_STEP, StepKind, StepNames,
    StepOutputsError, publish_error,
};
use crate::paths::RunPaths;
use crate::step_manifests::{
    DecideManifest, DecideSettings, STEP_FORMAT_VERSION, STEP_MANIFEST, SignManifest,
};

/// The bytes of one stream, shared by a value, its parts and the steps reading them (no copy).
#[derive(Clone)]
pub(crate) struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl PartialEq for Shared {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

/// What the manifests of the `sign` and `decide` outputs have in common, checked by the next
/// step and by the values holding them.
pub(crate) trait StepManifest: Serialize + DeserializeOwned + Clone + PartialEq {
    /// The step that writes it.
    const STEP: &'static StepNames;
    /// Its kind byte in a value's bytes.
    const KIND: u8;
    fn format(&self) -> (&str, u32);
    fn hot(&self) -> u64;
    fn settings(&self) -> &DecideSettings;
    /// Streams of the whole output: one per group (sign) or per shard (decide).
    fn streams(&self) -> u32;
    /// How a value holding this manifest is named in messages.
    fn value_name(&self) -> String;
    /// The corpus files its streams were made from, as the decisions name them (sign: the
    /// shard's; decide: every shard's, after the indexed runs'): files of the run, which no
    /// later step may write over.
    fn input_files(&self) -> &[String];
    /// Stream `index`'s file in an output directory.
    fn stream_file(dir: &Path, index: u32) -> PathBuf;
    /// The length of stream `index` when the manifest records it.
    fn stream_len(&self, _index: u32) -> Option<u64> {
        None
    }
}

impl StepManifest for SignManifest {
    const STEP: &'static StepNames = &SIGN_STEP;
    const KIND: u8 = 1;
    fn format(&self) -> (&str, u32) {
        (&self.format, self.format_version)
    }
    fn hot(&self) -> u64 {
        self.hot
    }
    fn settings(&self) -> &DecideSettings {
        &self.settings
    }
    fn streams(&self) -> u32 {
        self.groups
    }
    fn value_name(&self) -> String {
        format!("the signed value of shard {}", self.place.shard)
    }
    fn input_files(&self) -> &[String] {
        &self.files
    }
    fn stream_file(dir: &Path, index: u32) -> PathBuf {
        dir.join(format!("group-{index:05}.bin"))
    }
    fn stream_len(&self, index: u32) -> Option<u64> {
        self.bytes.get(index as usize).copied()
    }
}

impl StepManifest for DecideManifest {
    const STEP: &'static StepNames = &DECIDE_STEP;
    const KIND: u8 = 2;
    fn format(&self) -> (&str, u32) {
        (&self.format, self.format_version)
    }
    fn hot(&self) -> u64 {
        self.hot
    }
    fn settings(&self) -> &DecideSettings {
        &self.settings
    }
    fn streams(&self) -> u32 {
        self.shards
    }
    fn value_name(&self) -> String {
        format!("the decided value of group {}", self.group)
    }
    fn input_files(&self) -> &[String] {
        &self.files
    }
    fn stream_file(dir: &Path, index: u32) -> PathBuf {
        dir.join(format!("shard-{index:05}.bin"))
    }
}

/// Reads the manifest of a step's output directory.
pub(crate) fn read_manifest<M: StepManifest>(dir: &Path) -> Result<M, Error> {
    let path = dir.join(STEP_MANIFEST);
    let bytes = neardup_storage::file::read(&path).map_err(|e| {
        // A directory without a manifest is not a step's output; a manifest that cannot be
        // read (a disk or storage failure) is a failure of the run.
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::StepOutputs(StepOutputsError::NoManifest {
                step: M::STEP.kind,
                dir: dir.to_path_buf(),
                manifest: path.clone(),
                error: e,
            })
        } else {
            Error::io(IoOp::Read, &path, e)
        }
    })?;
    let not_manifest = |e| {
        Error::StepOutputs(StepOutputsError::NotManifest {
            step: M::STEP.kind,
            dir: dir.to_path_buf(),
            manifest: path.clone(),
            error: e,
        })
    };
    let mut fields: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(not_manifest)?;
    let stored = fields.remove(MANIFEST_CHECKSUM);
    let manifest: M =
        serde_json::from_value(serde_json::Value::Object(fields)).map_err(not_manifest)?;
    // Nothing of it is used before it is known whole: a flipped digit still parses.
    if stored.as_ref().and_then(|v| v.as_str()) != Some(&manifest_checksum(&manifest)) {
        return Err(Error::Corrupt(CorruptValue::ManifestChecksum {
            manifest: path,
            step: M::STEP.kind,
        }));
    }
    Ok(manifest)
}

/// The field of a step output directory's `manifest.json` holding its checksum.
const MANIFEST_CHECKSUM: &str = "checksum";

/// The checksum a step output directory's manifest carries: the xxh3-64 of the manifest's
/// compact JSON (without the checksum), as 16 hexadecimal digits.
fn manifest_checksum<M: Serialize>(manifest: &M) -> String {
    let compact = serde_json::to_vec(manifest).expect("a manifest serialises");
    format!("{:016x}", xxh3_64(&compact))
}

/// Writes a step output directory's `manifest.json`: the manifest, its fields in their order,
/// and its checksum last.
fn save_manifest_to(
    mut file: neardup_corpus::AtomicFile,
    manifest: &impl Serialize,
) -> Result<(), Error> {
    let path = file.path().to_path_buf();
    let mut text = serde_json::to_string_pretty(manifest).expect("a manifest serialises");
    let end = text.rfind('}').expect("a manifest is a JSON object");
    text.truncate(end);
    let text = format!(
        "{},\n  \"{MANIFEST_CHECKSUM}\": \"{}\"\n}}\n",
        text.trim_end(),
        manifest_checksum(manifest)
    );
    let fail = |e: std::io::Error| Error::io(IoOp::Write, &path, e);
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(fail)?;
    file.commit().map_err(fail)
}

/// Checks that a manifest is its step's, of this version (`origin` names it in the message).
pub(crate) fn check_format<M: StepManifest>(m: &M, origin: &str) -> Result<(), Error> {
    if m.format() != (M::STEP.format, STEP_FORMAT_VERSION) {
        return Err(Error::StepOutputs(StepOutputsError::OtherFormat {
            step: M::STEP.kind,
            origin: origin.to_string(),
        }));
    }
    Ok(())
}

/// Checks that a step's output (named `origin`) was made with this hot-key file and these
/// decision settings: the same checks for a directory and a value.
pub(crate) fn check_made_for<M: StepManifest>(
    m: &M,
    origin: &str,
    fingerprint: u64,
    settings: &DecideSettings,
) -> Result<(), Error> {
    let step = M::STEP;
    if m.hot() != fingerprint {
        return Err(Error::StepOutputs(StepOutputsError::OtherHotKeys {
            step: step.kind,
            origin: origin.to_string(),
        }));
    }
    settings.check(m.settings(), step.kind, origin)
}

/// A step's output in memory: its manifest and the streams it holds (all, or a part).
#[derive(Clone)]
pub(crate) struct StepValue<M> {
    pub(crate) manifest: M,
    /// `(index, bytes)`, by ascending index.
    streams: Vec<(u32, Shared)>,
    /// How messages name it: the directory it was read from, or "the signed value of shard 3".
    pub(crate) origin: String,
}

impl<M: StepManifest> PartialEq for StepValue<M> {
    fn eq(&self, other: &Self) -> bool {
        self.manifest == other.manifest && self.streams == other.streams
    }
}

const FRAME: Frame = Frame {
    magic: b"NDVALUE\x00",
    end: b"NDVALEND",
};
const VERSION: u32 = 1;

/// Reads the parts of a value's bytes, refusing (never panicking on) short input.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], Error> {
        if (self.bytes.len() as u64) < n {
            return Err(Error::Corrupt(CorruptValue::RunsPast { what }));
        }
        let (head, rest) = self.bytes.split_at(n as usize);
        self.bytes = rest;
        Ok(head)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
}

impl<M: StepManifest> StepValue<M> {
    /// A value made by its step in memory (every stream, indices from 0).
    pub(crate) fn made(manifest: M, streams: Vec<Vec<u8>>) -> StepValue<M> {
        let origin = manifest.value_name();
        StepValue {
            manifest,
            streams: streams
                .into_iter()
                .enumerate()
                .map(|(i, s)| (i as u32, Shared(Arc::new(s))))
                .collect(),
            origin,
        }
    }

    /// Checks what a value read back holds against its manifest.
    fn checked(self) -> Result<StepValue<M>, Error> {
        check_format(&self.manifest, &self.origin)?;
        let all = self.manifest.streams();
        let mut prev: Option<u32> = None;
        for (i, bytes) in &self.streams {
            if *i >= all || prev.is_some_and(|p| p >= *i) {
                return Err(Error::Corrupt(CorruptValue::StreamIndex {
                    origin: self.origin.clone(),
                    step: M::STEP.kind,
                    index: *i,
                    streams: all,
                }));
            }
            if let Some(expected) = self.manifest.stream_len(*i)
                && expected != bytes.as_ref().len() as u64
            {
                return Err(Error::Corrupt(CorruptValue::StreamLength {
                    origin: self.origin.clone(),
                    step: M::STEP.kind,
                    index: *i,
                    held: bytes.as_ref().len() as u64,
                    expected,
                }));
            }
            prev = Some(*i);
        }
        if self.streams.is_empty() {
            return Err(Error::Corrupt(CorruptValue::NoStreams {
                origin: self.origin.clone(),
            }));
        }
        Ok(self)
    }

    /// The stream of `index`, when held.
    pub(crate) fn stream(&self, index: u32) -> Option<&Shared> {
        self.streams
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, s)| s)
    }

    /// The indices of the streams held.
    pub(crate) fn held(&self) -> Vec<u32> {
        self.streams.iter().map(|(i, _)| *i).collect()
    }

    /// This value with only stream `index` (shared, not copied).
    pub(crate) fn only(&self, index: u32) -> Result<StepValue<M>, Error> {
        let stream = self.stream(index).ok_or_else(|| {
            if index >= self.manifest.streams() {
                return self.not_held(index, "");
            }
            Error::StepOutputs(StepOutputsError::PartWithout {
                step: M::STEP.kind,
                origin: self.origin.clone(),
                index,
                held: self.held(),
            })
        })?;
        Ok(StepValue {
            manifest: self.manifest.clone(),
            streams: vec![(index, stream.clone())],
            origin: self.origin.clone(),
        })
    }

    /// The error of asking for a stream the value does not hold.
    pub(crate) fn not_held(&self, index: u32, wanted_by: &str) -> Error {
        let all = self.manifest.streams();
        if index >= all {
            return Error::StepOutputs(StepOutputsError::OutOfRange {
                step: M::STEP.kind,
                origin: self.origin.clone(),
                index,
                streams: all,
            });
        }
        Error::StepOutputs(StepOutputsError::NotHeld {
            step: M::STEP.kind,
            origin: self.origin.clone(),
            index,
            held: self.held(),
            wanted_by: wanted_by.to_string(),
        })
    }

    /// Bytes held, over all streams.
    pub(crate) fn stream_bytes(&self) -> u64 {
        self.streams
            .iter()
            .map(|(_, s)| s.as_ref().len() as u64)
            .sum()
    }

    /// The value's bytes (see the module docs).
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let manifest = serde_json::to_vec(&self.manifest).expect("manifests serialise");
        let mut out = Vec::with_capacity(64 + manifest.len() + self.stream_bytes() as usize);
        out.extend_from_slice(FRAME.magic);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(M::KIND);
        out.extend_from_slice(&(manifest.len() as u64).to_le_bytes());
        out.extend_from_slice(&manifest);
        out.extend_from_slice(&(self.streams.len() as u32).to_le_bytes());
        for (i, s) in &self.streams {
            out.extend_from_slice(&i.to_le_bytes());
            out.extend_from_slice(&(s.as_ref().len() as u64).to_le_bytes());
            out.extend_from_slice(s.as_ref());
        }
        FRAME.seal(&mut out);
        out
    }

    /// Reads the bytes of [`StepValue::to_bytes`], verifying them.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<StepValue<M>, Error> {
        let value = M::STEP.kind;
        if !FRAME.begins(bytes) {
            return Err(Error::Corrupt(CorruptValue::NotAValue { value }));
        }
        let magic = FRAME.magic.len();
        let truncated = || Error::Corrupt(CorruptValue::Truncated { value });
        if bytes.len() < magic + 4 + 1 + TRAILER_BYTES {
            return Err(truncated());
        }
        let version = u32::from_le_bytes(bytes[magic..magic + 4].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(Error::Corrupt(CorruptValue::Version {
                found: version,
                supported: VERSION,
            }));
        }
        let contents = FRAME.contents(bytes).map_err(|e| match e {
            FrameError::Checksum { .. } => Error::Corrupt(CorruptValue::Checksum { value }),
            _ => truncated(),
        })?;
        let mut r = Reader {
            bytes: &contents[4..],
        };
        let kind = r.take(1, "the kind")?[0];
        if kind != M::KIND {
            let found = match kind {
                1 => Some(StepKind::Sign),
                2 => Some(StepKind::Decide),
                _ => None,
            };
            return Err(Error::StepOutputs(StepOutputsError::OtherKind {
                expected: value,
                found,
            }));
        }
        let len = r.u64("the manifest's length")?;
        let manifest: M = serde_json::from_slice(r.take(len, "the manifest")?)
            .map_err(|e| Error::Corrupt(CorruptValue::Manifest { value, error: e }))?;
        let count = r.u32("the stream count")?;
        let mut streams = Vec::with_capacity(count.min(1 << 16) as usize);
        for _ in 0..count {
            let index = r.u32("a stream's index")?;
            let len = r.u64("a stream's length")?;
            let data = r.take(len, "a stream")?;
            streams.push((index, Shared(Arc::new(data.to_vec()))));
        }
        if !r.bytes.is_empty() {
            return Err(Error::Corrupt(CorruptValue::TrailingBytes {
                value,
                bytes: r.bytes.len(),
            }));
        }
        let origin = manifest.value_name();
        StepValue {
            manifest,
            streams,
            origin,
        }
        .checked()
    }

    /// Writes the directory the CLI's step writes (the streams held and the manifest), published
    /// all together.
    pub(crate) fn save(&self, dir: &Path) -> Result<(), Error> {
        let mut paths = RunPaths::new();
        let files = StepFiles::plan::<M>(dir, &self.held(), &mut paths);
        paths.check()?;
        // A value saved again replaces what its step saved there, as a step run again with
        // `--overwrite` does.
        let output = StepOutput::begin::<M>(Some(files), true, &CancelToken::new())?;
        let mut sinks = output.sinks(self.streams.len())?;
        for (sink, (i, s)) in sinks.iter_mut().zip(&self.streams) {
            sink.write_all(s.as_ref())
                .map_err(|e| Error::io(IoOp::Write, M::stream_file(dir, *i), e))?;
        }
        output.finish(sinks, &self.manifest)?;
        Ok(())
    }

    /// Reads a step's output directory: its manifest and the streams it holds (a directory saved
    /// from a part holds some only).
    pub(crate) fn load(dir: &Path) -> Result<StepValue<M>, Error> {
        let manifest: M = read_manifest(dir)?;
        let origin = dir.display().to_string();
        check_format(&manifest, &origin)?;
        let mut streams = Vec::new();
        for i in 0..manifest.streams() {
            let path = M::stream_file(dir, i);
            match neardup_storage::file::read(&path) {
                Ok(bytes) => streams.push((i, Shared(Arc::new(bytes)))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(Error::io(IoOp::Read, path, e));
                }
            }
        }
        StepValue {
            manifest,
            streams,
            origin,
        }
        .checked()
    }
}

/// The files of a step's output directory.
pub(crate) struct StepFiles {
    dir: PathBuf,
    streams: Vec<PathBuf>,
    manifest: PathBuf,
}

impl StepFiles {
    /// The files for streams `indices` and the manifest in `dir`, registered as outputs in
    /// `paths` (which the caller checks).
    pub(crate) fn plan<M: StepManifest>(
        dir: &Path,
        indices: &[u32],
        paths: &mut RunPaths,
    ) -> StepFiles {
        let what = format!("the {} output (-o)", M::STEP.step);
        let files = StepFiles {
            dir: dir.to_path_buf(),
            streams: indices.iter().map(|i| M::stream_file(dir, *i)).collect(),
            manifest: dir.join(STEP_MANIFEST),
        };
        paths.write_step_dir(&what, dir);
        for p in files.streams.iter().chain([&files.manifest]) {
            paths.write_file_checked_later(&what, p);
        }
        files
    }

    /// Refuses, before any work, a directory that holds anything but what this step writes: a
    /// directory that is not empty (the hidden files of this run and of dead runs aside: the
    /// publication has begun, settling what dead runs left) without `overwrite`, and with it a
    /// file that is not this step's earlier output
    /// (its manifest, and the streams that manifest lists and this run writes again), so that a
    /// step replaces nothing but its own earlier output. A prefix on object storage is listed
    /// alike.
    pub(crate) fn check_free<M: StepManifest>(&self, overwrite: bool) -> Result<(), Error> {
        let refused = |path: &Path, kind: &'static str, message: String| {
            Error::Publish(neardup_corpus::WriteError::new(path, kind, message))
        };
        let mut held: Vec<PathBuf> = self
            .held()?
            .into_iter()
            .filter(|p| {
                // This run's reserved names and what dead runs left (settled by the publication's
                // start); a live run's are refused by it (`in_use`).
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default();
                !(name.starts_with('.') && name.contains(".neardup-"))
            })
            .collect();
        held.sort();
        let step = M::STEP.step;
        let Some(first) = held.first() else {
            return Ok(());
        };
        if !overwrite {
            return Err(refused(
                &self.dir,
                "exists",
                format!(
                    "the {step} output directory is not empty (it holds {}{}): pass --overwrite \
                     to replace an earlier `{step}` output there, or choose another directory",
                    first.display(),
                    match held.len() - 1 {
                        0 => String::new(),
                        n => format!(" and {n} more"),
                    }
                ),
            ));
        }
        let earlier: M = read_manifest(&self.dir).map_err(|e| {
            refused(
                &self.manifest,
                "foreign_manifest",
                format!(
                    "--overwrite replaces only an earlier `{step}` output, and this directory \
                     holds none ({e}): choose another directory"
                ),
            )
        })?;
        if earlier.format().0 != M::STEP.format {
            return Err(refused(
                &self.manifest,
                "foreign_manifest",
                format!(
                    "--overwrite replaces only an earlier `{step}` output, and this directory \
                     holds a {} output: choose another directory",
                    earlier.format().0
                ),
            ));
        }
        let listed: Vec<PathBuf> = (0..earlier.streams())
            .map(|i| M::stream_file(&self.dir, i))
            .collect();
        for path in &held {
            if *path == self.manifest {
                continue;
            }
            if !listed.contains(path) {
                return Err(refused(
                    path,
                    "not_ours",
                    format!(
                        "the earlier `{step}` output's manifest does not list this file: \
                         --overwrite replaces only what it lists; move the file away or choose \
                         another directory"
                    ),
                ));
            }
            if !self.streams.contains(path) {
                return Err(refused(
                    path,
                    "not_ours",
                    format!(
                        "the earlier `{step}` output holds this stream and this run would not \
                         write it again, leaving it beside a manifest that does not list it: \
                         remove the directory or choose another one"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every file in the directory (every object below the prefix), named as the step names
    /// its own files: the directory joined with the name.
    fn held(&self) -> Result<Vec<PathBuf>, Error> {
        if let Some(url) = neardup_storage::ObjectUrl::from_path(&self.dir) {
            let listed = neardup_storage::list(&url)
                .map_err(|e| Error::io(IoOp::Read, &self.dir, e.into()))?;
            return Ok(listed
                .into_iter()
                .map(|entry| match url.relative(&entry.url) {
                    Some(name) => self.dir.join(name),
                    None => PathBuf::from(entry.url.to_string()),
                })
                .collect());
        }
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(IoOp::Read, &self.dir, e)),
        };
        entries
            .map(|entry| {
                entry
                    .map(|e| e.path())
                    .map_err(|e| Error::io(IoOp::Read, &self.dir, e))
            })
            .collect()
    }
}

/// Where a step writes its streams: the files of a directory published all together, or memory.
pub(crate) struct StepOutput {
    publication: Publication,
    files: Option<StepFiles>,
}

impl StepOutput {
    /// Begins the output of step `M`: into `files` (their paths checked already), or memory
    /// when `None`. The directory must then hold nothing but what the publication settled (a
    /// dead run's commit is rolled forward or back first) or, with `overwrite`, an earlier
    /// output of the same step ([`StepFiles::check_free`]).
    pub(crate) fn begin<M: StepManifest>(
        files: Option<StepFiles>,
        overwrite: bool,
        cancel: &CancelToken,
    ) -> Result<StepOutput, Error> {
        let publication = Publication::begin(&PublishOptions {
            files: files
                .iter()
                .flat_map(|f| f.streams.iter().chain([&f.manifest]).cloned())
                .collect(),
            cancel: cancel.clone(),
            ..PublishOptions::default()
        })
        .map_err(publish_error)?;
        if let Some(f) = &files {
            f.check_free::<M>(overwrite)?;
        }
        Ok(StepOutput { publication, files })
    }

    /// The publication a step's pass writes into (nothing of its own for a step output).
    pub(crate) fn publication(&self) -> &Publication {
        &self.publication
    }

    /// One sink per stream (`count` of them in memory).
    pub(crate) fn sinks(&self, count: usize) -> Result<Vec<StepSink>, Error> {
        match &self.files {
            Some(f) => f
                .streams
                .iter()
                .map(|p| self.publication.file(p).map(StepSink::file))
                .collect::<Result<Vec<_>, _>>()
                .map_err(publish_error),
            None => Ok((0..count).map(|_| StepSink::memory()).collect()),
        }
    }

    /// Ends the streams; for a directory, writes the manifest and publishes all; in memory,
    /// returns the streams' bytes.
    pub(crate) fn finish(
        self,
        sinks: Vec<StepSink>,
        manifest: &impl Serialize,
    ) -> Result<Vec<Vec<u8>>, Error> {
        let mut streams = Vec::new();
        for sink in sinks {
            let bytes = sink.finish().map_err(|e| Error::Io {
                op: IoOp::Write,
                target: self
                    .files
                    .as_ref()
                    .map_or(IoTarget::Named("memory"), |f| IoTarget::Path(f.dir.clone())),
                error: e,
            })?;
            streams.extend(bytes);
        }
        if let Some(f) = &self.files {
            save_manifest_to(
                self.publication.file(&f.manifest).map_err(publish_error)?,
                manifest,
            )?;
            self.publication.commit().map_err(publish_error)?;
        }
        Ok(streams)
    }
}

/// A step's output given to the next step: a directory the step wrote, or a value in memory
/// (mixed freely in one call).
#[derive(Clone, Copy, Debug)]
pub enum StepInput<'a, V> {
    /// A directory written by the step (or by the value's `save`).
    Dir(&'a Path),
    /// A value made by the step in memory, or read from bytes.
    Value(&'a V),
}

impl<'a, V> From<&'a Path> for StepInput<'a, V> {
    fn from(dir: &'a Path) -> Self {
        StepInput::Dir(dir)
    }
}

impl<'a, V> From<&'a PathBuf> for StepInput<'a, V> {
    fn from(dir: &'a PathBuf) -> Self {
        StepInput::Dir(dir)
    }
}

impl<'a> From<&'a SignedShard> for StepInput<'a, SignedShard> {
    fn from(v: &'a SignedShard) -> Self {
        StepInput::Value(v)
    }
}

impl<'a> From<&'a DecidedGroup> for StepInput<'a, DecidedGroup> {
    fn from(v: &'a DecidedGroup) -> Self {
        StepInput::Value(v)
    }
}

/// Signed samples given to `decide`: `sign` output directories or [`SignedShard`] values.
pub type SignedInput<'a> = StepInput<'a, SignedShard>;
/// Decisions given to `write`: `decide` output directories or [`DecidedGroup`] values.
pub type DecidedInput<'a> = StepInput<'a, DecidedGroup>;

/// The value behind a [`StepInput`].
pub(crate) trait HoldsStep<M> {
    fn step_value(&self) -> &StepValue<M>;
}

impl HoldsStep<SignManifest> for SignedShard {
    fn step_value(&self) -> &StepValue<SignManifest> {
        &self.0
    }
}

impl HoldsStep<DecideManifest> for DecidedGroup {
    fn step_value(&self) -> &StepValue<DecideManifest> {
        &self.0
    }
}

/// One input of a step, its manifest read and checked: the same checks whether it came as a
/// directory or a value.
pub(crate) struct Given<'a, M: StepManifest> {
    /// How messages name it.
    pub origin: String,
    pub manifest: Cow<'a, M>,
    from: Source<'a, M>,
}

/// Where a [`Given`] input's streams are.
enum Source<'a, M> {
    Dir(&'a Path),
    Value(&'a StepValue<M>),
}

impl<'a, M: StepManifest> Given<'a, M> {
    /// Reads the input's manifest and checks it was made with this hot-key file and settings.
    pub(crate) fn read<V: HoldsStep<M>>(
        input: &StepInput<'a, V>,
        fingerprint: u64,
        settings: &DecideSettings,
    ) -> Result<Given<'a, M>, Error> {
        let given = match *input {
            StepInput::Dir(dir) => {
                let origin = dir.display().to_string();
                let manifest: M = read_manifest(dir)?;
                check_format(&manifest, &origin)?;
                Given {
                    origin,
                    manifest: Cow::Owned(manifest),
                    from: Source::Dir(dir),
                }
            }
            StepInput::Value(v) => {
                let v = v.step_value();
                Given {
                    origin: v.origin.clone(),
                    manifest: Cow::Borrowed(&v.manifest),
                    from: Source::Value(v),
                }
            }
        };
        check_made_for(&*given.manifest, &given.origin, fingerprint, settings)?;
        Ok(given)
    }

    /// Registers what the step reads of the input: the file of stream `index` and the manifest
    /// (directories only), and the corpus files the manifest names (the run's, which a later
    /// step reads again).
    pub(crate) fn read_paths(&self, index: u32, what: &str, paths: &mut RunPaths) {
        if let Source::Dir(dir) = self.from {
            paths
                .read_file(what, &M::stream_file(dir, index))
                .read_file(what, &dir.join(STEP_MANIFEST));
        }
        for file in self.manifest.input_files() {
            paths.read_file("the input file", Path::new(file));
        }
    }

    /// Checks that stream `index` is there to read (a value may hold a part only).
    pub(crate) fn check_holds(&self, index: u32, wanted_by: &str) -> Result<(), Error> {
        match self.from {
            Source::Value(v) if v.stream(index).is_none() => Err(v.not_held(index, wanted_by)),
            _ => Ok(()),
        }
    }

    /// Opens stream `index`; returns it with its name for messages.
    pub(crate) fn open(
        &self,
        index: u32,
        wanted_by: &str,
    ) -> Result<(String, RecordReader<Box<dyn Read + Send>>), Error> {
        let (name, reader): (String, Box<dyn Read + Send>) = match self.from {
            Source::Dir(dir) => {
                let path = M::stream_file(dir, index);
                let open = || {
                    neardup_storage::file::open(&path).map_err(|e| Error::io(IoOp::Read, &path, e))
                };
                // A file is verified whole before any record of it is used (a value's bytes were
                // when they were read).
                let damaged = |e| Error::Io {
                    op: IoOp::OpenStream,
                    target: IoTarget::Stream(path.display().to_string()),
                    error: e,
                };
                RecordReader::new(std::io::BufReader::with_capacity(1 << 20, open()?))
                    .and_then(RecordReader::verify)
                    .map_err(damaged)?;
                let file = open()?;
                (
                    path.display().to_string(),
                    Box::new(std::io::BufReader::with_capacity(1 << 20, file)),
                )
            }
            Source::Value(v) => {
                let stream = v
                    .stream(index)
                    .ok_or_else(|| v.not_held(index, wanted_by))?;
                (
                    format!("{} ({} {index}'s stream)", v.origin, M::STEP.unit),
                    Box::new(Cursor::new(stream.clone())),
                )
            }
        };
        let reader = RecordReader::new(reader).map_err(|e| Error::Io {
            op: IoOp::OpenStream,
            target: IoTarget::Stream(name.clone()),
            error: e,
        })?;
        Ok((name, reader))
    }
}

/// One shard's `sign` output as a value: the sign manifest and one stream of signed samples per
/// group of the plan (or, for a part made by [`SignedShard::group`], one group's only).
///
/// `save`/`load` write and read the directory `neardup sign -o` writes; `to_bytes`/`from_bytes`
/// the same content as one checksummed buffer. The bytes of a value loaded from a directory are
/// those of the value `sign` made in memory.
#[derive(Clone, PartialEq)]
pub struct SignedShard(pub(crate) StepValue<SignManifest>);

impl std::fmt::Debug for SignedShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedShard")
            .field("shard", &self.0.manifest.place.shard)
            .field("groups", &self.0.held())
            .field("bytes", &self.0.stream_bytes())
            .finish()
    }
}

impl SignedShard {
    /// Its manifest (shard place, files, groups, counts, settings, hot-key fingerprint).
    pub fn manifest(&self) -> &SignManifest {
        &self.0.manifest
    }
    /// The groups whose streams it holds (every group of the plan, unless a part).
    pub fn groups_held(&self) -> Vec<u32> {
        self.0.held()
    }
    /// The stream of signed samples of group `group`, when held (the bytes of
    /// `group-NNNNN.bin`).
    pub fn stream(&self, group: u32) -> Option<&[u8]> {
        self.0.stream(group).map(AsRef::as_ref)
    }
    /// Bytes of the streams held.
    pub fn stream_bytes(&self) -> u64 {
        self.0.stream_bytes()
    }
    /// Its part for group `group` (the stream is shared, not copied): all a `decide` of that
    /// group needs from this shard. An error when the group is not held.
    pub fn group(&self, group: u32) -> Result<SignedShard, Error> {
        self.0.only(group).map(SignedShard)
    }
    /// The value's bytes (see the module docs and `docs/formats.md`).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.to_bytes()
    }
    /// Reads the bytes of [`SignedShard::to_bytes`], verifying their checksum and manifest.
    pub fn from_bytes(bytes: &[u8]) -> Result<SignedShard, Error> {
        StepValue::from_bytes(bytes).map(SignedShard)
    }
    /// Writes the directory `neardup sign -o dir` writes (a part: the manifest and its group's
    /// stream), published all or nothing, into a directory that is missing, empty or holds an
    /// earlier sign output (as `neardup sign --overwrite`: only what its manifest lists, each
    /// written again).
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        self.0.save(dir)
    }
    /// Reads a `sign` output directory (the group streams present in it).
    pub fn load(dir: &Path) -> Result<SignedShard, Error> {
        StepValue::load(dir).map(SignedShard)
    }
}

/// One group's `decide` output as a value: the decide manifest and one stream of decisions per
/// shard (or, for a part made by [`DecidedGroup::shard`], one shard's only). Saved, loaded and
/// turned into bytes like [`SignedShard`].
#[derive(Clone, PartialEq)]
pub struct DecidedGroup(pub(crate) StepValue<DecideManifest>);

impl std::fmt::Debug for DecidedGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecidedGroup")
            .field("group", &self.0.manifest.group)
            .field("shards", &self.0.held())
            .field("bytes", &self.0.stream_bytes())
            .finish()
    }
}

impl DecidedGroup {
    /// Its manifest (group, shards, decisions per shard, the decision core's counters).
    pub fn manifest(&self) -> &DecideManifest {
        &self.0.manifest
    }
    /// The shards (by place in shard order) whose streams it holds.
    pub fn shards_held(&self) -> Vec<u32> {
        self.0.held()
    }
    /// The stream of decisions for the shard at place `place`, when held (the bytes of
    /// `shard-NNNNN.bin`).
    pub fn stream(&self, place: u32) -> Option<&[u8]> {
        self.0.stream(place).map(AsRef::as_ref)
    }
    /// Bytes of the streams held.
    pub fn stream_bytes(&self) -> u64 {
        self.0.stream_bytes()
    }
    /// Its part for the shard at place `place` in shard order (shared, not copied): all a
    /// `write` of that shard needs from this group.
    pub fn shard(&self, place: u32) -> Result<DecidedGroup, Error> {
        self.0.only(place).map(DecidedGroup)
    }
    /// The value's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.to_bytes()
    }
    /// Reads the bytes of [`DecidedGroup::to_bytes`], verifying them.
    pub fn from_bytes(bytes: &[u8]) -> Result<DecidedGroup, Error> {
        StepValue::from_bytes(bytes).map(DecidedGroup)
    }
    /// Writes the directory `neardup decide -o dir` writes, published all or nothing, into a
    /// directory that is missing, empty or holds an earlier decide output (as `neardup decide
    /// --overwrite`: only what its manifest lists, each written again).
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        self.0.save(dir)
    }
    /// Reads a `decide` output directory.
    pub fn load(dir: &Path) -> Result<DecidedGroup, Error> {
        StepValue::load(dir).map(DecidedGroup)
    }
}

impl crate::step::StepValue for SignedShard {
    fn save(&self, dir: &Path) -> Result<(), Error> {
        SignedShard::save(self, dir)
    }
    fn load(dir: &Path) -> Result<Self, Error> {
        SignedShard::load(dir)
    }
    fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        Ok(SignedShard::to_bytes(self))
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        SignedShard::from_bytes(bytes)
    }
}

impl crate::step::StepValue for DecidedGroup {
    fn save(&self, dir: &Path) -> Result<(), Error> {
        DecidedGroup::save(self, dir)
    }
    fn load(dir: &Path) -> Result<Self, Error> {
        DecidedGroup::load(dir)
    }
    fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        Ok(DecidedGroup::to_bytes(self))
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        DecidedGroup::from_bytes(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup_dedup::SignedCounts;
    use neardup_keys::ShardPlace;

    fn manifest(bytes: Vec<u64>) -> SignManifest {
        SignManifest {
            format: "neardup-sign".into(),
            format_version: STEP_FORMAT_VERSION,
            hot: 7,
            place: ShardPlace {
                shard: 3,
                index: 1,
                shards: 2,
                row_base: 10,
                file_base: 1,
                rows: 5,
                files: 1,
            },
            files: vec!["a.jsonl".into()],
            groups: bytes.len() as u32,
            num_perm: 128,
            columns: 9,
            shingles: true,
            settings: DecideSettings {
                threshold: 0.8,
                max_reps: Some(2),
                verify: neardup_dedup::Verify::Jaccard,
                prefer: neardup_dedup::Prefer::First,
                against: None,
            },
            signed: SignedCounts {
                samples: vec![1; bytes.len()],
                copies_by_hash: 0,
            },
            bytes,
        }
    }

    /// Bytes of a value holding `streams`, framed and checksummed correctly whatever they hold:
    /// what only a bug or a forger makes, which must still be refused cleanly.
    fn framed(m: &SignManifest, streams: &[(u32, &[u8])]) -> Vec<u8> {
        let manifest = serde_json::to_vec(m).unwrap();
        let mut out = Vec::new();
        out.extend_from_slice(FRAME.magic);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(SignManifest::KIND);
        out.extend_from_slice(&(manifest.len() as u64).to_le_bytes());
        out.extend_from_slice(&manifest);
        out.extend_from_slice(&(streams.len() as u32).to_le_bytes());
        for (i, s) in streams {
            out.extend_from_slice(&i.to_le_bytes());
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s);
        }
        let sum = xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out.extend_from_slice(FRAME.end);
        out
    }

    fn refused(bytes: &[u8]) -> String {
        match StepValue::<SignManifest>::from_bytes(bytes) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn well_framed_bytes_that_disagree_with_their_manifest_are_refused() {
        let m = manifest(vec![3, 2]);
        let good = framed(&m, &[(0, b"abc"), (1, b"de")]);
        let v = StepValue::<SignManifest>::from_bytes(&good).unwrap();
        assert_eq!(v.to_bytes(), good);
        assert_eq!(v.origin, "the signed value of shard 3");
        let part = v.only(1).unwrap();
        assert_eq!(part.held(), vec![1]);
        assert!(StepValue::<SignManifest>::from_bytes(&part.to_bytes()).unwrap() == part);

        let m2 = refused(&framed(&m, &[(0, b"abc"), (2, b"de")]));
        assert!(m2.contains("holds a stream for group 2"), "{m2}");
        let m2 = refused(&framed(&m, &[(1, b"de"), (0, b"abc")]));
        assert!(m2.contains("each once"), "{m2}");
        let m2 = refused(&framed(&m, &[(0, b"abc"), (0, b"abc")]));
        assert!(m2.contains("each once"), "{m2}");
        let m2 = refused(&framed(&m, &[(0, b"abcd"), (1, b"de")]));
        assert!(
            m2.contains("the stream of group 0 holds 4 bytes, and the manifest says 3"),
            "{m2}"
        );
        let m2 = refused(&framed(&m, &[]));
        assert!(m2.contains("holds none of its streams"), "{m2}");
        let mut foreign = m.clone();
        foreign.format = "neardup-decide".into();
        let m2 = refused(&framed(&foreign, &[(0, b"abc")]));
        assert!(m2.contains("not a `neardup sign` output"), "{m2}");

        // A length running past the end, with a valid checksum: refused, no panic.
        let mut long = framed(&m, &[(0, b"abc")]);
        let body = long.len() - 16;
        let at = body - 3 - 8;
        long[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let sum = xxh3_64(&long[..body]);
        long[body..body + 8].copy_from_slice(&sum.to_le_bytes());
        let m2 = refused(&long);
        assert!(m2.contains("a stream runs past their end"), "{m2}");

        // Bytes of the other kind, and of another version.
        let mut other = good.clone();
        other[12] = DecideManifest::KIND;
        let body = other.len() - 16;
        let sum = xxh3_64(&other[..body]);
        other[body..body + 8].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(
            refused(&other),
            "these bytes are a DecidedGroup, not a SignedShard"
        );
        let mut newer = good.clone();
        newer[8] = 2;
        assert!(refused(&newer).contains("format version 2"));
    }
}
