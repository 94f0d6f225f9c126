//! The native jieba against Python's: the words Python's jieba 0.42.1 cut 400 real Chinese
//! sentences into (the translations of Debian's gettext catalogs, `tests/data/cjk/make.py`).
//!
//! The Chinese words are the same; the ASCII runs between them are cut by jieba-rs's own rules,
//! which differ from Python's at symbols (Python keeps `-+` whole and splits `LC_ALL` at the
//! underscore), so those are compared as text, not as tokens.

use std::path::Path;

use neardup_segment::jieba;

fn lines(name: &str) -> Vec<serde_json::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/cjk")
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn native_jieba_cuts_chinese_words_of_real_sentences_as_python_jieba_does() {
    let texts = lines("zh.jsonl");
    let expected = lines("zh-jieba.jsonl");
    assert_eq!(texts.len(), 400);
    assert_eq!(texts.len(), expected.len());
    let tokenizer = jieba();
    let mut differ = Vec::new();
    let han = |w: &str| w.chars().any(|c| ('\u{4E00}'..='\u{9FFF}').contains(&c));
    let mut same = 0;
    for (text, want) in texts.iter().zip(&expected) {
        let text = text["text"].as_str().unwrap();
        let want: Vec<&str> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        let mut got = Vec::new();
        tokenizer.tokenize(text, &mut |w| got.push(w.to_string()));
        same += usize::from(got == want);
        // The words with Chinese characters, in order, are Python's.
        let words = |ws: &[&str]| {
            ws.iter()
                .filter(|w| han(w))
                .map(|w| w.to_string())
                .collect::<Vec<_>>()
        };
        let got_refs: Vec<&str> = got.iter().map(String::as_str).collect();
        if words(&got_refs) != words(&want) {
            differ.push(text);
        }
        // Every other token covers the same text.
        let rest = |ws: &[&str]| ws.iter().filter(|w| !han(w)).copied().collect::<String>();
        assert_eq!(rest(&got_refs), rest(&want), "{text}");
    }
    assert!(
        differ.is_empty(),
        "Chinese words cut differently: {differ:#?}"
    );
    assert!(
        same >= 360,
        "{same} of 400 sentences cut the same in every token"
    );
}
