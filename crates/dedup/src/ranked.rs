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

#[cfg(test)]
mod tests {
    use neardup_corpus::{FieldPath, InputFile, Reason, TextSelector};

    use neardup_keys::{KeysConfig, KeysOutput, run_keys};

    use crate::{DeduperConfig, FieldOrder, Prefer, SampleAddr, Stage2Config, run_dedup};

    use super::*;

    use crate::pass::test_settings::sketcher;

    fn selector() -> TextSelector {
        TextSelector {
            rank_field: Some(FieldPath::top("q")),
            ..TextSelector::single(FieldPath::top("text"))
        }
    }

    /// Families of near and exact copies with a quality `q` each (many ties, some absent), over
    /// two files; returns the inputs and each record's (text, q) in input order.
    fn inputs(dir: &std::path::Path) -> (Vec<InputFile>, Vec<(String, Option<u64>)>) {
        let mut state = 0x1234_5678_9abc_def1u64;
        let mut below = |m: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % m
        };
        let bases: Vec<Vec<String>> = (0..15)
            .map(|_| (0..40).map(|_| format!("w{}", below(3000))).collect())
            .collect();
        let mut records = Vec::new();
        for _ in 0..260 {
            let mut t = bases[below(15) as usize].clone();
            for _ in 0..below(3) {
                let at = below(40) as usize;
                t[at] = format!("e{}", below(1 << 20));
            }
            let q = (below(5) > 0).then(|| below(4));
            records.push((t.join(" "), q));
        }
        let mut files = Vec::new();
        for (f, part) in [&records[..130], &records[130..]].into_iter().enumerate() {
            let path = dir.join(format!("in-{f}.jsonl"));
            let body: String = part
                .iter()
                .map(|(t, q)| match q {
                    Some(q) => format!("{{\"text\":\"{t}\",\"q\":{q}}}\n"),
                    None => format!("{{\"text\":\"{t}\"}}\n"),
                })
                .collect();
            std::fs::write(&path, body).unwrap();
            let name = std::path::PathBuf::from(path.file_name().unwrap());
            files.push(InputFile::detect(&path, &name, None).unwrap());
        }
        (files, records)
    }

    fn keys(files: &[InputFile]) -> KeysOutput {
        let mut cfg = KeysConfig::new(sketcher(), TextSelector::single(FieldPath::top("text")));
        cfg.chunk_bytes = 4096;
        run_keys(files, 0, &cfg, &StepControl::default()).unwrap()
    }

    fn stage2(
        prefer: Prefer,
        threads: usize,
        sort_memory: usize,
        spill: &std::path::Path,
    ) -> Stage2Config {
        Stage2Config {
            selector: selector(),
            deduper: DeduperConfig {
                spill_dir: Some(spill.to_path_buf()),
                ..DeduperConfig::default()
            },
            prefer,
            sort_memory,
            threads,
            block_bytes: 1 << 12,
            ..crate::pass::test_settings::stage2()
        }
    }

    fn decisions(
        stage1: &KeysOutput,
        cfg: &Stage2Config,
    ) -> Result<(Vec<crate::Decision>, DedupStats), DedupError> {
        let mut got = Vec::new();
        let stats = run_dedup(
            &stage1.files,
            &stage1.mask,
            cfg,
            &StepControl::default(),
            &mut |d| got.push(d.clone()),
        )?;
        Ok((got, stats))
    }

    /// The record's place in input order.
    fn position(a: SampleAddr) -> usize {
        a.file as usize * 130 + a.record as usize
    }

    /// With a preference, every duplicate names a sample decided before it in (rank, row)
    /// order: a better-ranked one, or, of equal rank (a tie, or both without the field), one
    /// earlier in the input; the decisions are the same whatever the threads and however
    /// little of the ranked samples is held before sorted runs spill.
    #[test]
    fn a_preference_keeps_the_best_ranked_copy_and_ties_go_to_the_first() {
        let tmp = tempfile::tempdir().unwrap();
        let (files, records) = inputs(tmp.path());
        let stage1 = keys(&files);
        let prefer = Prefer::Field {
            field: FieldPath::top("q"),
            order: FieldOrder::Desc,
        };
        let rank = |i: usize| {
            let (text, q) = &records[i];
            let value = q.map_or(neardup_corpus::RankValue::Absent, |q| {
                neardup_corpus::RankValue::Number(q as f64)
            });
            prefer.rank(text, value).unwrap()
        };
        let cfg = stage2(prefer.clone(), 2, 1 << 20, tmp.path());
        let (one, stats) = decisions(&stage1, &cfg).unwrap();
        assert_eq!(one.len(), records.len());
        let (mut dropped, mut ties, mut later_kept) = (0, 0, 0);
        for d in &one {
            let Some(of) = d.dup_of else { continue };
            dropped += 1;
            let (me, them) = (position(d.addr), position(of));
            assert!(
                (rank(them), them) < (rank(me), me),
                "record {me} (rank {}) names {them} (rank {})",
                rank(me),
                rank(them)
            );
            ties += usize::from(rank(them) == rank(me));
            later_kept += usize::from(them > me);
        }
        assert!(
            dropped > 100 && ties > 10 && later_kept > 10,
            "{dropped} {ties} {later_kept}"
        );
        assert_eq!(stats.exact + stats.near, dropped as u64);
        assert!(stats.clusters.as_ref().unwrap().duplicated() > 0);
        // An exact copy names the best-ranked copy of its text (the first of them in a tie).
        for d in one.iter().filter(|d| d.reason == Reason::Exact) {
            let me = position(d.addr);
            let kept = position(d.dup_of.unwrap());
            let best = (0..records.len())
                .filter(|&i| records[i].0 == records[me].0)
                .min_by_key(|&i| (rank(i), i))
                .unwrap();
            assert_eq!(kept, best, "record {me}");
        }
        for (threads, sort_memory) in [(1, 1 << 20), (3, 64), (2, 1)] {
            let (other, _) = decisions(
                &stage1,
                &stage2(prefer.clone(), threads, sort_memory, tmp.path()),
            )
            .unwrap();
            assert!(
                other == one,
                "{threads} threads, {sort_memory} bytes to sort"
            );
        }
        // Nothing is left in the spill directory.
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| !n.to_string_lossy().ends_with(".jsonl"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// A field no ranked sample holds a number in (a misspelt field) would keep first copies
    /// while saying it kept the best: refused.
    #[test]
    fn a_preference_for_a_field_no_record_holds_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (files, _) = inputs(tmp.path());
        let stage1 = keys(&files);
        let prefer = Prefer::Field {
            field: FieldPath::top("quality"),
            order: FieldOrder::Asc,
        };
        let mut cfg = stage2(prefer, 2, 1 << 20, tmp.path());
        cfg.selector.rank_field = Some(FieldPath::top("quality"));
        match decisions(&stage1, &cfg) {
            Err(DedupError::Config(SettingsError::PreferFieldEmpty { field, ranked, .. })) => {
                assert_eq!(field, "quality");
                assert!(ranked > 100);
            }
            other => panic!("{:?}", other.map(|(d, _)| d.len())),
        }
    }
}
