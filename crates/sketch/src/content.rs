//! Exact-duplicate content hashes.

/// 128-bit xxh3 of the text's UTF-8 bytes (callers pass the normalised text).
///
/// 128 bits keep accidental collisions negligible even for corpora of billions of texts, so an
/// equal content hash can be treated as an exact duplicate without comparing the texts.
pub fn content_hash(text: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_equal_hashes_and_different_texts_differ() {
        assert_eq!(content_hash("abc"), content_hash(&String::from("abc")));
        assert_ne!(content_hash("abc"), content_hash("abd"));
        assert_ne!(content_hash(""), content_hash(" "));
    }
}
