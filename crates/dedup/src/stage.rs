//! The stage-2 pass: re-stream the inputs chunk by chunk with worker threads that sign only the
//! hot samples (`prepare`), decide in input order on one thread (`route`), and stream the
//! filtered dataset and the decisions out of the same pass. Builds on `pass`, `prepare` and
//! `route`; `distributed`, `ranked` and `run` (the one-process stage 2,
//! [`run_dedup`](crate::run_dedup)) build on it.

use std::time::Instant;

use neardup_corpus::UnreadableRange;
use neardup_corpus::{
    Block, Chunk, DecisionWriter, FileWriter, OutputDir, Publication, Unreadable, WriteError,
    WrittenFile,
};
use neardup_exec::{ExecOptions, OnError, StepControl};
use neardup_keys::{FileRows, HotMask};

use crate::error::{BadRank, DedupError, Mismatch};
use crate::pass::{Addressing, Decision, DedupStats, OutputFile, Stage2Config};
use crate::prepare::{ChunkJob, PlacesRead, PrepareWork, PreparedBlock, RecycledBuffers};
use crate::route::{BlockPlace, Decider, HotRoute};

/// A write error as stage 2 reports it.
pub(crate) fn output_error(e: WriteError) -> DedupError {
    if e.kind() == "interrupted" {
        DedupError::Interrupted
    } else {
        DedupError::Output(e)
    }
}

/// Refuses inputs whose size changed since stage 1 found them: stage 2 reads the chunks stage 1
/// recorded, so what was appended after the last of them would be neither decided nor written,
/// and a changed record count inside a chunk is caught only by that chunk's counts. Called
/// before stage 2 reads (`ended` false) and again once it has read everything and before
/// anything is published (`ended` true): what was appended while it ran is past the chunks it
/// read just the same. Objects are looked up a few at a time. An input that cannot be looked up
/// is left to its reader, whose error says why.
fn check_sizes(inputs: &[neardup_corpus::InputFile], ended: bool) -> Result<(), DedupError> {
    let sizes = neardup_exec::map_in_parts(inputs, &mut [(); 8], |_, f| {
        // An in-memory table is immutable while registered: it has no size to look up.
        (f.format != neardup_corpus::Format::Arrow)
            .then(|| neardup_corpus::current_size(&f.path).ok())
            .flatten()
    });
    for (f, now) in inputs.iter().zip(sizes) {
        if let Some(now) = now
            && now != f.size
        {
            let (file, stage1) = (f.path.clone(), f.size);
            return Err(DedupError::Mismatch(if ended {
                Mismatch::SizeDuringStage2 { file, stage1, now }
            } else {
                Mismatch::Size { file, stage1, now }
            }));
        }
    }
    Ok(())
}

/// Whether a pass may parse only the records it has to decide, found by the places stage 1
/// noted ([`neardup_keys::RecordPlaces`]), and decide the others (plain and cold: every sample
/// `unique`) unparsed: when nothing it writes needs their texts or ids. Not with an id field
/// (every decision names its sample's id). A pass deciding its hot samples, signing them
/// (`sign`: the others are not its concern) or taking their verdicts (`write`) alike: without
/// a filtered dataset it reads only those records (of a Parquet file, the row groups and pages
/// holding them); with one it reads every record, copying the ones it does not parse as they
/// are (a Parquet file is read and decoded whole).
fn reads_by_places(cfg: &Stage2Config) -> PlacesRead {
    if cfg.selector.id_field.is_some() {
        PlacesRead::Ignored
    } else if cfg.output.is_some() {
        PlacesRead::Whole
    } else {
        PlacesRead::Picked
    }
}

/// Whether `block` holds only the rows chosen of a Parquet chunk ([`neardup_corpus::read_rows`]):
/// its input bytes are those rows' alone, and the chunk's are counted at its end.
fn picked_rows(block: &Block) -> bool {
    block.records_read().is_some() && block.record_batch().is_some()
}

/// The bytes of its input a job read whole reads: a byte range's, or a whole file's (counted
/// with its first chunk: a chunk of row groups is a part of its file's bytes).
fn whole_read_bytes(job: &ChunkJob<'_>, input: &neardup_corpus::InputFile) -> u64 {
    match job.chunk.range {
        neardup_corpus::ChunkRange::Bytes { start, end } => end - start,
        _ if job.chunk.seq == 0 => input.size,
        _ => 0,
    }
}

/// Every chunk of every file as a job, with the row its first sample has in the table; and per
/// job, its file's records before it. The chunks whose records' places stage 1 noted are read
/// by them as `by_places` says.
fn chunk_jobs(files: &[FileRows], by_places: PlacesRead) -> (Vec<ChunkJob<'_>>, Vec<u64>) {
    let mut jobs = Vec::new();
    let mut record_bases = Vec::new();
    let mut row_base = 0u64;
    for (fi, f) in files.iter().enumerate() {
        let mut record_base = 0;
        for (seq, c) in f.chunks.iter().enumerate() {
            jobs.push(ChunkJob {
                file: fi,
                chunk: Chunk {
                    file: fi,
                    seq,
                    range: c.range.clone(),
                },
                row_base,
                expect: c,
                by_places: match by_places {
                    _ if c.places.is_none() => PlacesRead::Ignored,
                    // A filtered Parquet dataset is written from every row decoded: the
                    // chunk is read whole.
                    PlacesRead::Whole if f.input.format == neardup_corpus::Format::Parquet => {
                        PlacesRead::Ignored
                    }
                    other => other,
                },
            });
            record_bases.push(record_base);
            row_base += c.rows;
            record_base += c.records_spanned();
        }
    }
    (jobs, record_bases)
}

/// The deciding thread's end of the channel to the output writer (when there is one).
struct OutputLink {
    tx: Option<crossbeam_channel::Sender<WriterMsg>>,
    /// Set when the writer thread has ended early: its own error says why.
    gone: bool,
}

impl OutputLink {
    fn send(&mut self, msg: WriterMsg) -> Result<(), DedupError> {
        if let Some(tx) = &self.tx
            && tx.send(msg).is_err()
        {
            self.gone = true;
            return Err(DedupError::WriterStopped);
        }
        Ok(())
    }

    /// Ends the writer's input; after a failure, tells it to stop unpublished.
    fn close(&mut self, failed: bool) {
        if let Some(tx) = self.tx.take()
            && failed
        {
            let _ = tx.send(WriterMsg::Abort);
        }
    }
}

/// The deciding thread's side of a stage-2 pass: blocks arrive in input order from the executor,
/// are decided by `decider`, and go on to the writer.
struct Pass<'a, R> {
    jobs: &'a [ChunkJob<'a>],
    record_bases: &'a [u64],
    inputs: &'a [neardup_corpus::InputFile],
    cfg: &'a Stage2Config,
    decider: Decider<'a, R>,
    output: OutputLink,
    spares: crossbeam_channel::Sender<RecycledBuffers>,
    /// Per input: whether a block of it started its output, whether part of it could not be
    /// read, whether its last job ended. An input's output is started by its first block: an
    /// input of which nothing could be read gets no output file (a Parquet file without a
    /// readable footer has no schema to write one with), while one that holds no records gets
    /// an empty one.
    file_started: Vec<bool>,
    file_lost: Vec<bool>,
    file_done: Vec<bool>,
    /// What the current job's blocks held, checked against stage 1's counts at its end.
    job_records: u64,
    job_rows: u64,
}

impl<R: HotRoute> Pass<'_, R> {
    fn on_event(
        &mut self,
        event: neardup_exec::Event<Box<PreparedBlock>, Unreadable>,
    ) -> Result<(), DedupError> {
        match event {
            neardup_exec::Event::Block { job, out } => self.on_block(job, out),
            neardup_exec::Event::ReadError { job, error } => self.on_read_error(job, &error),
            neardup_exec::Event::JobEnd { job } => self.on_job_end(job),
        }
    }

    fn on_block(&mut self, job: usize, mut work: Box<PreparedBlock>) -> Result<(), DedupError> {
        let fi = self.jobs[job].file;
        self.job_records += work.block.num_records() as u64;
        self.job_rows += work.texts;
        if work.block.texts_only() {
            // Counted with the loss before it; only its table rows mattered.
            let _ = self.spares.try_send(RecycledBuffers::from_block(&mut work));
            return Ok(());
        }
        if let Some((sample, found)) = work.bad_rank {
            let record = self.record_bases[job]
                + work.block.first_record
                + u64::from(work.samples[sample as usize].record);
            return Err(DedupError::BadRank(Box::new(BadRank {
                file: self.inputs[fi].path.clone(),
                record,
                prefer: self.cfg.prefer.to_string(),
                found,
            })));
        }
        if !self.file_started[fi] {
            self.file_started[fi] = true;
            self.output.send(WriterMsg::Start(fi))?;
        }
        let keep = self.decider.decide_block(
            &work,
            BlockPlace {
                file: fi as u32,
                record_base: self.record_bases[job],
            },
        );
        // Full means the workers hold enough spares: this one is dropped.
        let _ = self.spares.try_send(RecycledBuffers::from_block(&mut work));
        let keep = keep?;
        if !picked_rows(&work.block) {
            self.decider.stats.bytes += work.block.input_bytes();
        }
        self.decider.stats.bytes_read += work.block.bytes_read().unwrap_or(0);
        self.decider.stats.ranked.0 += u64::from(work.ranked.0);
        self.decider.stats.ranked.1 += u64::from(work.ranked.1);
        self.output
            .send(WriterMsg::Block(work.block, self.record_bases[job], keep))
    }

    fn on_read_error(&mut self, job: usize, lost: &Unreadable) -> Result<(), DedupError> {
        let fi = self.jobs[job].file;
        let range = UnreadableRange::new(&self.inputs[fi].path, self.record_bases[job], lost);
        // As in stage 1: a failed storage request is never skipped.
        if self.cfg.on_error == OnError::Fail || range.is_storage_failure() {
            return Err(DedupError::Input(Box::new(range)));
        }
        self.file_lost[fi] = true;
        let stats = &mut self.decider.stats;
        stats.records_unreadable += range.lost.records.unwrap_or(0);
        stats.unreadable.push(range);
        Ok(())
    }

    fn on_job_end(&mut self, job: usize) -> Result<(), DedupError> {
        let fi = self.jobs[job].file;
        let expect = self.jobs[job].expect;
        match self.jobs[job].places() {
            None => {
                self.decider.stats.bytes_read +=
                    whole_read_bytes(&self.jobs[job], &self.inputs[fi]);
            }
            // The text bytes of the rows passed over are stage 1's count.
            Some(places) if self.inputs[fi].format == neardup_corpus::Format::Parquet => {
                self.decider.stats.bytes += places.input_bytes();
            }
            Some(_) => {}
        }
        let (records, rows) = (self.job_records, self.job_rows);
        (self.job_records, self.job_rows) = (0, 0);
        if records != expect.records || rows != expect.rows {
            return Err(DedupError::Mismatch(Mismatch::ChunkCounts {
                file: self.inputs[fi].path.clone(),
                stage1: (expect.records, expect.rows),
                stage2: (records, rows),
            }));
        }
        let last_of_file = job + 1 == self.jobs.len() || self.jobs[job + 1].file != fi;
        if last_of_file {
            self.file_done[fi] = true;
            if !self.file_started[fi] && self.file_lost[fi] {
                self.decider
                    .stats
                    .files_unreadable
                    .push(self.inputs[fi].path.clone());
            } else {
                if !self.file_started[fi] {
                    self.output.send(WriterMsg::Start(fi))?;
                }
                self.output.send(WriterMsg::End)?;
            }
        }
        Ok(())
    }

    /// After the last job: files without any chunk (nothing to read) still get their (empty)
    /// output.
    fn finish_files(&mut self) -> Result<(), DedupError> {
        for fi in 0..self.inputs.len() {
            if !self.file_done[fi] {
                self.output.send(WriterMsg::Start(fi))?;
                self.output.send(WriterMsg::End)?;
            }
        }
        Ok(())
    }
}

/// The stage-2 pass over `files` (one shard of a distributed run, or the whole input): reads
/// and prepares blocks on worker threads, and on this thread hands them in order to `route`
/// (see [`HotRoute`]), the decisions file, `observe` and the writer. Returns the statistics and
/// the route (to be finished by the caller).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_stage2<R: HotRoute>(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    publication: &Publication,
    observe: &mut dyn FnMut(&Decision),
    route: R,
    addressing: &Addressing<'_>,
) -> Result<(DedupStats, R), DedupError> {
    let started = Instant::now();
    if control.is_cancelled() {
        return Err(DedupError::Interrupted);
    }
    let total_rows: u64 = files.iter().map(|f| f.rows).sum();
    if total_rows != mask.rows() as u64 {
        return Err(DedupError::Mismatch(Mismatch::MaskRows {
            mask: mask.rows() as u64,
            inputs: total_rows,
        }));
    }
    let threads = ExecOptions::threads(cfg.threads).threads;
    let hot_work = route.hot_work(cfg);
    let (jobs, record_bases) = chunk_jobs(files, reads_by_places(cfg));
    let inputs: Vec<neardup_corpus::InputFile> = files.iter().map(|f| f.input.clone()).collect();
    check_sizes(&inputs, false)?;
    if let Some(p) = control.progress() {
        p.set_total(inputs.iter().map(|f| f.size).sum());
    }
    let output: Option<&OutputDir> = publication.dataset();
    let decisions = match &cfg.decisions {
        Some(p) => Some(
            publication
                .file(p)
                .and_then(DecisionWriter::to_file)
                .map_err(output_error)?,
        ),
        None => None,
    };

    let window = threads * 2;
    // Blocks decided and waiting for the writer are no longer counted in the executor's block
    // memory: under a bound, only a couple of them wait.
    let queued_for_writer = if cfg.block_memory.is_some() { 2 } else { 8 };
    let (wtx, wrx) = crossbeam_channel::bounded::<WriterMsg>(queued_for_writer);
    // Spare vectors are as large as the largest block's were, and nothing charges them: under
    // a bound, one is kept whatever the thread count.
    let spares = if cfg.block_memory.is_some() {
        1
    } else {
        window
    };
    let (spare_tx, spare_rx) = crossbeam_channel::bounded::<RecycledBuffers>(spares);
    let prep = PrepareWork {
        mask,
        cfg,
        control,
        hot_work,
        spares: &spare_rx,
        inputs: &inputs,
    };
    let mut pass = Pass {
        jobs: &jobs,
        record_bases: &record_bases,
        inputs: &inputs,
        cfg,
        decider: Decider::new(route, cfg, mask, addressing, decisions, observe),
        output: OutputLink {
            tx: output.is_some().then_some(wtx),
            gone: false,
        },
        spares: spare_tx,
        file_started: vec![false; inputs.len()],
        file_lost: vec![false; inputs.len()],
        file_done: vec![false; inputs.len()],
        job_records: 0,
        job_rows: 0,
    };
    let cancelled = || control.is_cancelled();
    let (ran, written, decided) = std::thread::scope(|scope| {
        let writer = output.map(|out| {
            let inputs = &inputs;
            scope.spawn(move || write_outputs(out, inputs, wrx))
        });
        let ran = neardup_exec::run_ordered(
            &prep,
            &jobs,
            ExecOptions {
                threads,
                window,
                block_memory: cfg.block_memory,
            },
            &cancelled,
            |event| pass.on_event(event),
        );
        let ran = match ran {
            Ok(neardup_exec::Completion::Finished) => pass
                .finish_files()
                .and_then(|()| check_sizes(&inputs, true)),
            Ok(neardup_exec::Completion::Cancelled) => Err(DedupError::Interrupted),
            Err(e) => Err(e),
        };
        pass.output.close(ran.is_err());
        // The decisions are flushed and fsynced while the writer thread finishes the last
        // output: both wait on the disk, and one after the other they added their waits.
        let decided = match ran {
            Ok(()) => pass.decider.take_decisions().map(|d| d.finish()),
            Err(_) => None,
        };
        (
            ran,
            writer.map(|w| w.join().expect("output writer panicked")),
            decided,
        )
    });
    if let Err(e) = ran {
        // A writer that stopped says why (the file and the system's error, e.g. disk full).
        return Err(match written {
            Some(Err(writer_error)) if pass.output.gone => writer_error,
            _ => e,
        });
    }
    let Pass { mut decider, .. } = pass;
    let mut stats = std::mem::take(&mut decider.stats);
    if let Some(w) = written {
        stats.outputs = w?.into_iter().map(OutputFile::from).collect();
    }
    if let Some(d) = decided {
        d.map_err(output_error)?;
    }
    if let Some(deduper) = decider.route.deduper_stats() {
        stats.deduper = deduper;
    }
    stats.clusters = decider.cluster_stats();
    stats.seconds = started.elapsed().as_secs_f64();
    stats.mb_per_second = stats.bytes as f64 / 1e6 / stats.seconds.max(1e-9);
    Ok((stats, decider.route))
}

enum WriterMsg {
    Start(usize),
    Block(Block, u64, Vec<bool>),
    End,
    Abort,
}

fn write_outputs(
    out: &OutputDir,
    inputs: &[neardup_corpus::InputFile],
    rx: crossbeam_channel::Receiver<WriterMsg>,
) -> Result<Vec<WrittenFile>, DedupError> {
    let mut current: Option<FileWriter> = None;
    let mut written = Vec::new();
    for msg in rx {
        match msg {
            WriterMsg::Start(fi) => {
                current = Some(out.file_writer(&inputs[fi]).map_err(output_error)?);
            }
            WriterMsg::Block(block, record_base, keep) => {
                let w = current.as_mut().expect("block before file start");
                w.write_block(&block, record_base, &keep)
                    .map_err(output_error)?;
            }
            WriterMsg::End => {
                let w = current.take().expect("file end before start");
                written.push(w.finish().map_err(output_error)?);
            }
            // What was written stays in the staging directory, which is removed with the
            // unpublished run.
            WriterMsg::Abort => return Ok(written),
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        DeduperConfig, EmptyPolicy, SampleAddr, TextDeduper, TextVerdict, Verdict, run_dedup,
    };
    use neardup_corpus::{FieldPath, InputFile, TextSelector};
    use neardup_exec::CancelToken;
    use neardup_keys::{KeysConfig, RowRule, run_keys};

    use crate::pass::test_settings::sketcher;

    /// Texts with near and exact copies over three files, one of them empty.
    fn inputs(dir: &std::path::Path) -> (Vec<InputFile>, Vec<String>) {
        let base = |b: u64| -> Vec<String> {
            (0..50)
                .map(|i| format!("w{}", (i * 31 + b * 977) % 1009))
                .collect()
        };
        let mut state = 7u64;
        let mut texts = Vec::new();
        for _ in 0..300 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut t = base((state >> 33) % 25);
            for k in 0..(state >> 60) as usize % 4 {
                t[(k * 13 + (state >> 20) as usize) % 50] = format!("x{}", state >> (k + 40));
            }
            texts.push(t.join(" "));
        }
        let mut files = Vec::new();
        for (f, part) in [&texts[..140], &texts[140..], &[]].into_iter().enumerate() {
            let path = dir.join(format!("in-{f}.jsonl"));
            let body: String = part
                .iter()
                .map(|t| format!("{}\n", serde_json_line(t)))
                .collect();
            std::fs::write(&path, body).unwrap();
            let name = std::path::PathBuf::from(path.file_name().unwrap());
            files.push(InputFile::detect(&path, &name, None).unwrap());
        }
        (files, texts)
    }

    fn serde_json_line(text: &str) -> String {
        format!("{{\"text\":\"{text}\"}}")
    }

    fn stage2(threads: usize, block_bytes: usize) -> Stage2Config {
        Stage2Config {
            threads,
            block_bytes,
            ..crate::pass::test_settings::stage2()
        }
    }

    fn keys(files: &[InputFile]) -> neardup_keys::KeysOutput {
        let mut cfg = KeysConfig::new(sketcher(), TextSelector::single(FieldPath::top("text")));
        cfg.chunk_bytes = 4096;
        run_keys(files, 0, &cfg, &StepControl::default()).unwrap()
    }

    fn verdicts(
        files: &[FileRows],
        mask: &HotMask,
        cfg: &Stage2Config,
    ) -> Result<Vec<(SampleAddr, Option<SampleAddr>)>, DedupError> {
        let mut got = Vec::new();
        run_dedup(files, mask, cfg, &StepControl::default(), &mut |d| {
            got.push((d.addr, d.dup_of))
        })?;
        Ok(got)
    }

    #[test]
    fn decisions_are_the_decision_cores_in_input_order_for_any_threads_and_blocks() {
        let tmp = tempfile::tempdir().unwrap();
        let (files, texts) = inputs(tmp.path());
        let stage1 = keys(&files);
        let one = verdicts(&stage1.files, &stage1.mask, &stage2(1, 1 << 16)).unwrap();
        // The core fed the texts one by one against the same hot keys decides the same.
        let mut core = TextDeduper::new(
            sketcher(),
            RowRule::default(),
            DeduperConfig::default(),
            EmptyPolicy::Keep,
        )
        .unwrap()
        .against(&stage1.hot)
        .unwrap();
        let expected: Vec<Verdict> = texts
            .iter()
            .map(|t| match core.check(t).unwrap() {
                TextVerdict::Decided(v) => v,
                TextVerdict::Empty { .. } => Verdict::Unique,
            })
            .collect();
        assert_eq!(one.len(), texts.len());
        let mut drops = 0;
        for (i, ((addr, dup_of), want)) in one.iter().zip(&expected).enumerate() {
            let (file, record) = if i < 140 { (0, i) } else { (1, i - 140) };
            assert_eq!((addr.file, addr.record), (file, record as u64));
            let want_of = match want {
                Verdict::Unique => None,
                Verdict::Near { of, .. } | Verdict::Exact { of, .. } => Some(of.record),
            };
            let got_of = dup_of.map(|a| {
                if a.file == 0 {
                    a.record
                } else {
                    a.record + 140
                }
            });
            assert_eq!(got_of, want_of, "sample {i}");
            drops += usize::from(got_of.is_some());
        }
        assert!(drops > 50, "the texts hold duplicates");
        for (threads, block_bytes) in [(2, 1 << 16), (3, 300), (4, 64)] {
            let other = verdicts(&stage1.files, &stage1.mask, &stage2(threads, block_bytes));
            assert!(
                other.unwrap() == one,
                "{threads} threads, {block_bytes}-byte blocks"
            );
            // Blocks in flight bounded to one at a time beyond the consumer's job: the same.
            let bounded = Stage2Config {
                block_memory: Some(1),
                ..stage2(threads, block_bytes)
            };
            let other = verdicts(&stage1.files, &stage1.mask, &bounded);
            assert!(
                other.unwrap() == one,
                "{threads} threads, {block_bytes}-byte blocks, bounded"
            );
        }
    }

    #[test]
    fn an_input_changed_since_stage_1_or_a_cancelled_run_stops_the_pass() {
        let tmp = tempfile::tempdir().unwrap();
        let (files, _) = inputs(tmp.path());
        let stage1 = keys(&files);
        let path = files[1].path.clone();
        let mut body = std::fs::read_to_string(&path).unwrap();
        body.push_str("{\"text\":\"a record added after stage 1\"}\n");
        std::fs::write(&path, body).unwrap();
        // Appended past the last chunk stage 1 read: only the size says it.
        assert!(stage1.files[1].chunks.len() > 1);
        match verdicts(&stage1.files, &stage1.mask, &stage2(2, 1 << 16)) {
            Err(DedupError::Mismatch(Mismatch::Size { file, stage1, now })) => {
                assert_eq!(file, path);
                assert!(now > stage1);
            }
            other => panic!("{:?}", other.map(|v| v.len())),
        }
        let cancel = CancelToken::default();
        cancel.cancel();
        let control = StepControl::new(None, cancel);
        let r = run_dedup(
            &stage1.files,
            &stage1.mask,
            &stage2(2, 1 << 16),
            &control,
            &mut |_| {},
        );
        assert!(matches!(r, Err(DedupError::Interrupted)));
    }
}
