//! neardup finds and removes near-duplicate documents in large text corpora with MinHash + LSH in
//! two streaming stages.
//!
//! 1. **Stage 1 — keys** ([`keys`]): every input is streamed by worker threads; each sample's text
//!    is shingled and signed, and one `u64` bucket key per LSH band goes into a compact key table.
//!    An exact frequency filter keeps the keys seen more than `min_key_count` times: the hot keys.
//!    A sample that hits no hot key is unique and costs nothing more.
//! 2. **Stage 2 — dedup** ([`dedup`]): the inputs are streamed again; only samples that hit a hot
//!    key are signed again and compared with a bounded set of representatives per hot bucket; first
//!    seen is kept, and every decision names the sample it duplicates.
//!
//! This crate is the facade: one [`Config`] for a whole run (its validation, and the one order
//! in which its layers apply: [`Layers`]), the [`Pipeline`] that runs both stages and publishes
//! its outputs together at the end (all or nothing; a [`CancelToken`] stops it and removes what
//! it wrote), the [`Report`], the checks of a run's paths before any work ([`RunPaths`]: no
//! output over, inside or around an input, none read back by a later run, none colliding with
//! another, all writable), and the stage-level steps for schedulers that run the stages on
//! different machines, each of one shape ([`Step`]: settings and inputs in, checked when it is
//! built; a value out in memory, or saved where the CLI's command saves it; the values
//! ([`StepValue`]) save, load and turn into bytes, so values and files mix freely):
//! [`KeysStep`] per shard, one [`HotStep`], then [`ApplyStep`], or stage 2 itself split over
//! machines: [`SignStep`] per shard, [`DecideStep`] per group and [`WriteStep`] per shard. Every
//! step takes its settings (a [`Config`]) and, beside them, its runtime handles (a
//! [`RunControl`]: progress counters and the cancel token). Saved indexes ([`against`], `docs/incremental.md`): a run
//! saves its index (`config.output.index_out`) and a later run, or each of its steps, is
//! deduplicated against indexes of earlier runs (`config.dedup.against`) with the decisions of
//! one run over all their inputs; [`against::build_index`] makes an index from a finished run's
//! tables and decisions. The building blocks are re-exported: [`sketch`] (text → signature →
//! keys), [`corpus`] (reading and writing datasets), [`keys`], [`dedup`], [`index`] (saved
//! indexes) and [`storage`] (local paths and object storage URLs read alike). Any path of a run — inputs,
//! outputs, key tables, hot-key files, step directories — may be an `s3://`, `gs://` or `az://`
//! URL, except the spill directory. With the `cli` feature (on by default), [`cli`] is the
//! `neardup` command line itself, which the binary and the Python package's `neardup` command
//! both run.
//!
//! ```no_run
//! use neardup::{Config, Pipeline};
//!
//! let mut config = Config::default();
//! config.input.inputs = vec!["crawl/".into()];
//! config.output.dir = Some("crawl-dedup/".into());
//! config.output.decisions = Some("decisions.jsonl".into());
//! let report = Pipeline::new(config)?.run()?;
//! println!("{}", report.summary());
//! # Ok::<(), neardup::Error>(())
//! ```
#![warn(missing_docs)]

// The command line's modules name the library as any user of it does (`neardup::Config`).
#[cfg(feature = "cli")]
extern crate self as neardup;

// Modules from the bottom up: each names only those above it.
mod limits;
mod own_files;
mod path_conflicts;
mod error;
mod config;
mod stage_settings;
mod step_manifests;
mod paths;
pub mod against;
mod pipeline;
mod step;
mod steps;
mod step_values;
mod distributed;
#[cfg(feature = "cli")]
pub mod cli;

pub use config::{
    Config, CustomTokenizer, DedupSettings, FieldsModeKind, InputSettings, KeysSettings, Layers,
    LshWeights, MEMORY_ABOVE_LIMIT, MEMORY_PER_THREAD, MemoryPlan, OutputSettings, Preset,
    RunSettings, ShingleUnit, SketchSettings, UnknownPreset, block_bytes_within,
    block_memory_within, chunk_bytes_within, decision_memory, memory_floor, threads_within,
};
pub use distributed::{
    DecideReport, DecideStep, SignReport, SignStep, TableInput, WriteStep, output_dataset_id,
    publish_output, write_manifest_name,
};
pub use error::{
    ConfigError, CorruptValue, Error, IndexUseError, InputsError, IoOp, IoTarget, SettingChange,
    SettingsFileProblem, StepKind, StepOutputsError,
};
pub use limits::{MAX_NUM_PERM, MAX_THREADS};
pub use neardup_exec::CancelToken;
pub use own_files::OwnFile;
pub use path_conflicts::{NamedPath, PathConflict, PathConflicts, SourceRelation, Unwritable};
pub use paths::{PreparedDirs, RunPaths};
pub use pipeline::{
    ApplyStep, DecisionStream, KeyTables, NextDecision, Pipeline, Report, ReportPaths, RunControl,
    Totals, discover_inputs, discover_inputs_and_sources, save_json,
};
pub use stage_settings::{keys_config, run_threads, stage2_config};
pub use step::{Step, StepValue};
pub use step_manifests::{DecideManifest, DecideSettings, STEP_MANIFEST, SignManifest};
pub use step_values::{DecidedGroup, DecidedInput, SignedInput, SignedShard, StepInput};
pub use steps::{HotReport, HotStep, KeysReport, KeysStep, PlanSummary};

pub use neardup_corpus as corpus;
pub use neardup_dedup as dedup;
pub use neardup_eval as eval;
pub use neardup_exec as exec;
pub use neardup_index as index;
pub use neardup_keys as keys;
pub use neardup_online as online;
pub use neardup_sketch as sketch;
pub use neardup_storage as storage;
