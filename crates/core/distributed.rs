//! Stage 2 on many machines: the `sign`, `decide` and `write` steps, for schedulers and the CLI
//! (see `neardup_dedup`'s `distributed` module for the design, and `docs/formats.md` for the
//! directories and bytes they write).
//!
//! [`SignStep`] and [`DecideStep`] are [`Step`]s: each has one implementation, whose output goes
//! to memory ([`Step::run`]: a [`SignedShard`], a [`DecidedGroup`]) or to a directory (the CLI's
//! form: [`Step::write`]); their inputs are directories or values, mixed ([`StepInput`]), checked
//! alike and named in messages by their path or as the value they are. [`WriteStep`] ends the
//! run: it writes the shard's part of the dataset (`config.output`). `sign` and `write` take the
//! shard's key table as a file or in memory ([`TableInput`]).
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

use std::path::{Path, PathBuf};

use neardup_corpus::{InputFile, Publication, PublishOptions};
use neardup_dedup::{
    DecideShape, DecidedMerge, DedupStats, GroupDecided, RecordWriter, SignedShape, StepSink,
    decide_group, run_sign, run_write, signed_shape,
};
use neardup_index::SavedIndex;
use neardup_keys::{FileRows, HotKeys, HotMask, HotSummary, KeyTable, RowGrouping, ShardPlace};
use serde::{Deserialize, Serialize};

use crate::Config;
use crate::error::{Error, IoOp, IoTarget, StepOutputsError, publish_error, wrong_tables};
use crate::own_files::OwnFile;
use crate::paths::RunPaths;
use crate::pipeline::save_json;
use crate::pipeline::{Report, RunControl};
use crate::stage_settings::{check_hot_layout, keys_config, stage2_config};
use crate::step::Step;
use crate::step_manifests::{DecideManifest, DecideSettings, STEP_FORMAT_VERSION, SignManifest};
#[cfg(doc)]
use crate::step_values::StepInput;
use crate::step_values::{
    DecidedGroup, DecidedInput, Given, SignedInput, SignedShard, StepFiles, StepOutput, StepValue,
};

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

/// A shard's key table as `sign` and `write` take it: a key-table file, or a table in memory.
#[derive(Clone, Copy, Debug)]
pub enum TableInput<'a> {
    /// A key-table file (`neardup keys -o`), read as a stream.
    File(&'a Path),
    /// A table in memory ([`crate::KeysStep`]'s `run`, or [`KeyTable::load`]).
    Value(&'a KeyTable),
}

impl<'a> From<&'a Path> for TableInput<'a> {
    fn from(path: &'a Path) -> Self {
        TableInput::File(path)
    }
}

impl<'a> From<&'a PathBuf> for TableInput<'a> {
    fn from(path: &'a PathBuf) -> Self {
        TableInput::File(path)
    }
}

impl<'a> From<&'a KeyTable> for TableInput<'a> {
    fn from(table: &'a KeyTable) -> Self {
        TableInput::Value(table)
    }
}

impl TableInput<'_> {
    /// The shard's files and place among the shards `hot` was counted from, the table checked
    /// against them, from a table file's header alone: a step checks its paths, and makes its
    /// spill directory, before it builds the mask ([`TableInput::mask`]), which may go there.
    /// The files come with the places of their records the table holds (within `config`'s
    /// memory limit), so the step reads only the records it has to.
    fn files(&self, config: &Config, hot: &HotKeys) -> Result<(Vec<FileRows>, ShardPlace), Error> {
        match self {
            TableInput::File(path) => HotMask::shard_files(path, hot, config.keys.memory_limit),
            TableInput::Value(table) => HotMask::table_files(table, hot),
        }
        .map_err(wrong_tables)
    }

    /// The shard's hot mask, the table checked and placed by [`TableInput::files`]. A mask read
    /// from a file is kept within `config`'s memory limit ([`neardup_keys::MaskMemory`]); a
    /// table in memory is many times its mask.
    fn mask(
        &self,
        config: &Config,
        place: &ShardPlace,
        hot: &HotKeys,
        grouping: RowGrouping,
    ) -> Result<HotMask, Error> {
        match self {
            TableInput::File(path) => {
                HotMask::of_checked_shard(path, place, hot, grouping, &config.mask_memory())
                    .map_err(wrong_tables)
            }
            TableInput::Value(table) => Ok(HotMask::of_checked_table(table, hot, grouping)),
        }
    }

    /// How messages name the table.
    fn name(&self) -> String {
        match self {
            TableInput::File(path) => path.display().to_string(),
            TableInput::Value(table) => format!("the key table of shard {}", table.shard()),
        }
    }

    /// Registers the table file as read (a file only).
    fn read_paths(&self, paths: &mut RunPaths) {
        if let TableInput::File(path) = self {
            paths.read_file("the key table", path);
        }
    }
}

fn step_error(e: neardup_dedup::DedupError) -> Error {
    match e {
        neardup_dedup::DedupError::Step(e) => Error::StepInput(e),
        other => Error::Dedup(other),
    }
}

/// The `sign` step into a directory (`out`) or memory (`None`): the manifest, the streams (in
/// memory only) and the pass's statistics.
fn sign_into(
    config: &Config,
    table: TableInput<'_>,
    hot: &HotKeys,
    out: Option<(&Path, Option<&Path>)>,
    control: &RunControl,
) -> Result<(SignManifest, Vec<Vec<u8>>, DedupStats), Error> {
    let against = crate::against::against_summary(config)?;
    check_hot_layout(config, hot.layout())?;
    let fingerprint = hot.fingerprint()?;
    let (files, place) = table.files(config, hot)?;
    let inputs: Vec<InputFile> = files.iter().map(|f| f.input.clone()).collect();
    let groups = hot.groups();
    let mut paths = RunPaths::new();
    paths.read_inputs(&inputs);
    table.read_paths(&mut paths);
    paths.config_spill_dir(config);
    let all: Vec<u32> = (0..groups).collect();
    let targets = out.map(|(dir, report)| {
        if let Some(r) = report {
            paths.write_file("the report (--report)", r, OwnFile::Report);
        }
        StepFiles::plan::<SignManifest>(dir, &all, &mut paths)
    });
    paths.check()?;
    let _spill_dirs = paths.prepare()?;
    let output =
        StepOutput::begin::<SignManifest>(targets, config.output.overwrite, &control.cancel)?;
    let mask = table.mask(config, &place, hot, RowGrouping::Record)?;
    let sinks = output.sinks(groups as usize)?;
    let mut cfg = stage2_config(config)?;
    cfg.output = None;
    cfg.decisions = None;
    // Its files are numbered after the indexed runs'.
    cfg.prior = against.as_ref().map(crate::against::numbering_only);
    let shape = signed_shape(&cfg);
    let (sinks, signed, stage2) = run_sign(
        &files,
        &mask,
        &cfg,
        &control.stage2_step(),
        &place,
        hot,
        sinks,
        output.publication(),
    )?;
    let bytes = sinks.iter().map(StepSink::bytes).collect();
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
        settings: DecideSettings::of(config, against.as_ref()),
        signed,
        bytes,
    };
    let streams = output.finish(sinks, &manifest)?;
    Ok((manifest, streams, stage2))
}

/// The `sign` step, a [`Step`]: re-reads the inputs of the shard whose key table is `table` (a
/// file or a table in memory) and makes, for each hot sample, what deciding it needs: one stream
/// per group of `hot`'s plan and a manifest, as a [`SignedShard`] ([`Step::run`]; memory: the
/// shard's signed samples, the size of its sign directory) or a directory published all
/// together at the end ([`Step::write`], the `sign` command; the same bytes as
/// [`SignedShard::save`]). `config` carries the settings `keys` used and the decision settings
/// (`--verify` decides whether texts are carried for exact verification).
#[derive(Debug)]
pub struct SignStep<'a> {
    config: &'a Config,
    table: TableInput<'a>,
    hot: &'a HotKeys,
}

impl<'a> SignStep<'a> {
    /// Checks the settings (an index to save is refused: steps save none).
    pub fn new(
        config: &'a Config,
        table: impl Into<TableInput<'a>>,
        hot: &'a HotKeys,
    ) -> Result<SignStep<'a>, Error> {
        config.validate()?;
        crate::against::not_in_steps(config, "sign")?;
        Ok(SignStep {
            config,
            table: table.into(),
            hot,
        })
    }
}

impl Step for SignStep<'_> {
    type Value = SignedShard;
    type Stats = DedupStats;
    type Report = SignReport;

    fn run(&self, control: &RunControl) -> Result<(SignedShard, DedupStats), Error> {
        let (manifest, streams, stage2) =
            sign_into(self.config, self.table, self.hot, None, control)?;
        Ok((SignedShard(StepValue::made(manifest, streams)), stage2))
    }

    /// The directory `out`; the report is saved at `report` once it is published.
    fn write(
        &self,
        out: &Path,
        report: Option<&Path>,
        control: &RunControl,
    ) -> Result<SignReport, Error> {
        let (manifest, _, stage2) = sign_into(
            self.config,
            self.table,
            self.hot,
            Some((out, report)),
            control,
        )?;
        let made = SignReport { manifest, stage2 };
        if let Some(path) = report {
            save_json(path, &made)?;
        }
        Ok(made)
    }
}

/// The `decide` step into a directory (`out`) or memory (`None`): the manifest and the streams
/// (in memory only).
fn decide_into(
    config: &Config,
    signed: &[SignedInput<'_>],
    hot: &HotSummary,
    group: u32,
    out: Option<(&Path, Option<&Path>)>,
    control: &RunControl,
) -> Result<(DecideManifest, Vec<Vec<u8>>), Error> {
    let against = crate::against::load_against(config)?;
    check_hot_layout(config, hot.layout())?;
    let fingerprint = hot.fingerprint();
    let groups = hot.groups();
    if group >= groups {
        return Err(Error::StepOutputs(StepOutputsError::GroupOutOfRange {
            group,
            groups,
        }));
    }
    let shards = hot.tables().len() as u32;
    let settings = DecideSettings::of(config, against.as_ref().map(SavedIndex::summary).as_ref());
    let mut given: Vec<Given<'_, SignManifest>> = Vec::new();
    for input in signed {
        let g = Given::read(input, fingerprint, &settings)?;
        if let Some(other) = given
            .iter()
            .find(|o| o.manifest.place.index == g.manifest.place.index)
        {
            return Err(Error::StepOutputs(StepOutputsError::SameShard {
                first: other.origin.clone(),
                second: g.origin.clone(),
                shard: g.manifest.place.shard,
            }));
        }
        given.push(g);
    }
    given.sort_by_key(|g| g.manifest.place.index);
    if given.len() as u32 != shards {
        let have: Vec<u32> = given.iter().map(|g| g.manifest.place.shard).collect();
        let missing: Vec<u32> = hot
            .tables()
            .iter()
            .filter(|t| !have.contains(&t.shard))
            .map(|t| t.shard)
            .collect();
        return Err(Error::StepOutputs(StepOutputsError::MissingShards {
            shards,
            missing,
        }));
    }
    let first = &given[0].manifest;
    let shape = SignedShape {
        num_perm: first.num_perm,
        columns: first.columns,
        texts: first.shingles,
        ranked: !settings.prefer.is_input_order(),
    };
    let wanted_by = format!("`decide --group {group}`");
    // Files are numbered with the indexed runs' first.
    let mut files: Vec<String> = against
        .as_ref()
        .map(|i| i.files().iter().map(|f| f.name.clone()).collect())
        .unwrap_or_default();
    for g in &given {
        let m = &g.manifest;
        if (m.num_perm, m.columns, m.shingles) != (shape.num_perm, shape.columns, shape.texts) {
            return Err(Error::StepOutputs(StepOutputsError::SignedDifferently {
                origin: g.origin.clone(),
                first: given[0].origin.clone(),
            }));
        }
        g.check_holds(group, &wanted_by)?;
        files.extend(m.files.iter().cloned());
    }
    let mut paths = RunPaths::new();
    for g in &given {
        g.read_paths(group, "the sign output", &mut paths);
    }
    let all: Vec<u32> = (0..shards).collect();
    let targets = out.map(|(dir, report)| {
        if let Some(r) = report {
            paths.write_file("the report (--report)", r, OwnFile::Report);
        }
        StepFiles::plan::<DecideManifest>(dir, &all, &mut paths)
    });
    paths.config_spill_dir(config);
    paths.check()?;
    // Representatives spill there under a memory limit.
    let _spill_dirs = paths.prepare()?;
    let output =
        StepOutput::begin::<DecideManifest>(targets, config.output.overwrite, &control.cancel)?;
    let streams = given
        .iter()
        .map(|g| g.open(group, &wanted_by))
        .collect::<Result<Vec<_>, _>>()?;
    let mut outs = output
        .sinks(shards as usize)?
        .into_iter()
        .map(|sink| {
            RecordWriter::new(sink).map_err(|e| Error::Io {
                op: IoOp::Write,
                target: out.map_or(IoTarget::Named("the decisions"), |(d, _)| {
                    IoTarget::Path(d.to_path_buf())
                }),
                error: e,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let k = keys_config(config)?;
    let prior = match &against {
        Some(index) => Some(crate::against::group_start(config, index, hot, group)?),
        None => None,
    };
    let sketch = DecideShape {
        sketcher: k.sketcher,
        rule: k.rule,
    };
    let GroupDecided {
        deduper,
        written: decided,
        clusters,
    } = decide_group(
        streams,
        shape,
        &config.deduper_config(),
        &sketch,
        &mut outs,
        config.run.threads,
        config.sort_memory(),
        &control.cancel,
        prior.as_ref(),
    )
    .map_err(step_error)?;
    let sinks = outs
        .into_iter()
        .map(RecordWriter::finish)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Io {
            op: IoOp::Write,
            target: IoTarget::Named("the decisions"),
            error: e,
        })?;
    let clusters = clusters.finish(&files);
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
        clusters,
    };
    let streams = output.finish(sinks, &manifest)?;
    Ok((manifest, streams))
}

/// The `decide` step, a [`Step`]: reads group `group`'s streams from the `sign` outputs of every
/// shard (`signed`: directories or values, in any order; each shard exactly once; a value needs
/// only group `group`'s stream, [`SignedShard::group`]), decides them in global row order (with
/// `--prefer`, in preference order, ties in row order) with the decision core of a one-process
/// run, and makes the decisions, one stream per shard and a manifest: a [`DecidedGroup`]
/// ([`Step::run`]; memory: the group's representatives and its decisions) or a directory
/// ([`Step::write`], the `decide` command). Opens no input file. `hot` is the hot-key file's
/// summary ([`HotSummary::load`], or [`HotKeys::summary`] of keys in memory): decide needs none
/// of the keys.
#[derive(Debug)]
pub struct DecideStep<'a> {
    config: &'a Config,
    signed: &'a [SignedInput<'a>],
    hot: &'a HotSummary,
    group: u32,
}

impl<'a> DecideStep<'a> {
    /// Checks the settings (an index to save is refused: steps save none).
    pub fn new(
        config: &'a Config,
        signed: &'a [SignedInput<'a>],
        hot: &'a HotSummary,
        group: u32,
    ) -> Result<DecideStep<'a>, Error> {
        config.validate()?;
        crate::against::not_in_steps(config, "decide")?;
        Ok(DecideStep {
            config,
            signed,
            hot,
            group,
        })
    }
}

impl Step for DecideStep<'_> {
    type Value = DecidedGroup;
    type Stats = ();
    type Report = DecideReport;

    fn run(&self, control: &RunControl) -> Result<(DecidedGroup, ()), Error> {
        let (manifest, streams) = decide_into(
            self.config,
            self.signed,
            self.hot,
            self.group,
            None,
            control,
        )?;
        Ok((DecidedGroup(StepValue::made(manifest, streams)), ()))
    }

    /// The directory `out`; the report is saved at `report` once it is published.
    fn write(
        &self,
        out: &Path,
        report: Option<&Path>,
        control: &RunControl,
    ) -> Result<DecideReport, Error> {
        let (manifest, _) = decide_into(
            self.config,
            self.signed,
            self.hot,
            self.group,
            Some((out, report)),
            control,
        )?;
        let made = DecideReport { manifest };
        if let Some(path) = report {
            save_json(path, &made)?;
        }
        Ok(made)
    }
}

/// The manifest name a `write` step publishes its files under in a shared output directory.
pub fn write_manifest_name(place: &ShardPlace) -> String {
    neardup_corpus::shard_manifest_name(place.index)
}

/// Publishes the whole output's manifest `_SUCCESS` in `dir`, the output directory (or prefix)
/// the `write` steps of the distributed run whose hot-key file has fingerprint `hot_fingerprint`
/// share, once every shard's manifest is in; returns it, or `None` while a shard is missing.
/// The last `write` step does this itself; a driver calls it once every step is done, so that
/// an output whose last step died between its commit and this is made whole too.
pub fn publish_output(
    dir: &Path,
    hot_fingerprint: u64,
) -> Result<Option<neardup_corpus::Manifest>, Error> {
    neardup_corpus::publish_whole(dir, &output_dataset_id(hot_fingerprint)).map_err(publish_error)
}

/// The id the manifests of a distributed run's output share ([`neardup_corpus::Distributed`]):
/// the fingerprint of the hot-key file every step of the run checked its inputs against.
pub fn output_dataset_id(hot_fingerprint: u64) -> String {
    format!("{hot_fingerprint:016x}")
}

/// The `write` step, which ends a distributed run: re-reads the inputs of the shard whose key
/// table is `table` (a file or a table in memory), and writes its part of the filtered dataset
/// (into the shared directory `config.output.dir`, published under its own manifest) and its
/// decisions (`config.output.decisions`), the hot samples' verdicts taken from `decided` (the
/// `decide` outputs of every group, directories or values, in any order; each needs only this
/// shard's stream, [`DecidedGroup::shard`]).
#[derive(Debug)]
pub struct WriteStep<'a> {
    config: &'a Config,
    table: TableInput<'a>,
    hot: &'a HotKeys,
    decided: &'a [DecidedInput<'a>],
}

impl<'a> WriteStep<'a> {
    /// Checks the settings (an index to save is refused: steps save none).
    pub fn new(
        config: &'a Config,
        table: impl Into<TableInput<'a>>,
        hot: &'a HotKeys,
        decided: &'a [DecidedInput<'a>],
    ) -> Result<WriteStep<'a>, Error> {
        config.validate()?;
        crate::against::not_in_steps(config, "write")?;
        Ok(WriteStep {
            config,
            table: table.into(),
            hot,
            decided,
        })
    }

    /// Writes the shard's outputs and returns its run report, handing every decision of the
    /// shard to `observe` in input order (a shard that is an in-memory table has its rows
    /// filtered by its caller, with no output).
    pub fn run(
        &self,
        control: &RunControl,
        observe: &mut dyn FnMut(&neardup_dedup::Decision),
    ) -> Result<Report, Error> {
        write_shard(
            self.config,
            self.table,
            self.hot,
            self.decided,
            control,
            observe,
        )
    }
}

fn write_shard(
    config: &Config,
    table: TableInput<'_>,
    hot: &HotKeys,
    decided: &[DecidedInput<'_>],
    control: &RunControl,
    observe: &mut dyn FnMut(&neardup_dedup::Decision),
) -> Result<Report, Error> {
    let against = crate::against::against_summary(config)?;
    check_hot_layout(config, hot.layout())?;
    let fingerprint = hot.fingerprint()?;
    let (files, place) = table.files(config, hot)?;
    let inputs: Vec<InputFile> = files.iter().map(|f| f.input.clone()).collect();
    let groups = hot.groups();
    let settings = DecideSettings::of(config, against.as_ref());
    let mut given: Vec<Given<'_, DecideManifest>> = Vec::new();
    for input in decided {
        let g = Given::read(input, fingerprint, &settings)?;
        if let Some(other) = given.iter().find(|o| o.manifest.group == g.manifest.group) {
            return Err(Error::StepOutputs(StepOutputsError::SameGroup {
                first: other.origin.clone(),
                second: g.origin.clone(),
                group: g.manifest.group,
            }));
        }
        given.push(g);
    }
    given.sort_by_key(|g| g.manifest.group);
    if given.len() as u32 != groups {
        let missing: Vec<u32> = (0..groups)
            .filter(|n| !given.iter().any(|g| g.manifest.group == *n))
            .collect();
        return Err(Error::StepOutputs(StepOutputsError::MissingGroups {
            groups,
            missing,
        }));
    }
    let names = given[0].manifest.files.clone();
    let shard_names: Vec<String> = inputs
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    let base = place.file_base as usize + against.as_ref().map_or(0, |i| i.files().len());
    if names.get(base..base + shard_names.len()) != Some(&shard_names[..]) {
        return Err(Error::StepOutputs(StepOutputsError::OtherInputs {
            origin: given[0].origin.clone(),
            shard: place.shard,
            table: table.name().to_string(),
        }));
    }
    let wanted_by = format!("`write` of shard {}", place.shard);
    for g in &given {
        g.check_holds(place.index, &wanted_by)?;
    }
    let mut paths = RunPaths::new();
    paths.read_inputs(&inputs);
    table.read_paths(&mut paths);
    for g in &given {
        g.read_paths(place.index, "the decide output", &mut paths);
    }
    paths.write_config_outputs(config, &inputs);
    paths.check()?;
    let _spill_dirs = paths.prepare()?;
    let mask = table.mask(config, &place, hot, RowGrouping::Skip)?;
    let streams = given
        .iter()
        .map(|g| g.open(place.index, &wanted_by))
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
        // The last shard in publishes the whole output's `_SUCCESS`.
        shard: Some(neardup_corpus::Distributed {
            dataset: output_dataset_id(fingerprint),
            shards: place.shards,
            shard: Some(place.index),
        }),
        outputs: inputs.iter().map(|f| f.relative.clone()).collect(),
        decisions: config.output.decisions.clone(),
        report: config.output.report.clone(),
        cancel: control.cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(publish_error)?;
    let mut cfg = stage2_config(config)?;
    // Its files are numbered after the indexed runs'.
    cfg.prior = against.as_ref().map(crate::against::numbering_only);
    let stage2 = run_write(
        &files,
        &mask,
        &cfg,
        &control.stage2_step(),
        &place,
        &names,
        merge,
        &publication,
        observe,
    )
    .map_err(step_error)?;
    let report = Report::new(config, &inputs, Vec::new(), None, stage2);
    if let Some(p) = &config.output.report {
        report.save_to(publication.file(p).map_err(publish_error)?)?;
    }
    publication.commit().map_err(publish_error)?;
    Ok(report)
}
