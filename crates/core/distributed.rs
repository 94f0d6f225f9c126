//! Stage 2 on many machines: the `sign`, `decide` and `write` steps over files, for schedulers
//! and the CLI (see `neardup_dedup`'s `distributed` module for the design, and
//! `docs/formats.md` for the directories they write).
//!
//! ```text
//! neardup keys SHARD_INPUTS... --shard I -o keys-I.ndk
//! neardup hot keys-*.ndk --groups G -o hot.ndh
//! neardup sign keys-I.ndk --hot hot.ndh -o sig-I                          # per shard
//! neardup decide sig-0 sig-1 ... --hot hot.ndh --group g -o decided-g      # per group
//! neardup write keys-I.ndk --hot hot.ndh --decided decided-0 ... -o OUT --decisions d-I.jsonl
//! ```
//!
//! The decisions of the `write` steps, concatenated in shard order, are byte-identical to those
//! of one `neardup dedup` over the shards in order, and their data files to its outputs.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use neardup_corpus::{InputFile, Publication, PublishOptions};
use neardup_dedup::{
    DecideShape, DecidedMerge, DedupStats, DeduperStats, RecordReader, RecordWriter, SignedCounts,
    SignedShape, StepSink, decide_group, run_sign, run_write, signed_shape,
};
use neardup_keys::{HotKeys, HotMask, ShardPlace};
use serde::{Deserialize, Serialize};

use crate::Config;
use crate::error::Error;
use crate::paths::RunPaths;
use crate::pipeline::{
    Report, RunControl, apply_config, check_hot_layout, keys_config, publish_error, save_json_to,
    wrong_tables,
};

/// The name of the manifest in a `sign` or `decide` output directory.
pub const STEP_MANIFEST: &str = "manifest.json";

/// The settings the decisions depend on, recorded by each step so that the next one runs with
/// the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecideSettings {
    /// `--threshold`.
    pub threshold: f64,
    /// `--max-reps` (`None`: unbounded).
    pub max_reps: Option<usize>,
    /// `--verify`.
    pub verify: neardup_dedup::Verify,
}

impl DecideSettings {
    fn of(config: &Config) -> DecideSettings {
        let d = config.dedup_config();
        DecideSettings {
            threshold: d.threshold,
            max_reps: d.max_reps,
            verify: d.verify,
        }
    }

    /// Errors naming each setting that differs (`theirs` was recorded by `step`).
    fn check(&self, theirs: &DecideSettings, step: &str, what: &Path) -> Result<(), Error> {
        let mut differ = Vec::new();
        if self.threshold != theirs.threshold {
            differ.push(format!(
                "--threshold: {} here, {} there",
                self.threshold, theirs.threshold
            ));
        }
        if self.max_reps != theirs.max_reps {
            let show = |m: Option<usize>| m.map_or("unbounded".to_string(), |m| m.to_string());
            differ.push(format!(
                "--max-reps: {} here, {} there",
                show(self.max_reps),
                show(theirs.max_reps)
            ));
        }
        if self.verify != theirs.verify {
            differ.push(
                format!(
                    "--verify: {:?} here, {:?} there",
                    self.verify, theirs.verify
                )
                .to_lowercase(),
            );
        }
        if differ.is_empty() {
            return Ok(());
        }
        Err(Error::Usage(format!(
            "{} was made by `{step}` with other decision settings ({}): give every step the same \
             --threshold, --max-reps and --verify",
            what.display(),
            differ.join("; ")
        )))
    }
}

/// The manifest of a `sign` output directory (`sig-I/manifest.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignManifest {
    /// Always `"neardup-sign"`.
    pub format: String,
    /// Format version (2).
    pub format_version: u32,
    /// [`HotKeys::fingerprint`] of the hot-key file it was made with.
    pub hot: u64,
    /// The shard and where it sits among all shards.
    pub place: ShardPlace,
    /// The shard's input files, as decisions name them.
    pub files: Vec<String>,
    /// Groups (one stream file each, `group-NNNNN.bin`).
    pub groups: u32,
    /// Signature width.
    pub num_perm: usize,
    /// Keys per row.
    pub columns: usize,
    /// Whether the samples carry what exact verification compares: their texts, from which
    /// decide builds shingle sets (the name is from version 1, which carried the sets).
    pub shingles: bool,
    /// The decision settings it was made for.
    pub settings: DecideSettings,
    /// Signed samples per group, and copies sent by hash alone.
    pub signed: SignedCounts,
    /// Bytes of each group's stream.
    pub bytes: Vec<u64>,
}

/// The manifest of a `decide` output directory (`decided-g/manifest.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecideManifest {
    /// Always `"neardup-decide"`.
    pub format: String,
    /// Format version (2).
    pub format_version: u32,
    /// [`HotKeys::fingerprint`] of the hot-key file.
    pub hot: u64,
    /// The group decided.
    pub group: u32,
    /// Groups of the plan.
    pub groups: u32,
    /// Shards (one stream file each, `shard-NNNNN.bin`, by place in shard order).
    pub shards: u32,
    /// Every shard's input files, in global order, as decisions name them.
    pub files: Vec<String>,
    /// The decision settings used.
    pub settings: DecideSettings,
    /// Decisions per shard.
    pub decided: Vec<u64>,
    /// The decision core's counters.
    pub deduper: DeduperStats,
}

/// What `sign` did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SignReport {
    /// The manifest written.
    pub manifest: SignManifest,
    /// The pass's statistics (records read, hot and cold samples).
    pub stage2: DedupStats,
}

/// What `decide` did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DecideReport {
    /// The manifest written.
    pub manifest: DecideManifest,
}

fn group_file(dir: &Path, group: u32) -> PathBuf {
    dir.join(format!("group-{group:05}.bin"))
}

fn shard_file(dir: &Path, place: u32) -> PathBuf {
    dir.join(format!("shard-{place:05}.bin"))
}

fn read_manifest<T: for<'de> Deserialize<'de>>(dir: &Path, what: &str) -> Result<T, Error> {
    let path = dir.join(STEP_MANIFEST);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Usage(format!(
            "{}: not {what} ({} cannot be read: {e})",
            dir.display(),
            path.display()
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "{}: not {what} ({} is not its manifest: {e})",
            dir.display(),
            path.display()
        ))
    })
}

/// What the manifests of the `sign` and `decide` outputs have in common, checked by the next step.
trait StepManifest: for<'de> Deserialize<'de> {
    fn format(&self) -> (&str, u32);
    fn hot(&self) -> u64;
    fn settings(&self) -> &DecideSettings;
}

impl StepManifest for SignManifest {
    fn format(&self) -> (&str, u32) {
        (&self.format, self.format_version)
    }
    fn hot(&self) -> u64 {
        self.hot
    }
    fn settings(&self) -> &DecideSettings {
        &self.settings
    }
}

impl StepManifest for DecideManifest {
    fn format(&self) -> (&str, u32) {
        (&self.format, self.format_version)
    }
    fn hot(&self) -> u64 {
        self.hot
    }
    fn settings(&self) -> &DecideSettings {
        &self.settings
    }
}

/// How a step's outputs are named in messages, and who reads them next.
struct StepNames {
    command: &'static str,
    format: &'static str,
    made: &'static str,
    reader: &'static str,
    hot_from: &'static str,
}

/// The version of the sign and decide outputs (2: signed samples carry texts instead of shingle
/// sets, and no keys; the streams' magic says it too).
const STEP_FORMAT_VERSION: u32 = 2;

const SIGN_STEP: StepNames = StepNames {
    command: "neardup sign",
    format: "neardup-sign",
    made: "signed",
    reader: "decide",
    hot_from: "`sign`",
};

const DECIDE_STEP: StepNames = StepNames {
    command: "neardup decide",
    format: "neardup-decide",
    made: "decided",
    reader: "write",
    hot_from: "`sign` and `decide`",
};

/// Reads the manifest of a step's output directory and checks that it is that step's, made with
/// this hot-key file and these decision settings.
fn read_step_manifest<T: StepManifest>(
    dir: &Path,
    step: &StepNames,
    fingerprint: u64,
    settings: &DecideSettings,
) -> Result<T, Error> {
    let m: T = read_manifest(dir, &format!("a `{}` output", step.command))?;
    if m.format() != (step.format, STEP_FORMAT_VERSION) {
        return Err(Error::Usage(format!(
            "{}: not a `{}` output of this version",
            dir.display(),
            step.command
        )));
    }
    if m.hot() != fingerprint {
        return Err(Error::Usage(format!(
            "{} was {} with another hot-key file than the one given (--hot): give `{}` the \
             hot-key file {} used",
            dir.display(),
            step.made,
            step.reader,
            step.hot_from
        )));
    }
    settings.check(m.settings(), step.command, dir)?;
    Ok(m)
}

fn open_stream(path: &Path) -> Result<RecordReader<Box<dyn Read + Send>>, Error> {
    let file =
        File::open(path).map_err(|e| Error::Run(format!("cannot read {}: {e}", path.display())))?;
    let reader: Box<dyn Read + Send> = Box::new(BufReader::with_capacity(1 << 20, file));
    RecordReader::new(reader).map_err(|e| Error::Run(format!("{}: {e}", path.display())))
}

fn step_error(e: neardup_dedup::DedupError) -> Error {
    match e {
        neardup_dedup::DedupError::Step(m) => Error::Usage(m),
        other => Error::Dedup(other),
    }
}

/// The `sign` step: re-reads the inputs of the shard whose key table is `table` and writes, for
/// each hot sample, what deciding it needs into `out` (a directory: one stream per group of
/// `hot`'s plan and a manifest), published all together at the end. `config` carries the
/// settings `keys` used and the decision settings (`--verify` decides whether shingle sets are
/// carried).
pub fn sign_shard(
    config: &Config,
    table: &Path,
    hot: &HotKeys,
    out: &Path,
    control: &RunControl,
) -> Result<SignReport, Error> {
    config.validate()?;
    check_hot_layout(config, hot)?;
    let fingerprint = hot.fingerprint()?;
    let (mask, files, place) = HotMask::for_shard(table, hot).map_err(wrong_tables)?;
    let inputs: Vec<InputFile> = files.iter().map(|f| f.input.clone()).collect();
    let groups = hot.groups();
    let stream_paths: Vec<PathBuf> = (0..groups).map(|g| group_file(out, g)).collect();
    let manifest_path = out.join(STEP_MANIFEST);
    let mut paths = RunPaths::new();
    paths.read_inputs(&inputs).read_file("the key table", table);
    for p in stream_paths.iter().chain([&manifest_path]) {
        paths.write_file("the sign output (-o)", p);
    }
    paths.check()?;
    let publication = Publication::begin(&PublishOptions {
        files: stream_paths
            .iter()
            .cloned()
            .chain([manifest_path.clone()])
            .collect(),
        cancel: control.cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(publish_error)?;
    let sinks = stream_paths
        .iter()
        .map(|p| publication.file(p).map(StepSink::file))
        .collect::<Result<Vec<_>, _>>()
        .map_err(publish_error)?;
    let mut cfg = apply_config(config)?;
    cfg.output = None;
    cfg.decisions = None;
    cfg.progress = control.stage2.clone();
    cfg.cancel = control.cancel.clone();
    let shape = signed_shape(&cfg);
    let (sinks, signed, stage2) = run_sign(&files, &mask, &cfg, &place, hot, sinks, &publication)?;
    let bytes = sinks.iter().map(StepSink::bytes).collect();
    for sink in sinks {
        sink.finish()
            .map_err(|e| Error::Run(format!("cannot write {}: {e}", out.display())))?;
    }
    let manifest = SignManifest {
        format: "neardup-sign".into(),
        format_version: STEP_FORMAT_VERSION,
        hot: fingerprint,
        place,
        files: files
            .iter()
            .map(|f| f.input.path.display().to_string())
            .collect(),
        groups,
        num_perm: shape.num_perm,
        columns: shape.columns,
        shingles: shape.texts,
        settings: DecideSettings::of(config),
        signed,
        bytes,
    };
    save_json_to(
        publication.file(&manifest_path).map_err(publish_error)?,
        &manifest,
    )?;
    publication.commit().map_err(publish_error)?;
    Ok(SignReport { manifest, stage2 })
}

/// The `decide` step: reads group `group`'s streams from the `sign` outputs of every shard
/// (`sig_dirs`, in any order; each shard exactly once), decides them in global row order with
/// the decision core of a one-process run, and writes the decisions into `out` (one stream per
/// shard and a manifest). Opens no input file.
pub fn decide_group_dirs(
    config: &Config,
    sig_dirs: &[PathBuf],
    hot: &HotKeys,
    group: u32,
    out: &Path,
    control: &RunControl,
) -> Result<DecideReport, Error> {
    config.validate()?;
    check_hot_layout(config, hot)?;
    let fingerprint = hot.fingerprint()?;
    let groups = hot.groups();
    if group >= groups {
        return Err(Error::Usage(format!(
            "--group {group} is out of range: the hot-key file's plan has {groups} group{} \
             (0 to {})",
            if groups == 1 { "" } else { "s" },
            groups - 1
        )));
    }
    let shards = hot.tables().map_or(0, |t| t.len()) as u32;
    let settings = DecideSettings::of(config);
    let mut manifests: Vec<(PathBuf, SignManifest)> = Vec::new();
    for dir in sig_dirs {
        let m: SignManifest = read_step_manifest(dir, &SIGN_STEP, fingerprint, &settings)?;
        if let Some((other, _)) = manifests
            .iter()
            .find(|(_, o)| o.place.index == m.place.index)
        {
            return Err(Error::Usage(format!(
                "{} and {} are both the sign output of shard {}: give each shard's once",
                other.display(),
                dir.display(),
                m.place.shard
            )));
        }
        manifests.push((dir.clone(), m));
    }
    manifests.sort_by_key(|(_, m)| m.place.index);
    if manifests.len() as u32 != shards {
        let given: Vec<u32> = manifests.iter().map(|(_, m)| m.place.shard).collect();
        let missing: Vec<String> = hot
            .tables()
            .unwrap_or(&[])
            .iter()
            .filter(|t| !given.contains(&t.shard))
            .map(|t| t.shard.to_string())
            .collect();
        return Err(Error::Usage(format!(
            "the hot keys were counted from {shards} shards, and the sign outputs of shard{} {} \
             are missing: `decide` needs every shard's sign output",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        )));
    }
    let first = &manifests[0].1;
    let shape = SignedShape {
        num_perm: first.num_perm,
        columns: first.columns,
        texts: first.shingles,
    };
    let mut files = Vec::new();
    for (dir, m) in &manifests {
        if (m.num_perm, m.columns, m.shingles) != (shape.num_perm, shape.columns, shape.texts) {
            return Err(Error::Usage(format!(
                "{}: signed with other settings than {}",
                dir.display(),
                manifests[0].0.display()
            )));
        }
        files.extend(m.files.iter().cloned());
    }
    let stream_paths: Vec<PathBuf> = (0..shards).map(|s| shard_file(out, s)).collect();
    let manifest_path = out.join(STEP_MANIFEST);
    let mut paths = RunPaths::new();
    for (dir, _) in &manifests {
        paths.read_file("the sign output", &group_file(dir, group));
    }
    for p in stream_paths.iter().chain([&manifest_path]) {
        paths.write_file("the decide output (-o)", p);
    }
    paths.check()?;
    let signed = manifests
        .iter()
        .map(|(dir, _)| {
            let path = group_file(dir, group);
            open_stream(&path).map(|r| (path.display().to_string(), r))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let publication = Publication::begin(&PublishOptions {
        files: stream_paths
            .iter()
            .cloned()
            .chain([manifest_path.clone()])
            .collect(),
        cancel: control.cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(publish_error)?;
    let mut outs = stream_paths
        .iter()
        .map(|p| {
            publication.file(p).map_err(publish_error).and_then(|f| {
                RecordWriter::new(StepSink::file(f))
                    .map_err(|e| Error::Run(format!("cannot write {}: {e}", p.display())))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let k = keys_config(config)?;
    let sketch = DecideShape {
        sketcher: k.sketcher,
        rule: k.rule,
    };
    let (deduper, decided) = decide_group(
        signed,
        shape,
        &config.dedup_config(),
        &sketch,
        &mut outs,
        &control.cancel,
    )
    .map_err(step_error)?;
    for w in outs {
        w.finish()
            .and_then(StepSink::finish)
            .map_err(|e| Error::Run(format!("cannot write {}: {e}", out.display())))?;
    }
    let manifest = DecideManifest {
        format: "neardup-decide".into(),
        format_version: STEP_FORMAT_VERSION,
        hot: fingerprint,
        group,
        groups,
        shards,
        files,
        settings,
        decided,
        deduper,
    };
    save_json_to(
        publication.file(&manifest_path).map_err(publish_error)?,
        &manifest,
    )?;
    publication.commit().map_err(publish_error)?;
    Ok(DecideReport { manifest })
}

/// The manifest name a `write` step publishes its files under in a shared output directory.
pub fn write_manifest_name(place: &ShardPlace) -> String {
    format!("_SUCCESS.shard-{:05}", place.index)
}

/// The `write` step: re-reads the inputs of the shard whose key table is `table`, and writes its
/// part of the filtered dataset (into the shared directory `config.output.dir`, published under
/// its own manifest) and its decisions (`config.output.decisions`), the hot samples' verdicts
/// taken from `decided_dirs` (the `decide` outputs of every group, in any order).
pub fn write_shard(
    config: &Config,
    table: &Path,
    hot: &HotKeys,
    decided_dirs: &[PathBuf],
    control: &RunControl,
) -> Result<Report, Error> {
    config.validate()?;
    check_hot_layout(config, hot)?;
    let fingerprint = hot.fingerprint()?;
    let (mask, files, place) = HotMask::for_shard(table, hot).map_err(wrong_tables)?;
    let inputs: Vec<InputFile> = files.iter().map(|f| f.input.clone()).collect();
    let groups = hot.groups();
    let settings = DecideSettings::of(config);
    let mut manifests: Vec<(PathBuf, DecideManifest)> = Vec::new();
    for dir in decided_dirs {
        let m: DecideManifest = read_step_manifest(dir, &DECIDE_STEP, fingerprint, &settings)?;
        if let Some((other, _)) = manifests.iter().find(|(_, o)| o.group == m.group) {
            return Err(Error::Usage(format!(
                "{} and {} both decided group {}: give each group's decide output once",
                other.display(),
                dir.display(),
                m.group
            )));
        }
        manifests.push((dir.clone(), m));
    }
    manifests.sort_by_key(|(_, m)| m.group);
    if manifests.len() as u32 != groups {
        let missing: Vec<String> = (0..groups)
            .filter(|g| !manifests.iter().any(|(_, m)| m.group == *g))
            .map(|g| g.to_string())
            .collect();
        return Err(Error::Usage(format!(
            "the plan has {groups} group{}, and the decide outputs of group{} {} are missing: \
             `write` needs every group's (--decided decided-0 … decided-{})",
            if groups == 1 { "" } else { "s" },
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            groups - 1
        )));
    }
    let names = manifests[0].1.files.clone();
    let shard_names: Vec<String> = inputs
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    let base = place.file_base as usize;
    if names.get(base..base + shard_names.len()) != Some(&shard_names[..]) {
        return Err(Error::Usage(format!(
            "{}: the decided files name other input files for shard {} than its key table \
             {}: were the inputs moved or renamed after `sign`?",
            manifests[0].0.display(),
            place.shard,
            table.display()
        )));
    }
    let mut paths = RunPaths::new();
    paths.read_inputs(&inputs).read_file("the key table", table);
    for (dir, _) in &manifests {
        paths.read_file("the decide output", &shard_file(dir, place.index));
    }
    paths.write_config_outputs(config, &inputs);
    paths.check()?;
    paths.prepare()?;
    let streams = manifests
        .iter()
        .map(|(dir, _)| {
            let path = shard_file(dir, place.index);
            open_stream(&path).map(|r| (path.display().to_string(), r))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let merge = DecidedMerge::new(streams).map_err(step_error)?;
    let publication = Publication::begin(&PublishOptions {
        output: config
            .output
            .dir
            .as_ref()
            .map(|dir| neardup_corpus::OutputOptions {
                dir: dir.clone(),
                overwrite: config.output.overwrite,
                max_output_bytes: config.output.max_output_bytes,
            }),
        manifest: write_manifest_name(&place),
        shared_output: true,
        outputs: inputs.iter().map(|f| f.relative.clone()).collect(),
        decisions: config.output.decisions.clone(),
        report: config.output.report.clone(),
        cancel: control.cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(publish_error)?;
    let mut cfg = apply_config(config)?;
    cfg.progress = control.stage2.clone();
    cfg.cancel = control.cancel.clone();
    let stage2 = run_write(
        &files,
        &mask,
        &cfg,
        &place,
        &names,
        merge,
        &publication,
        &mut |_| {},
    )
    .map_err(step_error)?;
    let report = Report::new(config, &inputs, Vec::new(), None, stage2);
    if let Some(p) = &config.output.report {
        report.save_to(publication.file(p).map_err(publish_error)?)?;
    }
    publication.commit().map_err(publish_error)?;
    Ok(report)
}
