//! Where bytes live: a local path or an object storage URL.

use std::fmt;
use std::path::Path;

/// The object storage services a URL can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Amazon S3 and S3-compatible servers (`s3://bucket/key`).
    S3,
    /// Google Cloud Storage (`gs://bucket/key`).
    Gcs,
    /// Azure Blob Storage (`az://container/key`).
    Azure,
}

impl Scheme {
    /// The URL scheme as written, without `://`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
        }
    }

    fn parse(s: &str) -> Option<Scheme> {
        match s {
            "s3" | "s3a" => Some(Scheme::S3),
            "gs" => Some(Scheme::Gcs),
            "az" => Some(Scheme::Azure),
            _ => None,
        }
    }
}

/// An object, or a prefix of objects, in a bucket: `s3://bucket/key`. The key has no leading
/// `/`; it is empty for the whole bucket and ends with `/` when it was written that way (a
/// "directory").
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectUrl {
    scheme: Scheme,
    bucket: String,
    key: String,
}

/// Why a text that starts like an object URL is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UrlError(String);

impl ObjectUrl {
    /// Parses `scheme://bucket/key`. `Ok(None)` when `text` is not an object URL at all (a local
    /// path); an error when it names a known scheme but cannot be used (no bucket, `..` or empty
    /// segments in the key).
    pub fn parse(text: &str) -> Result<Option<ObjectUrl>, UrlError> {
        let Some((scheme, rest)) = text.split_once("://") else {
            return Ok(None);
        };
        let Some(scheme) = Scheme::parse(scheme) else {
            return Ok(None);
        };
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(UrlError(format!(
                "{text}: no bucket named (expected {}://bucket/key)",
                scheme.as_str()
            )));
        }
        let body = key.strip_suffix('/').unwrap_or(key);
        if !body.is_empty()
            && body
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..")
        {
            return Err(UrlError(format!(
                "{text}: an object key cannot hold empty, `.` or `..` segments"
            )));
        }
        Ok(Some(ObjectUrl {
            scheme,
            bucket: bucket.to_string(),
            key: key.to_string(),
        }))
    }

    /// [`ObjectUrl::parse`] of a path that may hold a URL (an input's `path`).
    pub fn from_path(path: &Path) -> Option<ObjectUrl> {
        ObjectUrl::parse(path.to_str()?).ok().flatten()
    }

    /// The service.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The bucket (Azure: the container).
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key inside the bucket, as written (no leading `/`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key without a trailing `/`: the object, or the prefix below which a listing looks.
    pub fn trimmed_key(&self) -> &str {
        self.key.strip_suffix('/').unwrap_or(&self.key)
    }

    /// The object `relative` (`/`-separated) below this prefix.
    pub fn join(&self, relative: &str) -> ObjectUrl {
        let base = self.trimmed_key();
        let relative = relative.trim_start_matches('/');
        let key = match (base.is_empty(), relative.is_empty()) {
            (true, _) => relative.to_string(),
            (false, true) => base.to_string(),
            (false, false) => format!("{base}/{relative}"),
        };
        ObjectUrl {
            scheme: self.scheme,
            bucket: self.bucket.clone(),
            key,
        }
    }

    /// The same bucket with another key.
    pub fn with_key(&self, key: &str) -> ObjectUrl {
        ObjectUrl {
            scheme: self.scheme,
            bucket: self.bucket.clone(),
            key: key.to_string(),
        }
    }

    /// The last segment of the key (the object's name).
    pub fn file_name(&self) -> &str {
        let k = self.trimmed_key();
        k.rsplit_once('/').map(|(_, n)| n).unwrap_or(k)
    }

    /// The prefix holding this object (the key up to its last `/`).
    pub fn parent(&self) -> ObjectUrl {
        let k = self.trimmed_key();
        self.with_key(k.rsplit_once('/').map(|(p, _)| p).unwrap_or(""))
    }

    /// Whether `other` is this prefix or lies below it.
    pub fn contains(&self, other: &ObjectUrl) -> bool {
        if self.scheme != other.scheme || self.bucket != other.bucket {
            return false;
        }
        let base = self.trimmed_key();
        let k = other.trimmed_key();
        base.is_empty() || k == base || k.strip_prefix(base).is_some_and(|r| r.starts_with('/'))
    }

    /// The key of `other` below this prefix, when it is below it.
    pub fn relative<'a>(&self, other: &'a ObjectUrl) -> Option<&'a str> {
        if !self.contains(other) {
            return None;
        }
        let base = self.trimmed_key();
        let k = other.trimmed_key();
        Some(if base.is_empty() {
            k
        } else {
            k[base.len()..].trim_start_matches('/')
        })
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}/{}", self.scheme.as_str(), self.bucket, self.key)
    }
}

/// Whether `text` names object storage (`s3://`, `gs://`, `az://`) rather than a local path.
pub fn is_url(text: &str) -> bool {
    text.split_once("://")
        .is_some_and(|(scheme, _)| Scheme::parse(scheme).is_some())
}

/// Whether `path` names object storage; see [`is_url`].
pub fn is_url_path(path: &Path) -> bool {
    path.to_str().is_some_and(is_url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_joins() {
        let u = ObjectUrl::parse("s3://b/data/x/").unwrap().unwrap();
        assert_eq!(
            (u.bucket(), u.key(), u.trimmed_key()),
            ("b", "data/x/", "data/x")
        );
        assert_eq!(u.join("a/b.jsonl").to_string(), "s3://b/data/x/a/b.jsonl");
        assert_eq!(u.join("a/b.jsonl").file_name(), "b.jsonl");
        assert_eq!(u.join("a/b.jsonl").parent().to_string(), "s3://b/data/x/a");
        assert!(u.contains(&u.join("a/b.jsonl")));
        assert!(!u.contains(&ObjectUrl::parse("s3://b/data/xy").unwrap().unwrap()));
        assert_eq!(u.relative(&u.join("a/b.jsonl")), Some("a/b.jsonl"));
        let whole = ObjectUrl::parse("gs://b").unwrap().unwrap();
        assert_eq!(whole.to_string(), "gs://b/");
        assert_eq!(whole.join("k").to_string(), "gs://b/k");
        assert!(ObjectUrl::parse("data/x.jsonl").unwrap().is_none());
        assert!(ObjectUrl::parse("http://x/y").unwrap().is_none());
        assert!(ObjectUrl::parse("s3:///k").is_err());
        assert!(ObjectUrl::parse("s3://b/a//k").is_err());
        assert!(ObjectUrl::parse("s3://b/a/../k").is_err());
        assert!(is_url("az://c/k") && !is_url("./s3://b/k"));
    }
}
