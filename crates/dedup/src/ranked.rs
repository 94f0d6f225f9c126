//! One-process stage 2 with a preference (`--prefer`): the hot samples are decided in rank
//! order, which the inputs' order is not, by the distributed steps run in this process with one
//! group. Builds on `stage` (the pass) and `distributed` (the steps); `run` picks it.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};

use neardup_corpus::Publication;
use neardup_exec::StepControl;
use neardup_keys::{FileRows, HotMask};

use crate::distributed::{
    DecideShape, DecidedMerge, Signer, decide_group, sign_stream_error, signed_shape, step_error,
};
use crate::error::{DedupError, SettingsError};
use crate::handoff::{RecordReader, RecordWriter};
use crate::pass::{Addressing, DedupStats, Stage2Config};
use crate::stage::run_stage2;
use crate::step_sink::StepSink;

/// One-process stage 2 with a preference ([`Stage2Config::prefer`]): the hot samples must be
/// decided in rank order, which the inputs' order is not, so this runs the three steps itself
/// with one group, through scratch files in `cfg.deduper.spill_dir` (unnamed, so nothing is left
/// behind whatever ends the run): a sign pass over the inputs (holding up to `cfg.sort_memory`
/// of ranked samples), decide, and a write pass into `publication` as [`crate::run_dedup_into`]
/// writes. The inputs are read twice in stage 2; the statistics are the write pass's, with the
/// decision core's counters and the clusters from decide, and the time of all three.
pub(crate) fn run_ranked_into(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    publication: &Publication,
    observe: &mut dyn FnMut(&crate::Decision),
    addressing: &Addressing<'_>,
) -> Result<DedupStats, DedupError> {
    let started = std::time::Instant::now();
    let scratch = || -> Result<(File, File), DedupError> {
        let file = match &cfg.deduper.spill_dir {
            Some(dir) => tempfile::tempfile_in(dir),
            None => tempfile::tempfile(),
        }
        .and_then(|f| Ok((f.try_clone()?, f)))
        .map_err(DedupError::Spill)?;
        Ok(file)
    };
    let rewind = |mut f: File| -> Result<BufReader<File>, DedupError> {
        f.seek(SeekFrom::Start(0)).map_err(DedupError::Spill)?;
        Ok(BufReader::with_capacity(1 << 20, f))
    };

    let (signed_out, signed_in) = scratch()?;
    let shape = signed_shape(cfg);
    let signer = Signer::with_groups(mask, None, shape, vec![StepSink::scratch(signed_out)])
        .map_err(sign_stream_error)?
        .sorting_in(cfg.sort_memory, cfg.deduper.spill_dir.clone());
    let mut sign_cfg = cfg.clone();
    sign_cfg.output = None;
    sign_cfg.decisions = None;
    let nothing = Publication::begin(&neardup_corpus::PublishOptions {
        cancel: control.cancel.clone(),
        ..Default::default()
    })
    .map_err(DedupError::Output)?;
    let (signed_stats, signer) = run_stage2(
        files,
        mask,
        &sign_cfg,
        control,
        &nothing,
        &mut |_| {},
        signer,
        addressing,
    )?;
    signer.finish().map_err(sign_stream_error)?;
    // A field no ranked sample holds a number in (a misspelt `quality`) would rank every copy
    // alike: the run would keep first copies while saying it kept the best.
    let (ranked, valued) = signed_stats.ranked;
    if let Some(field) = cfg.prefer.rank_field()
        && ranked > 0
        && valued == 0
    {
        return Err(SettingsError::PreferFieldEmpty {
            prefer: cfg.prefer.to_string(),
            field: field.to_string(),
            ranked,
        }
        .into());
    }

    let (decided_out, decided_in) = scratch()?;
    let signed =
        RecordReader::new(rewind(signed_in)?).map_err(|e| step_error("the signed samples", e))?;
    let mut out = [
        RecordWriter::new(StepSink::scratch(decided_out)).map_err(|e| DedupError::StepOutput {
            what: "the decided samples",
            error: e,
        })?,
    ];
    let sketch = DecideShape {
        sketcher: cfg.sketcher.clone(),
        rule: cfg.rule,
    };
    let group = decide_group(
        vec![("the signed samples".to_string(), signed)],
        shape,
        &cfg.deduper,
        &sketch,
        &mut out,
        cfg.threads,
        cfg.sort_memory,
        &control.cancel,
        None,
    )?;
    let [out] = out;
    out.finish()
        .and_then(StepSink::finish)
        .map_err(|e| DedupError::StepOutput {
            what: "the decided samples",
            error: e,
        })?;

    let decided: Box<dyn Read + Send> = Box::new(rewind(decided_in)?);
    let decided = RecordReader::new(decided).map_err(|e| step_error("the decided samples", e))?;
    let merge = DecidedMerge::new(vec![("the decided samples".to_string(), decided)])?;
    if let Some(p) = control.progress() {
        p.restart();
    }
    let (mut stats, merge) = run_stage2(
        files,
        mask,
        cfg,
        control,
        publication,
        observe,
        merge,
        addressing,
    )?;
    merge.finish()?;
    stats.deduper = group.deduper;
    stats.clusters = Some(group.clusters.finish(addressing.names));
    stats.seconds = started.elapsed().as_secs_f64();
    stats.mb_per_second = stats.bytes as f64 / 1e6 / stats.seconds.max(1e-9);
    Ok(stats)
}
