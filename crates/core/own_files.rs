//! Which files neardup wrote, told by a bounded read of their start: a single-file output
//! replaces an existing file only when it is neardup's own file of the output's kind (or empty,
//! holding nothing to lose), so that a mistyped path never destroys the user's file
//! ([`crate::RunPaths::write_file`] registers each output with its [`OwnFile`] kind and
//! [`crate::RunPaths::check`] refuses any other file). A leaf of the facade: the binary formats
//! are recognised by their owners' magic (key tables and hot-key files in `neardup-keys`, saved
//! indexes in `neardup-index`), decisions by `neardup-corpus`, reports here.

use std::fmt;
use std::io::{self, Read};
use std::path::Path;

/// Bytes of a JSON report's start read to recognise it: its first keys (after the inputs, in
/// reports of older versions), whatever its size.
const REPORT_PREFIX: u64 = 1 << 20;

/// What kind of file a single-file output is, so what existing file it may replace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnFile {
    /// A decisions file (JSONL or Parquet, any version).
    Decisions,
    /// A JSON report of any of neardup's commands or steps (a run's, `keys`', `hot`'s,
    /// `sign`'s, `decide`'s, `eval`'s).
    Report,
    /// A key table (`neardup keys -o`).
    KeyTable,
    /// A hot-key file (`neardup hot -o`).
    HotKeys,
    /// A saved index (`--index-out`, `neardup index -o`).
    Index,
}

impl OwnFile {
    /// What messages call a file of this kind: "not {a decisions file}".
    pub(crate) fn name(self) -> &'static str {
        match self {
            OwnFile::Decisions => "a decisions file",
            OwnFile::Report => "a neardup report",
            OwnFile::KeyTable => "a key table",
            OwnFile::HotKeys => "a hot-key file",
            OwnFile::Index => "a neardup index",
        }
    }

    /// Whether the regular file at `path` may be replaced by an output of this kind: neardup's
    /// own file of the kind, or an empty file. Reads at most a bounded prefix (and, for a
    /// Parquet decisions file, its footer).
    pub(crate) fn may_replace(self, path: &Path) -> io::Result<bool> {
        if std::fs::metadata(path)?.len() == 0 {
            return Ok(true);
        }
        let magic = |starts: fn(&[u8]) -> bool| -> io::Result<bool> {
            let mut head = [0u8; 8];
            let mut file = std::fs::File::open(path)?;
            Ok(file.read_exact(&mut head).is_ok() && starts(&head))
        };
        match self {
            OwnFile::Decisions => neardup_corpus::is_decisions_file(path),
            OwnFile::KeyTable => magic(neardup_keys::KeyTable::starts_like_table),
            OwnFile::HotKeys => magic(neardup_keys::HotKeys::starts_like_hot_keys),
            OwnFile::Index => magic(neardup_index::SavedIndex::starts_like_index),
            OwnFile::Report => {
                let mut head = Vec::new();
                std::fs::File::open(path)?
                    .take(REPORT_PREFIX)
                    .read_to_end(&mut head)?;
                Ok(starts_like_report(&head))
            }
        }
    }
}

impl fmt::Display for OwnFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `head`, the start of a file, is the start of a JSON report neardup writes, told by
/// its keys (serde writes a struct's fields in their order): a run's report (`version`, then
/// `config`: `dedup`, `exact`, `apply`, `write`), `keys`' and `hot`'s (`neardup`, then `shard`
/// or `tables`; before they were structs, their keys came sorted, `neardup` among `shard` and
/// `table` or among `hot_keys_file` and `min_key_count`), `sign`'s and `decide`'s (`manifest`,
/// whose `format` names the step) and `eval`'s (`decisions`, then `files`).
fn starts_like_report(head: &[u8]) -> bool {
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // The prefix may end inside a character.
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).expect("valid up to there"),
    };
    let mut json = Scanner { rest: text };
    if !json.punct('{') {
        return false;
    }
    // The top-level keys the prefix holds whole, each with its value when that is a string.
    let mut keys: Vec<(String, Option<String>)> = Vec::new();
    while let Some(key) = json.key() {
        if keys.is_empty() && key == "manifest" {
            return json.punct('{')
                && json.key().as_deref() == Some("format")
                && json
                    .string()
                    .is_some_and(|f| f == "neardup-sign" || f == "neardup-decide");
        }
        // A key counts once seen, even when the prefix ends inside its value.
        if json.rest.trim_start().starts_with('"') {
            let value = json.string();
            let whole = value.is_some();
            keys.push((key, value));
            if !whole {
                break;
            }
        } else {
            keys.push((key, None));
            if !json.skip_value() {
                break;
            }
        }
        if !json.punct(',') {
            break;
        }
    }
    let named = |k: &str| keys.iter().any(|(key, _)| key == k);
    let first_two =
        |a: &str, b: &str| matches!(&keys[..], [(k1, Some(_)), (k2, _), ..] if k1 == a && k2 == b);
    let by_neardup = keys.iter().any(|(k, v)| k == "neardup" && v.is_some())
        && ((named("shard") && (named("table") || named("inputs")))
            || (named("tables") || (named("hot_keys_file") && named("min_key_count"))));
    first_two("version", "config") || first_two("decisions", "files") || by_neardup
}

/// The few JSON tokens [`starts_like_report`] reads from the start of a document.
struct Scanner<'a> {
    rest: &'a str,
}

impl Scanner<'_> {
    /// Skips white space and `c`, if it comes next.
    fn punct(&mut self, c: char) -> bool {
        self.rest = self.rest.trim_start();
        match self.rest.strip_prefix(c) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    /// A string (white space before it skipped), whole within the text.
    fn string(&mut self) -> Option<String> {
        self.rest = self.rest.trim_start();
        let body = self.rest.strip_prefix('"')?;
        let mut escaped = false;
        let end = body.char_indices().find_map(|(i, c)| match (escaped, c) {
            (false, '"') => Some(i),
            (false, '\\') => {
                escaped = true;
                None
            }
            _ => {
                escaped = false;
                None
            }
        })?;
        let token = &self.rest[..end + 2];
        self.rest = &self.rest[end + 2..];
        serde_json::from_str(token).ok()
    }

    /// Skips one value that is not a string (white space before it skipped): an object or an
    /// array with everything in it, or a number, `true`, `false`, `null`; false when the text
    /// ends first.
    fn skip_value(&mut self) -> bool {
        self.rest = self.rest.trim_start();
        let mut depth = 0usize;
        loop {
            let Some(c) = self.rest.chars().next() else {
                return false;
            };
            match c {
                '"' => {
                    if self.string().is_none() {
                        return false;
                    }
                    if depth == 0 {
                        return true;
                    }
                    continue;
                }
                '{' | '[' => depth += 1,
                '}' | ']' if depth == 0 => return true,
                '}' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.rest = &self.rest[1..];
                        return true;
                    }
                }
                ',' if depth == 0 => return true,
                _ => {}
            }
            self.rest = &self.rest[c.len_utf8()..];
        }
    }

    /// An object's key and the colon after it.
    fn key(&mut self) -> Option<String> {
        let k = self.string()?;
        self.punct(':').then_some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_told_by_their_first_keys() {
        for yes in [
            "{\n  \"version\": \"0.1.0\",\n  \"config\": {",
            r#"{"neardup":"0.1","shard":0,"table":"t"}"#,
            r#"{"neardup":"0.1","tables":[]}"#,
            r#"{ "manifest": { "format": "neardup-decide", "format_version": 4"#,
            r#"{"decisions":"d \"q\".jsonl","files":3}"#,
            // `keys`' and `hot`'s reports before they were structs: sorted keys.
            r#"{"input_problems": ["a \"b\" [c"], "inputs": ["x.jsonl"], "neardup": "0.1.0", "shard": 0, "stage1": {}, "table": "k.ndk"}"#,
            r#"{"count": {"keys": 3, "x": [1, {"y": null}]}, "hot_keys_file": "h.ndh", "hot_samples": 2, "min_key_count": 1, "neardup": "0.1.0""#,
        ] {
            assert!(starts_like_report(yes.as_bytes()), "{yes}");
        }
        for no in [
            "",
            "precious\n",
            "[1, 2]",
            r#"{"version":"1","name":"my package"}"#,
            r#"{"neardup":"0.1"}"#,
            r#"{"manifest":{"format":"other"}}"#,
            r#"{"decisions":3,"files":3}"#,
            r#"{"config":{}, "version":"1"}"#,
            r#"{"neardup": 1, "shard": 0, "table": "t"}"#,
            r#"{"inputs": ["a"], "shard": 0, "table": "t"}"#,
            r#"{"count": {"keys": 3}, "hot_keys_file": "h", "min_key_count": 1}"#,
        ] {
            assert!(!starts_like_report(no.as_bytes()), "{no}");
        }
    }
}
