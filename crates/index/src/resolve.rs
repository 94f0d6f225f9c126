//! From an index to the state a run against it starts from: which entries the run's hot keys
//! reach, read back from the indexed runs' files by address and sketched again.

use std::collections::BTreeMap;

use hashbrown::HashMap;
use neardup_corpus::SampleAddr;
use neardup_corpus::{
    Chunk, Projection, ReadOptions, SampleText, TextSelector, current_size, reread_chunk,
};
use neardup_dedup::{PriorCopy, PriorRepresentative, PriorState};
use neardup_keys::{RowKind, RowRule, content_key};
use neardup_sketch::{NO_KEY, Scratch, Sketcher};

use crate::{DROPPED, FileChange, IndexError, SavedIndex, ShingleSets, Sketches, StoredId};

/// How a run reads and sketches the records its hot keys reach.
pub struct ResolveOptions<'a> {
    /// The run's sketch settings (the index's).
    pub sketcher: &'a Sketcher,
    /// The run's row rule.
    pub rule: RowRule,
    /// The run's text selection.
    pub selector: &'a TextSelector,
    /// Whether representatives need their shingle sets (exact verification).
    pub shingles: bool,
    /// Read block size.
    pub block_bytes: usize,
    /// Threads reading back (at least one).
    pub threads: usize,
}

/// One chunk of an indexed file holding records to read back.
struct ChunkJob<'a> {
    file: u32,
    seq: usize,
    /// The file's records before the chunk.
    base: u64,
    /// The records wanted in it (file numbering, ascending).
    records: Vec<u64>,
    /// The file's wanted samples and their slots.
    wanted: &'a HashMap<(u64, u32), usize>,
}

/// What one reached entry is needed for.
#[derive(Clone, Copy, Default)]
struct Need {
    representative: bool,
    copy: bool,
}

impl SavedIndex {
    /// The decision state a run whose hot keys are those for which `hot` is true starts from:
    /// the representatives of its hot buckets (each bucket's first `max_reps` kept entries
    /// holding the key, in order) and the first copies of the texts whose content key is hot,
    /// read back from the indexed runs' files (only the chunks holding them), sketched again and
    /// checked against the keys the index recorded.
    pub fn resolve(
        &self,
        hot: impl Fn(u64) -> bool,
        opts: &ResolveOptions<'_>,
    ) -> Result<PriorState, IndexError> {
        let needs = self.needs(hot);
        if self.self_contained() && (!opts.shingles || self.self_contained_with_shingles()) {
            return Ok(self.stored_state(&needs, &|_, id| id.map(StoredId::to_string)));
        }
        let bands = self.settings.layout.bands;
        let entries: Vec<usize> = needs.iter().map(|(i, _)| *i).collect();
        let (sketched, records_read) = self.read_entries(&entries, opts)?;

        let mut state = PriorState {
            names: self.files.iter().map(|f| f.name.clone()).collect(),
            records_read,
            ..PriorState::default()
        };
        for ((i, need), got) in needs.iter().zip(sketched) {
            let addr = self.addrs[*i];
            let got = self.checked(*i, got, need.representative)?;
            if need.representative {
                state.representatives.push(PriorRepresentative {
                    addr,
                    id: got.id.clone(),
                    signature: got.signature.clone(),
                    shingles: got.shingles.clone(),
                    bands: got.row[..bands].to_vec(),
                });
            }
            if need.copy {
                state.copies.push(PriorCopy {
                    content_hash: got.content_hash,
                    addr,
                    cluster: self.clusters[*i],
                    id: got.id,
                });
            }
        }
        Ok(state)
    }

    /// The whole decision state of a self-contained index (every key hot), from what it
    /// stores, each entry's id named by `id_name` (given the entry's address and stored id):
    /// what the online index starts from. `None` when the index is not self-contained (with
    /// the shingle sets when `shingles`).
    pub fn stored_full_state(
        &self,
        shingles: bool,
        id_name: &dyn Fn(SampleAddr, Option<&StoredId>) -> Option<String>,
    ) -> Option<PriorState> {
        let usable = if shingles {
            self.self_contained_with_shingles()
        } else {
            self.self_contained()
        };
        usable.then(|| self.stored_state(&self.needs(|_| true), id_name))
    }

    /// Which entries a run whose hot keys are those for which `hot` is true reaches, and what
    /// for.
    fn needs(&self, hot: impl Fn(u64) -> bool) -> Vec<(usize, Need)> {
        let bands = self.settings.layout.bands;
        let max_reps = self.settings.max_reps;
        let mut holders: HashMap<u64, usize> = HashMap::new();
        let mut needs: Vec<(usize, Need)> = Vec::new();
        for i in 0..self.addrs.len() {
            let mut need = Need::default();
            if self.band_row[i] != DROPPED {
                let at = self.band_row[i] as usize * bands;
                for &k in &self.bands[at..at + bands] {
                    if k == NO_KEY || !hot(k) {
                        continue;
                    }
                    let n = holders.entry(k).or_insert(0);
                    if max_reps.is_none_or(|m| *n < m) {
                        need.representative = true;
                    }
                    *n += 1;
                }
            }
            let ck = self.content_keys[i];
            need.copy = ck != NO_KEY && hot(ck);
            if need.representative || need.copy {
                needs.push((i, need));
            }
        }
        needs
    }

    /// The state from the sketches the index stores (nothing is read), each entry's id named
    /// by `id_name`.
    fn stored_state(
        &self,
        needs: &[(usize, Need)],
        id_name: &dyn Fn(SampleAddr, Option<&StoredId>) -> Option<String>,
    ) -> PriorState {
        let sk = self.sketches.as_ref().expect("self-contained");
        // The k-th kept entry's shingle set is the k-th stored.
        let mut kept_before = Vec::new();
        if sk.shingles.is_some() {
            let mut k = 0usize;
            kept_before = self
                .band_row
                .iter()
                .map(|r| {
                    let at = k;
                    k += usize::from(*r != DROPPED);
                    at
                })
                .collect();
        }
        let bands = self.settings.layout.bands;
        let mut state = PriorState {
            names: self.files.iter().map(|f| f.name.clone()).collect(),
            ..PriorState::default()
        };
        for &(i, need) in needs {
            if need.representative {
                let row = self.band_row[i] as usize;
                state.representatives.push(PriorRepresentative {
                    addr: self.addrs[i],
                    id: id_name(self.addrs[i], sk.ids[i].as_ref()),
                    signature: sk.signatures[row * sk.num_perm..(row + 1) * sk.num_perm].to_vec(),
                    shingles: sk
                        .shingles
                        .as_ref()
                        .map(|sets| sets.get(kept_before[i]).to_vec()),
                    bands: self.bands[row * bands..(row + 1) * bands].to_vec(),
                });
            }
            if need.copy {
                state.copies.push(PriorCopy {
                    content_hash: sk.content_hashes[i],
                    addr: self.addrs[i],
                    cluster: self.clusters[i],
                    id: id_name(self.addrs[i], sk.ids[i].as_ref()),
                });
            }
        }
        state
    }

    /// Makes the index self-contained: reads back every entry it holds no sketch of yet (one
    /// pass over the files that hold them) and stores its content hash, id and, kept, its
    /// signature; checks each against the keys recorded.
    pub fn store_sketches(&mut self, opts: &ResolveOptions<'_>) -> Result<u64, IndexError> {
        let num_perm = opts.sketcher.num_perm();
        if opts.shingles && self.sketches.as_ref().is_some_and(|s| s.shingles.is_none()) {
            // Stored without shingle sets: read every entry back.
            self.sketches = None;
        }
        let have = self.sketches.as_ref().map_or(0, |s| s.content_hashes.len());
        let entries: Vec<usize> = (have..self.addrs.len()).collect();
        let (sketched, records_read) = self.read_entries(&entries, opts)?;
        let mut sk = self.sketches.take().unwrap_or(Sketches {
            num_perm,
            content_hashes: Vec::new(),
            ids: Vec::new(),
            signatures: Vec::new(),
            shingles: opts.shingles.then(ShingleSets::default),
        });
        for (&i, got) in entries.iter().zip(sketched) {
            let got = self.checked(i, got, self.band_row[i] != DROPPED)?;
            sk.content_hashes.push(got.content_hash);
            sk.ids.push(got.id.map(StoredId::Str));
            if self.band_row[i] != DROPPED {
                sk.signatures.extend_from_slice(&got.signature);
                if let Some(sets) = &mut sk.shingles {
                    sets.push(got.shingles.as_deref().unwrap_or_default());
                }
            }
        }
        self.sketches = Some(sk);
        Ok(records_read)
    }

    /// Reads back `entries` (indices, in order): the chunks holding them, in parallel on
    /// `opts.threads` threads; returns each one's sketch (in the same order; `None` where its
    /// record is gone) and the records read back. Each file's size is checked first.
    fn read_entries(
        &self,
        entries: &[usize],
        opts: &ResolveOptions<'_>,
    ) -> Result<(Vec<Option<Sketched>>, u64), IndexError> {
        let mut by_file: BTreeMap<u32, HashMap<(u64, u32), usize>> = BTreeMap::new();
        for (slot, &i) in entries.iter().enumerate() {
            let a = self.addrs[i];
            by_file
                .entry(a.file)
                .or_default()
                .insert((a.record, a.field), slot);
        }
        let mut jobs: Vec<ChunkJob<'_>> = Vec::new();
        for (&file, wanted) in &by_file {
            let f = &self.files[file as usize];
            self.check_size(file)?;
            let mut records: Vec<u64> = wanted.keys().map(|k| k.0).collect();
            records.sort_unstable();
            records.dedup();
            let mut base = 0u64;
            for (seq, c) in f.chunks.iter().enumerate() {
                let end = base + c.records_spanned();
                let lo = records.partition_point(|r| *r < base);
                let hi = records.partition_point(|r| *r < end);
                if lo < hi {
                    jobs.push(ChunkJob {
                        file,
                        seq,
                        base,
                        records: records[lo..hi].to_vec(),
                        wanted,
                    });
                }
                base = end;
            }
        }
        let mut workers: Vec<SampleSketcher<'_>> = (0..opts.threads.max(1))
            .map(|_| SampleSketcher::new(opts))
            .collect();
        let done = neardup_exec::map_in_parts(&jobs, &mut workers, |sketcher, job| {
            self.read_chunk_back(job, opts, sketcher)
        });
        let mut sketched: Vec<Option<Sketched>> = vec![None; entries.len()];
        let mut records_read = 0u64;
        for result in done {
            let (read, got) = result?;
            records_read += read;
            for (slot, s) in got {
                sketched[slot] = Some(s);
            }
        }
        Ok((sketched, records_read))
    }

    /// Refuses a file of the index whose size changed since, or that is gone.
    fn check_size(&self, file: u32) -> Result<(), IndexError> {
        let f = &self.files[file as usize];
        let path = &f.input.path;
        match current_size(path) {
            Ok(size) if size == f.input.size => Ok(()),
            Ok(size) => Err(IndexError::Changed {
                file: path.clone(),
                change: FileChange::Size {
                    was: f.input.size,
                    now: size,
                },
            }),
            Err(e) => Err(IndexError::Missing {
                file: path.clone(),
                error: e,
            }),
        }
    }

    /// Reads one chunk back, sketching the wanted samples of its records; returns the records
    /// read back and each sample's slot and sketch.
    fn read_chunk_back(
        &self,
        job: &ChunkJob<'_>,
        opts: &ResolveOptions<'_>,
        sketcher: &mut SampleSketcher<'_>,
    ) -> Result<(u64, Vec<(usize, Sketched)>), IndexError> {
        let f = &self.files[job.file as usize];
        let c = &f.chunks[job.seq];
        let read_opts = ReadOptions {
            selector: opts.selector.clone(),
            projection: Projection::TextOnly,
            block_bytes: opts.block_bytes,
        };
        let chunk = Chunk {
            file: 0,
            seq: job.seq,
            range: c.range.clone(),
        };
        let mut read = 0u64;
        let mut got = Vec::new();
        for block in reread_chunk(&f.input, &chunk, &read_opts, &c.unreadable) {
            let block = block.map_err(|e| IndexError::Unreadable {
                file: f.input.path.clone(),
                error: Box::new(e),
            })?;
            let block_first = job.base + block.first_record;
            let block_end = block_first + block.num_records() as u64;
            let lo = job.records.partition_point(|r| *r < block_first);
            let hi = job.records.partition_point(|r| *r < block_end);
            let local: Vec<usize> = job.records[lo..hi]
                .iter()
                .map(|r| (r - block_first) as usize)
                .collect();
            read += local.len() as u64;
            block.for_each_sample_of(opts.selector, &local, |s| {
                let record = block_first + s.record as u64;
                let Some(&slot) = job.wanted.get(&(record, s.field)) else {
                    return;
                };
                if let SampleText::Text(text) = &s.text
                    && let Some(sketch) = sketcher.sketch(text, s.id.as_deref())
                {
                    got.push((slot, sketch));
                }
            });
        }
        Ok((read, got))
    }

    /// An entry read back, checked against the keys the index recorded for it.
    fn checked(
        &self,
        i: usize,
        got: Option<Sketched>,
        representative: bool,
    ) -> Result<Sketched, IndexError> {
        let addr = self.addrs[i];
        let file = &self.files[addr.file as usize].input.path;
        let got = got.ok_or_else(|| IndexError::Changed {
            file: file.clone(),
            change: FileChange::RecordGone {
                record: addr.record,
                field: addr.field,
            },
        })?;
        let bands = self.settings.layout.bands;
        let changed = || IndexError::Changed {
            file: file.clone(),
            change: FileChange::Text {
                record: addr.record,
            },
        };
        if self.content_keys[i] != NO_KEY && content_key(got.content_hash) != self.content_keys[i] {
            return Err(changed());
        }
        if representative {
            let at = self.band_row[i] as usize * bands;
            if got.row[..bands] != self.bands[at..at + bands] {
                return Err(changed());
            }
        }
        Ok(got)
    }
}

/// One sample read back and sketched.
#[derive(Clone)]
struct Sketched {
    row: Vec<u64>,
    signature: Vec<u32>,
    shingles: Option<Vec<u32>>,
    content_hash: u128,
    id: Option<String>,
}

struct SampleSketcher<'a> {
    opts: &'a ResolveOptions<'a>,
    scratch: Scratch,
    sig: Vec<u32>,
    row: Vec<u64>,
}

impl<'a> SampleSketcher<'a> {
    fn new(opts: &'a ResolveOptions<'a>) -> SampleSketcher<'a> {
        SampleSketcher {
            scratch: if opts.shingles {
                Scratch::collecting_shingle_sets()
            } else {
                Scratch::default()
            },
            sig: vec![0; opts.sketcher.num_perm()],
            row: vec![0; opts.rule.columns(opts.sketcher.bands())],
            opts,
        }
    }

    fn sketch(&mut self, text: &str, id: Option<&str>) -> Option<Sketched> {
        let r = self.opts.rule.sketch(
            self.opts.sketcher,
            text,
            &mut self.scratch,
            &mut self.sig,
            &mut self.row,
        );
        if r.kind == RowKind::Blank {
            return None;
        }
        let shingles = self.opts.shingles.then(|| {
            let mut set = Vec::new();
            self.opts
                .sketcher
                .last_shingle_set(&mut self.scratch, &mut set);
            set
        });
        Some(Sketched {
            row: self.row.clone(),
            signature: self.sig.clone(),
            shingles,
            content_hash: r.content_hash,
            id: id.map(str::to_string),
        })
    }
}
