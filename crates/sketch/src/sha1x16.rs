//! SHA-1 of sixteen short messages at once, one per 32-bit lane of AVX-512 registers.
//!
//! The datasketch scheme hashes every shingle with SHA-1 and keeps 4 bytes. Shingles are short
//! (one padded 64-byte block), and a single SHA-1 stream is a chain of 80 dependent rounds, so
//! even the SHA-NI instructions leave most of the core idle. Sixteen independent messages in the
//! lanes of one register do the same rounds with full-width vector operations.
//!
//! Only the first state word of each digest is produced (the scheme's hash is the digest's
//! first 4 bytes). Bit-exactness is tested against the `sha1` crate.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use neardup_cpu::{Feature, Features};

use crate::sha1_block::{H0, MAX_LEN, padded_block};

/// Lanes per batch.
pub(crate) const LANES: usize = 16;

const K: [u32; 4] = [0x5A82_7999, 0x6ED9_EBA1, 0x8F1B_BCDC, 0xCA62_C1D6];

/// Up to [`LANES`] messages of at most [`MAX_LEN`] bytes, padded into their blocks as they are
/// added.
pub(crate) struct Batch {
    blocks: [[u8; 64]; LANES],
    len: usize,
}

impl Batch {
    pub(crate) fn new() -> Batch {
        Batch {
            blocks: [[0; 64]; LANES],
            len: 0,
        }
    }

    /// Messages added since the last [`Batch::clear`].
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// The message in lane `i`, as added (for finishing a small batch one by one).
    pub(crate) fn message(&self, i: usize) -> &[u8] {
        let bits = u64::from_be_bytes(self.blocks[i][56..].try_into().expect("8 bytes"));
        &self.blocks[i][..(bits / 8) as usize]
    }

    /// Adds a message to the next free lane.
    ///
    /// # Panics
    /// When the batch is full or `message` is longer than [`MAX_LEN`].
    pub(crate) fn push(&mut self, message: &[u8]) {
        assert!(message.len() <= MAX_LEN && self.len < LANES);
        self.blocks[self.len] = padded_block(message);
        self.len += 1;
    }

    /// Whether [`Batch::first_words`] can run on this CPU.
    pub(crate) fn supported() -> bool {
        Features::detected().has_all(&[Feature::Avx512F, Feature::Avx512Bw])
    }

    /// The first state word of each lane's SHA-1 digest (lanes past [`Batch::len`] hold
    /// leftovers and are meaningless), or `None` when the CPU lacks AVX-512.
    pub(crate) fn first_words(&self) -> Option<[u32; LANES]> {
        if !Self::supported() {
            return None;
        }
        // SAFETY: the required CPU features were just checked.
        Some(unsafe { self.first_words_avx512() })
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    #[expect(
        unused_assignments,
        reason = "the last round's b..e are dead: only the first state word is produced"
    )]
    fn first_words_avx512(&self) -> [u32; LANES] {
        let mut out = [0u32; LANES];
        // SAFETY: the loads read the 16 blocks of 64 bytes, the store the 16 words of `out`.
        unsafe {
            // Message words are big-endian.
            let bswap = _mm512_set4_epi32(0x0c0d_0e0f, 0x0809_0a0b, 0x0405_0607, 0x0001_0203);
            let rows: [__m512i; 16] = std::array::from_fn(|lane| {
                _mm512_shuffle_epi8(_mm512_loadu_si512(self.blocks[lane].as_ptr().cast()), bswap)
            });
            let mut w = transpose(rows);
            let [mut a, mut b, mut c, mut d, mut e] = H0.map(|h| _mm512_set1_epi32(h as i32));
            // Fully unrolled (a macro per round, `T` a constant): the message schedule then
            // stays in registers and the round function is chosen at compile time.
            macro_rules! round {
                ($t:literal) => {{
                    const T: usize = $t;
                    if T >= 16 {
                        let x = _mm512_ternarylogic_epi32::<0x96>(
                            w[(T + 13) % 16],
                            w[(T + 8) % 16],
                            w[(T + 2) % 16],
                        );
                        w[T % 16] = _mm512_rol_epi32::<1>(_mm512_xor_si512(x, w[T % 16]));
                    }
                    // Ch, Parity, Maj, Parity as three-input truth tables.
                    let f = match T / 20 {
                        0 => _mm512_ternarylogic_epi32::<0xCA>(b, c, d),
                        2 => _mm512_ternarylogic_epi32::<0xE8>(b, c, d),
                        _ => _mm512_ternarylogic_epi32::<0x96>(b, c, d),
                    };
                    let k = _mm512_set1_epi32(K[T / 20] as i32);
                    let temp = _mm512_add_epi32(
                        _mm512_add_epi32(_mm512_rol_epi32::<5>(a), f),
                        _mm512_add_epi32(_mm512_add_epi32(e, k), w[T % 16]),
                    );
                    e = d;
                    d = c;
                    c = _mm512_rol_epi32::<30>(b);
                    b = a;
                    a = temp;
                }};
            }
            macro_rules! rounds {
                ($($t:literal)*) => { $(round!($t);)* };
            }
            rounds!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79);
            let first = _mm512_add_epi32(a, _mm512_set1_epi32(H0[0] as i32));
            _mm512_storeu_si512(out.as_mut_ptr().cast(), first);
        }
        out
    }
}

/// 16 x 16 transpose of u32: `rows[i]` holds message `i`'s 16 words; the result's vector `t`
/// holds word `t` of every message. Three rounds of in-lane unpacks and 128-bit lane shuffles
/// instead of 16 gathers.
#[target_feature(enable = "avx512f")]
fn transpose(rows: [__m512i; 16]) -> [__m512i; 16] {
    // Pairs of rows interleaved by dword, then by qword: vector 4j + m has, in 128-bit lane L,
    // word 4L + m of messages 4j..4j + 4.
    let t: [__m512i; 16] = std::array::from_fn(|i| {
        let (x, y) = (rows[i & !1], rows[i | 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_epi32(x, y)
        } else {
            _mm512_unpackhi_epi32(x, y)
        }
    });
    let u: [__m512i; 16] = std::array::from_fn(|i| {
        let (j, m) = (i / 4, i % 4);
        let (x, y) = (t[4 * j + m / 2], t[4 * j + 2 + m / 2]);
        if m % 2 == 0 {
            _mm512_unpacklo_epi64(x, y)
        } else {
            _mm512_unpackhi_epi64(x, y)
        }
    });
    // Gather lane L of vectors m, 4 + m, 8 + m, 12 + m into word 4L + m.
    let mut w = [_mm512_setzero_si512(); 16];
    for m in 0..4 {
        let even_01 = _mm512_shuffle_i32x4::<0x88>(u[m], u[4 + m]);
        let odd_01 = _mm512_shuffle_i32x4::<0xDD>(u[m], u[4 + m]);
        let even_23 = _mm512_shuffle_i32x4::<0x88>(u[8 + m], u[12 + m]);
        let odd_23 = _mm512_shuffle_i32x4::<0xDD>(u[8 + m], u[12 + m]);
        w[m] = _mm512_shuffle_i32x4::<0x88>(even_01, even_23);
        w[8 + m] = _mm512_shuffle_i32x4::<0xDD>(even_01, even_23);
        w[4 + m] = _mm512_shuffle_i32x4::<0x88>(odd_01, odd_23);
        w[12 + m] = _mm512_shuffle_i32x4::<0xDD>(odd_01, odd_23);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha1::{Digest, Sha1};

    /// The reference: the first state word of `m`'s digest by the sha1 crate.
    fn sha1_first_word(m: &[u8]) -> u32 {
        let digest = Sha1::digest(m);
        u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        if !Batch::supported() {
            return;
        }
        let m: [[u32; 16]; 16] =
            std::array::from_fn(|i| std::array::from_fn(|j| (i * 100 + j) as u32));
        // SAFETY: AVX-512 support was checked above; loads and stores are of whole arrays.
        let got: [[u32; 16]; 16] = unsafe {
            let rows = std::array::from_fn(|i| _mm512_loadu_si512(m[i].as_ptr().cast()));
            let cols = transpose(rows);
            std::array::from_fn(|j| {
                let mut v = [0u32; 16];
                _mm512_storeu_si512(v.as_mut_ptr().cast(), cols[j]);
                v
            })
        };
        for (j, col) in got.iter().enumerate() {
            for (i, &x) in col.iter().enumerate() {
                assert_eq!(x, m[i][j], "row {i} col {j}");
            }
        }
    }

    #[test]
    fn sixteen_lanes_equal_the_sha1_crate_for_every_length() {
        if !Batch::supported() {
            return;
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut batch = Batch::new();
        for round in 0..40 {
            batch.clear();
            let messages: Vec<Vec<u8>> = (0..LANES)
                .map(|lane| {
                    let len = (round * LANES + lane) % (MAX_LEN + 1);
                    (0..len).map(|_| next() as u8).collect()
                })
                .collect();
            for m in &messages {
                batch.push(m);
            }
            let got = batch.first_words().unwrap();
            for (lane, m) in messages.iter().enumerate() {
                assert_eq!(got[lane], sha1_first_word(m), "len {}", m.len());
                assert_eq!(batch.message(lane), &m[..]);
            }
        }
    }

    proptest::proptest! {
        /// A batch of any size (a text's last batch is partial) and any message lengths up to
        /// one block gives the first digest word of every message. Only where the CPU has
        /// AVX-512: elsewhere the datasketch scheme never builds batches (its scalar hash is
        /// tested against the sha1 crate in `minhash::datasketch`).
        #[test]
        fn any_batch_equals_the_sha1_crate(
            messages in proptest::collection::vec(
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=MAX_LEN),
                1..=LANES,
            ),
        ) {
            if Batch::supported() {
                let mut batch = Batch::new();
                for m in &messages {
                    batch.push(m);
                }
                let got = batch.first_words().unwrap();
                for (lane, m) in messages.iter().enumerate() {
                    proptest::prop_assert_eq!(got[lane], sha1_first_word(m), "len {}", m.len());
                }
            }
        }
    }
}
