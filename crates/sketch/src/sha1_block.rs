//! SHA-1 of a message short enough for one 64-byte block: the padding and the initial state,
//! shared by the datasketch scheme's scalar shingle hash (`minhash::datasketch`) and the
//! sixteen-lane AVX-512 one (`sha1x16`).

/// The longest message that fits one block with its padding (0x80 and the 8-byte length).
pub(crate) const MAX_LEN: usize = 55;

/// SHA-1's initial state.
pub(crate) const H0: [u32; 5] = [
    0x6745_2301,
    0xEFCD_AB89,
    0x98BA_DCFE,
    0x1032_5476,
    0xC3D2_E1F0,
];

/// `message` (at most [`MAX_LEN`] bytes) padded into its one block.
#[inline]
pub(crate) fn padded_block(message: &[u8]) -> [u8; 64] {
    debug_assert!(message.len() <= MAX_LEN);
    let mut block = [0u8; 64];
    block[..message.len()].copy_from_slice(message);
    block[message.len()] = 0x80;
    block[56..].copy_from_slice(&(message.len() as u64 * 8).to_be_bytes());
    block
}
