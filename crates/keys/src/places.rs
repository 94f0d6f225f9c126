//! Where each record of a chunk of a JSONL file or of a Parquet file lies, and whether stage 2
//! can decide it without reading it ([`RecordPlaces`]): stage 1 notes both as it reads, compactly, so that stage 2
//! reads only the records it has to. Of a compressed file (a gzip file of several members, a
//! zstd file of several frames) the places are offsets in its decompressed stream, and where
//! its members start goes with them ([`neardup_corpus::ResumePoint`]). A key-table file carries them after its
//! keys ([`PlacesEntry`] in its header says what each chunk's bytes are), so the staged and
//! distributed steps read only what they have to as well.

use neardup_corpus::ResumePoint;
use serde::{Deserialize, Serialize};

/// The records of one chunk of a JSONL file or of a Parquet file as stage 1 read them: each
/// one's length (its records lie back to back from `start`; a Parquet row's length is 0, its
/// place being its index in the chunk, which the file's footer turns into a row group and a
/// page), and whether it is *plain*: every sample
/// slot of it held a text that was not blank, so it has exactly `samples_per_record` rows, and
/// when none of them is hot stage 2 decides all its samples `unique` (cold) without reading it.
/// A record that is not plain (a blank line, a slot without a text, a blank text) keeps its
/// row count, and stage 2 reads it.
///
/// One to three bytes per record for records under 2 MiB (one per plain Parquet row): per record the LEB128 varint of
/// `length << 1 | plain`, followed for a record that is not plain by the varint of its rows.
/// Then, of a compressed file, each member's start ([`ResumePoint`]) as the varints of its
/// compressed and decompressed offsets past the member's before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordPlaces {
    start: u64,
    end: u64,
    records: u64,
    samples_per_record: u32,
    /// The input bytes stage 1 counted for the records (`neardup_corpus::Block::input_bytes`):
    /// what stage 2 counts for those it passes over unread, where their bytes are not a span of
    /// the file (the text bytes of Parquet rows).
    input_bytes: u64,
    data: Vec<u8>,
    /// The members' starts, encoded.
    resumes: Vec<u8>,
    /// How many, and the last.
    resume_count: u64,
    last_resume: ResumePoint,
}

/// What a key-table file's header says of one chunk's [`RecordPlaces`], whose encoding
/// ([`RecordPlaces::encoded`], `bytes` long) follows the table's keys, in the order of the
/// header's entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PlacesEntry {
    /// The chunk's file: its index in the header's files.
    pub file: u64,
    /// The chunk: its index in its file's chunks.
    pub chunk: u64,
    /// The file offset of its first record.
    pub start: u64,
    /// The file offset after its last record.
    pub end: u64,
    /// Its records.
    pub records: u64,
    /// The rows of a plain record.
    pub samples_per_record: u32,
    /// The length of the encoding.
    pub bytes: u64,
    /// Of those, the members' starts' (the last bytes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resume_bytes: u64,
    /// [`RecordPlaces::input_bytes`] (0, and left out, but for a Parquet chunk).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub input_bytes: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

const NO_RESUME: ResumePoint = ResumePoint {
    compressed: 0,
    decompressed: 0,
};

/// What the places of the records ([`RecordPlaces`]) held in memory may take: a 16th of the
/// memory limit (one to three bytes a record). Past it stage 1 drops them, and a step reading
/// a key table leaves them unread: stage 2 then reads every record.
pub fn places_budget(memory_limit: Option<u64>) -> u64 {
    memory_limit.map_or(u64::MAX, |limit| limit / 16)
}

/// One record of [`RecordPlaces`], decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordPlace {
    /// The file offset of its first byte.
    pub offset: u64,
    /// Its line's length, the line end included.
    pub len: u64,
    /// Its table rows (its samples with a text).
    pub rows: u32,
    /// Whether every sample slot of it held a text that was not blank.
    pub plain: bool,
}

impl RecordPlaces {
    /// No records yet, the first to start at file offset `start`; records with a text in every
    /// slot have `samples_per_record` rows.
    pub fn new(start: u64, samples_per_record: u32) -> RecordPlaces {
        RecordPlaces {
            start,
            end: start,
            records: 0,
            samples_per_record,
            input_bytes: 0,
            data: Vec::new(),
            resumes: Vec::new(),
            resume_count: 0,
            last_resume: NO_RESUME,
        }
    }

    /// Adds where the next member of a compressed file starts (after those added so far, in
    /// both offsets).
    pub fn push_resume(&mut self, point: ResumePoint) {
        debug_assert!(
            self.resume_count == 0
                || (point.compressed > self.last_resume.compressed
                    && point.decompressed >= self.last_resume.decompressed)
        );
        push_varint(
            &mut self.resumes,
            point.compressed - self.last_resume.compressed,
        );
        push_varint(
            &mut self.resumes,
            point.decompressed - self.last_resume.decompressed,
        );
        self.resume_count += 1;
        self.last_resume = point;
    }

    /// How many members' starts were added ([`RecordPlaces::push_resume`]): none for an
    /// uncompressed file.
    pub fn resume_count(&self) -> u64 {
        self.resume_count
    }

    /// The members' starts, in order.
    pub fn resume_points(&self) -> Vec<ResumePoint> {
        let (mut at, mut last, mut out) = (0, NO_RESUME, Vec::new());
        while at < self.resumes.len() {
            last.compressed += read_varint(&self.resumes, &mut at);
            last.decompressed += read_varint(&self.resumes, &mut at);
            out.push(last);
        }
        out
    }

    /// Adds the next record: `len` bytes, `rows` rows, plain or not (see the type's docs; a
    /// plain record must have `samples_per_record` rows).
    pub fn push(&mut self, len: u64, rows: u32, plain: bool) {
        debug_assert!(!plain || rows == self.samples_per_record);
        push_varint(&mut self.data, len << 1 | u64::from(plain));
        if !plain {
            push_varint(&mut self.data, u64::from(rows));
        }
        self.records += 1;
        self.end += len;
    }

    /// Appends the records of `next`, which must start where these end (the next block of the
    /// same chunk); `false` (and nothing appended) when it does not.
    pub fn append(&mut self, next: &RecordPlaces) -> bool {
        if next.start != self.end || next.samples_per_record != self.samples_per_record {
            return false;
        }
        self.data.extend_from_slice(&next.data);
        for p in next.resume_points() {
            self.push_resume(p);
        }
        self.records += next.records;
        self.end = next.end;
        true
    }

    /// The file offset of the first record.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The file offset after the last record.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Records held.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The input bytes stage 1 counted for these records (`neardup_corpus::Block::input_bytes`
    /// of the blocks they came in).
    pub fn input_bytes(&self) -> u64 {
        self.input_bytes
    }

    /// Notes the input bytes stage 1 counted for these records.
    pub fn set_input_bytes(&mut self, bytes: u64) {
        self.input_bytes = bytes;
    }

    /// The memory held.
    pub fn memory_bytes(&self) -> u64 {
        (self.data.capacity() + self.resumes.capacity() + size_of::<RecordPlaces>()) as u64
    }

    /// Gives back the encoding's spare capacity.
    pub fn shrink_to_fit(&mut self) {
        self.data.shrink_to_fit();
        self.resumes.shrink_to_fit();
    }

    /// The header entry of these places as the chunk `chunk` of file `file` of a key table.
    pub(crate) fn entry(&self, file: usize, chunk: usize) -> PlacesEntry {
        PlacesEntry {
            file: file as u64,
            chunk: chunk as u64,
            start: self.start,
            end: self.end,
            records: self.records,
            samples_per_record: self.samples_per_record,
            bytes: (self.data.len() + self.resumes.len()) as u64,
            resume_bytes: self.resumes.len() as u64,
            input_bytes: self.input_bytes,
        }
    }

    /// The encoding a key-table file holds (see the type's docs), in two parts.
    pub(crate) fn encoded(&self) -> [&[u8]; 2] {
        [&self.data, &self.resumes]
    }

    /// The places `entry` describes, from their encoding `data` read back from a file, checked
    /// to be what it says (its records, their bytes from `start` to `end`, `rows` rows in all),
    /// so that no damage the checksum missed can make a reader fail or misread. `None` when
    /// they are not.
    pub(crate) fn decode(
        entry: &PlacesEntry,
        mut data: Vec<u8>,
        rows: u64,
    ) -> Option<RecordPlaces> {
        if data.len() as u64 != entry.bytes
            || entry.start > entry.end
            || entry.resume_bytes > entry.bytes
        {
            return None;
        }
        let resumes = data.split_off((entry.bytes - entry.resume_bytes) as usize);
        let mut places = RecordPlaces::new(entry.start, entry.samples_per_record);
        places.input_bytes = entry.input_bytes;
        let mut at = 0;
        while at < resumes.len() {
            let compressed = try_read_varint(&resumes, &mut at)?;
            let decompressed = try_read_varint(&resumes, &mut at)?;
            if places.resume_count > 0 && compressed == 0 {
                return None;
            }
            places.push_resume(ResumePoint {
                compressed: places.last_resume.compressed.checked_add(compressed)?,
                decompressed: places.last_resume.decompressed.checked_add(decompressed)?,
            });
        }
        let (mut at, mut records, mut bytes, mut seen_rows) = (0usize, 0u64, 0u64, 0u64);
        while at < data.len() {
            let word = try_read_varint(&data, &mut at)?;
            let rows = if word & 1 == 1 {
                u64::from(entry.samples_per_record)
            } else {
                u32::try_from(try_read_varint(&data, &mut at)?).ok()?.into()
            };
            records += 1;
            bytes = bytes.checked_add(word >> 1)?;
            seen_rows = seen_rows.checked_add(rows)?;
        }
        (records == entry.records && bytes == entry.end - entry.start && seen_rows == rows)
            .then_some(RecordPlaces {
                end: entry.end,
                records,
                data,
                ..places
            })
    }

    /// The records, in order.
    pub fn iter(&self) -> impl Iterator<Item = RecordPlace> + '_ {
        let mut at = 0usize;
        let mut offset = self.start;
        std::iter::from_fn(move || {
            if at >= self.data.len() {
                return None;
            }
            let word = read_varint(&self.data, &mut at);
            let (len, plain) = (word >> 1, word & 1 == 1);
            let rows = if plain {
                self.samples_per_record
            } else {
                read_varint(&self.data, &mut at) as u32
            };
            let place = RecordPlace {
                offset,
                len,
                rows,
                plain,
            };
            offset += len;
            Some(place)
        })
    }
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(data: &[u8], at: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let b = data[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// [`read_varint`] of bytes that may be damaged: `None` past their end or over 64 bits.
fn try_read_varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let b = *data.get(*at)?;
        *at += 1;
        if shift > 63 || (shift == 63 && b > 1) {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_as_pushed_and_appended() {
        let mut a = RecordPlaces::new(100, 2);
        a.push(10, 2, true);
        a.push(1, 0, false);
        a.push(300, 1, false);
        let mut b = RecordPlaces::new(411, 2);
        b.push(5 << 40, 2, true);
        assert!(a.append(&b));
        assert!(!a.append(&RecordPlaces::new(7, 2)), "not contiguous");
        let got: Vec<_> = a.iter().collect();
        let place = |offset, len, rows, plain| RecordPlace {
            offset,
            len,
            rows,
            plain,
        };
        assert_eq!(
            got,
            vec![
                place(100, 10, 2, true),
                place(110, 1, 0, false),
                place(111, 300, 1, false),
                place(411, 5 << 40, 2, true),
            ]
        );
        assert_eq!((a.start(), a.end(), a.records()), (100, 411 + (5 << 40), 4));
        // A plain record of a short line takes one byte.
        let mut c = RecordPlaces::new(0, 1);
        c.push(63, 1, true);
        assert_eq!(c.data.len(), 1);
    }

    #[test]
    fn places_decode_from_their_entry_and_damage_is_refused() {
        let mut a = RecordPlaces::new(100, 2);
        a.push(10, 2, true);
        a.push(1, 0, false);
        a.push(300, 1, false);
        let encoded = |p: &RecordPlaces| p.encoded().concat();
        let entry = a.entry(3, 1);
        assert_eq!((entry.file, entry.chunk, entry.bytes), (3, 1, 6));
        let back = RecordPlaces::decode(&entry, encoded(&a), 3).unwrap();
        assert_eq!(back, a);
        // The wrong rows, a cut encoding, a changed length or record count: refused.
        assert!(RecordPlaces::decode(&entry, encoded(&a), 4).is_none());
        let mut cut = encoded(&a);
        cut.pop();
        assert!(RecordPlaces::decode(&entry, cut, 3).is_none());
        let mut longer = encoded(&a);
        longer[0] += 2;
        assert!(RecordPlaces::decode(&entry, longer, 3).is_none());
        let mut more = entry.clone();
        more.records += 1;
        assert!(RecordPlaces::decode(&more, encoded(&a), 3).is_none());
        // With members' starts (a compressed file), appended block by block.
        let point = |compressed, decompressed| ResumePoint {
            compressed,
            decompressed,
        };
        let mut z = RecordPlaces::new(0, 1);
        z.push_resume(point(0, 0));
        z.push(10, 1, true);
        z.push_resume(point(300, 4));
        let mut next = RecordPlaces::new(10, 1);
        next.push(7, 1, true);
        next.push_resume(point(1 << 33, 12));
        assert!(z.append(&next));
        assert_eq!(z.resume_count(), 3);
        assert_eq!(
            z.resume_points(),
            vec![point(0, 0), point(300, 4), point(1 << 33, 12)]
        );
        let entry = z.entry(0, 0);
        assert!(entry.resume_bytes > 0);
        assert_eq!(RecordPlaces::decode(&entry, encoded(&z), 2).unwrap(), z);
        let mut bad = entry.clone();
        bad.resume_bytes = 1;
        assert!(RecordPlaces::decode(&bad, encoded(&z), 2).is_none());
        // A varint running past 64 bits.
        let mut huge = entry.clone();
        huge.bytes = 11;
        assert!(RecordPlaces::decode(&huge, vec![0xff; 11], 3).is_none());
    }
}
