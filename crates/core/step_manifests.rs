//! The manifests of the `sign` and `decide` outputs and the settings they record, which the
//! next step checks: what the steps (`distributed.rs`) write and their values
//! (`step_values.rs`) hold. A leaf of the facade beside the config and the errors.

use neardup_dedup::{ClusterStats, DeduperStats, Prefer, SignedCounts};
use neardup_index::IndexSummary;
use neardup_keys::ShardPlace;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::{Error, SettingChange, StepKind, StepOutputsError};

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
    /// `--prefer` (absent from manifests made in input order, and from those made before it
    /// existed).
    #[serde(default, skip_serializing_if = "Prefer::is_input_order")]
    pub prefer: Prefer,
    /// The saved indexes the run is made against (`--against`): their files and fingerprint
    /// (absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<AgainstId>,
}

/// Which saved indexes a distributed run was made against ([`DecideSettings::against`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgainstId {
    /// Input files of the indexed runs (numbered before this run's).
    pub files: u64,
    /// [`neardup_index::SavedIndex::fingerprint`] of the indexes, combined.
    pub fingerprint: u64,
}

impl DecideSettings {
    pub(crate) fn of(config: &Config, against: Option<&IndexSummary>) -> DecideSettings {
        let d = config.deduper_config();
        DecideSettings {
            threshold: d.threshold,
            max_reps: d.max_reps,
            verify: d.verify,
            prefer: config.dedup.prefer.clone(),
            against: against.map(|i| AgainstId {
                files: i.files().len() as u64,
                fingerprint: i.fingerprint(),
            }),
        }
    }

    /// Errors naming each setting that differs (`theirs` was recorded by `step`).
    pub(crate) fn check(
        &self,
        theirs: &DecideSettings,
        step: StepKind,
        what: &str,
    ) -> Result<(), Error> {
        let mut changes = Vec::new();
        let mut differ = |setting: &'static str, here: String, there: String| {
            if here != there {
                changes.push(SettingChange {
                    setting,
                    here,
                    there,
                });
            }
        };
        differ(
            "--threshold",
            self.threshold.to_string(),
            theirs.threshold.to_string(),
        );
        let show = |m: Option<usize>| m.map_or("unbounded".to_string(), |m| m.to_string());
        differ("--max-reps", show(self.max_reps), show(theirs.max_reps));
        let verify = |v: neardup_dedup::Verify| format!("{v:?}").to_lowercase();
        differ("--verify", verify(self.verify), verify(theirs.verify));
        differ(
            "--prefer",
            self.prefer.to_string(),
            theirs.prefer.to_string(),
        );
        let against = |a: Option<AgainstId>| {
            a.map_or("no index".to_string(), |a| {
                format!("indexes of {} files ({:016x})", a.files, a.fingerprint)
            })
        };
        differ("--against", against(self.against), against(theirs.against));
        if changes.is_empty() {
            return Ok(());
        }
        Err(Error::StepOutputs(StepOutputsError::OtherSettings {
            step,
            origin: what.to_string(),
            changes,
        }))
    }
}

/// The manifest of a `sign` output directory (`sig-I/manifest.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignManifest {
    /// Always `"neardup-sign"`.
    pub format: String,
    /// Format version (2).
    pub format_version: u32,
    /// [`neardup_keys::HotKeys::fingerprint`] of the hot-key file it was made with.
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
    /// [`neardup_keys::HotKeys::fingerprint`] of the hot-key file.
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
    /// The group's duplicate clusters (a cluster never spans two groups: the groups' counts add
    /// up, [`ClusterStats::merge`]).
    pub clusters: ClusterStats,
}

/// The version of the sign and decide outputs (2: signed samples carry texts instead of shingle
/// sets, and no keys; 3: under exact verification, texts without signatures, which decide
/// computes; 4: a decided exact copy names its cluster, and decide counts its group's clusters;
/// the streams' magic says it too).
pub(crate) const STEP_FORMAT_VERSION: u32 = 4;
