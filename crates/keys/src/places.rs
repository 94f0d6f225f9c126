//! Where each record of a chunk of an uncompressed JSONL file or of a Parquet file lies, and
//! whether stage 2 can decide it without reading it ([`RecordPlaces`]): stage 1 notes both as
//! it reads, compactly, so that stage 2 reads only the records it has to.

/// The records of one chunk of an uncompressed JSONL file or of a Parquet file as stage 1 read
/// them: each one's length (its records lie back to back from `start`; a Parquet row's length
/// is 0, its place being its index in the chunk, which the file's footer turns into a row group
/// and a page), and whether it is *plain*: every sample slot of it held a text that was not
/// blank, so it has exactly `samples_per_record` rows, and when none of them is hot stage 2
/// decides all its samples `unique` (cold) without reading it. A record that is not plain (a
/// blank line, a slot without a text, a blank text) keeps its row count, and stage 2 reads it.
///
/// One to three bytes per record for records under 2 MiB (one per plain Parquet row): per
/// record the LEB128 varint of `length << 1 | plain`, followed for a record that is not plain
/// by the varint of its rows.
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
        }
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
        (self.data.capacity() + size_of::<RecordPlaces>()) as u64
    }

    /// Gives back the encoding's spare capacity.
    pub fn shrink_to_fit(&mut self) {
        self.data.shrink_to_fit();
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
}
