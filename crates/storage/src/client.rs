//! The object storage clients: one per bucket, built once from the environment, and the runtime
//! their requests run on; what their errors mean for people.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use object_store::path::Path as KeyPath;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};

use crate::location::{ObjectUrl, Scheme};

/// The runtime every request runs on. Readers and writers are called from plain threads (the
/// executor's workers), which block on it; its own threads only drive the connections, so two
/// are plenty whatever the number of readers.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("neardup-storage")
            .enable_all()
            .build()
            .expect("cannot start the object storage runtime")
    })
}

/// Runs a request to completion from a thread outside the runtime.
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// A bucket's client and an object's key in it.
#[derive(Clone)]
pub(crate) struct Object {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) key: KeyPath,
    pub(crate) url: ObjectUrl,
}

impl Object {
    pub(crate) fn new(url: &ObjectUrl) -> Result<Object, StorageError> {
        let key = KeyPath::parse(url.trimmed_key()).map_err(|e| {
            StorageError::new(
                url,
                StorageErrorKind::Invalid,
                format!("invalid object key ({e})"),
            )
        })?;
        Ok(Object {
            store: store(url)?,
            key,
            url: url.clone(),
        })
    }
}

/// Requests are retried (connection errors, dropped connections mid-body, 5xx and throttling)
/// with backoff from 100 ms doubling to 2 s, five times: about 3 s of waiting before a read
/// fails, enough for a restarted connection or a throttled moment, short enough that a dead
/// endpoint is reported promptly.
fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: RETRIES,
        retry_timeout: Duration::from_secs(120),
    }
}

/// How many times a failed request is retried before its error is reported.
pub const RETRIES: usize = 5;

/// The client of `url`'s bucket, made on first use from the environment (and, for S3, the AWS
/// shared config and credentials files).
fn store(url: &ObjectUrl) -> Result<Arc<dyn ObjectStore>, StorageError> {
    type Stores = HashMap<(Scheme, String), Arc<dyn ObjectStore>>;
    static STORES: OnceLock<Mutex<Stores>> = OnceLock::new();
    // TLS through rustls with ring (see Cargo.toml), before the first client is built; a
    // provider a host program installed first is kept.
    static TLS: OnceLock<()> = OnceLock::new();
    TLS.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let stores = STORES.get_or_init(Default::default);
    let id = (url.scheme(), url.bucket().to_string());
    if let Some(s) = stores.lock().unwrap().get(&id) {
        return Ok(s.clone());
    }
    let built: Result<Arc<dyn ObjectStore>, object_store::Error> = match url.scheme() {
        Scheme::S3 => {
            let mut b = object_store::aws::AmazonS3Builder::from_env();
            for (key, value) in aws_profile_settings() {
                if let Ok(k) = key.parse() {
                    b = b.with_config(k, value);
                }
            }
            b.with_bucket_name(url.bucket())
                .with_retry(retry())
                .build()
                .map(|s| Arc::new(s) as _)
        }
        Scheme::Gcs => object_store::gcp::GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(url.bucket())
            .with_retry(retry())
            .build()
            .map(|s| Arc::new(s) as _),
        Scheme::Azure => object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_container_name(url.bucket())
            .with_retry(retry())
            .build()
            .map(|s| Arc::new(s) as _),
    };
    let s = built.map_err(|e| {
        StorageError::new(
            url,
            StorageErrorKind::Config,
            format!("cannot set up the {} client ({e})", url.scheme().as_str()),
        )
    })?;
    stores.lock().unwrap().insert(id, s.clone());
    Ok(s)
}

/// Settings from the AWS shared files for the profile `AWS_PROFILE` (or `default`) that no
/// environment variable gives: `~/.aws/credentials` (or `AWS_SHARED_CREDENTIALS_FILE`) for the
/// keys, `~/.aws/config` (or `AWS_CONFIG_FILE`) for the region and endpoint. Keys are taken from
/// the files only when the environment names none, so a key and a secret never come from two
/// places.
fn aws_profile_settings() -> Vec<(String, String)> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let home = env("HOME").map(PathBuf::from);
    let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
    let mut out = Vec::new();
    let credentials = env("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".aws/credentials")));
    if env("AWS_ACCESS_KEY_ID").is_none()
        && let Some(text) = credentials.and_then(|p| std::fs::read_to_string(p).ok())
    {
        for (k, v) in ini_section(&text, &profile) {
            let key = match k.as_str() {
                "aws_access_key_id" => "aws_access_key_id",
                "aws_secret_access_key" => "aws_secret_access_key",
                "aws_session_token" => "aws_session_token",
                _ => continue,
            };
            out.push((key.to_string(), v));
        }
    }
    let config = env("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".aws/config")));
    if let Some(text) = config.and_then(|p| std::fs::read_to_string(p).ok()) {
        let section = if profile == "default" {
            profile.clone()
        } else {
            format!("profile {profile}")
        };
        for (k, v) in ini_section(&text, &section) {
            let (key, env_name) = match k.as_str() {
                "region" => ("aws_region", "AWS_REGION"),
                "endpoint_url" => ("aws_endpoint", "AWS_ENDPOINT_URL"),
                _ => continue,
            };
            if env(env_name).is_none()
                && !(key == "aws_region" && env("AWS_DEFAULT_REGION").is_some())
            {
                out.push((key.to_string(), v));
            }
        }
    }
    out
}

/// The `key = value` pairs of `[section]` in an INI text (comments `#` and `;`).
fn ini_section(text: &str, section: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
        } else if inside && let Some((k, v)) = line.split_once('=') {
            out.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    out
}

/// What went wrong with a request, in classes a caller can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageErrorKind {
    /// The object (or, for a listing, anything under the prefix) does not exist.
    NotFound,
    /// The bucket does not exist.
    NoBucket,
    /// The credentials were refused or do not allow the request.
    Denied,
    /// The URL cannot name an object.
    Invalid,
    /// The client could not be set up from the environment.
    Config,
    /// An object the run would create exists already.
    Exists,
    /// The connection failed or dropped, or the service failed, after every retry.
    Network,
}

/// A failed request, naming the object (as `s3://bucket/key`) and what failed. Never holds a
/// credential: the messages of the clients name URLs and status codes, never headers.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{url}: {message}")]
pub struct StorageError {
    url: String,
    kind: StorageErrorKind,
    message: String,
}

impl StorageError {
    pub(crate) fn new(
        url: &ObjectUrl,
        kind: StorageErrorKind,
        message: impl Into<String>,
    ) -> StorageError {
        StorageError {
            url: url.to_string(),
            kind,
            message: message.into(),
        }
    }

    /// The error of an object that is not there (a lookup that found nothing).
    pub fn not_found(url: &ObjectUrl, message: impl Into<String>) -> StorageError {
        StorageError::new(url, StorageErrorKind::NotFound, message)
    }

    /// Classifies a client error of a request `doing` something (`"reading bytes 0..100"`).
    pub(crate) fn from_store(url: &ObjectUrl, doing: &str, e: object_store::Error) -> StorageError {
        let text = e.to_string();
        let detail = source_text(&e);
        // Every layer's message: the refused scheme sits in a middle layer.
        let mut chain = text.clone();
        let mut source = std::error::Error::source(&e);
        while let Some(layer) = source {
            chain.push_str(" / ");
            chain.push_str(&layer.to_string());
            source = layer.source();
        }
        let (kind, message) = match &e {
            object_store::Error::NotFound { .. } if text.contains("NoSuchBucket") => (
                StorageErrorKind::NoBucket,
                format!("the bucket {} does not exist", url.bucket()),
            ),
            object_store::Error::NotFound { .. } => {
                (StorageErrorKind::NotFound, "no such object".to_string())
            }
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => (
                StorageErrorKind::Denied,
                format!(
                    "access denied while {doing}; check the credentials (AWS_ACCESS_KEY_ID / \
                     AWS_PROFILE) and the bucket's policy"
                ),
            ),
            object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. } => (
                StorageErrorKind::Exists,
                "the object exists already".to_string(),
            ),
            _ if text.contains("NoSuchBucket") => (
                StorageErrorKind::NoBucket,
                format!("the bucket {} does not exist", url.bucket()),
            ),
            _ if text.contains("AccessDenied") || text.contains("403 Forbidden") => (
                StorageErrorKind::Denied,
                format!(
                    "access denied while {doing}; check the credentials (AWS_ACCESS_KEY_ID / \
                     AWS_PROFILE) and the bucket's policy"
                ),
            ),
            // The client refuses an http:// endpoint unless told to (it would send the
            // credentials unencrypted); retrying cannot help, and it is not retried.
            _ if chain.contains("URL scheme is not allowed") => (
                StorageErrorKind::Config,
                format!(
                    "{doing} failed: the endpoint is plain http://, which the {} client refuses \
                     unless {}=true is set (then credentials travel unencrypted: only for a \
                     local or trusted server)",
                    url.scheme().as_str(),
                    allow_http_variable(url.scheme())
                ),
            ),
            _ => (
                StorageErrorKind::Network,
                format!("{doing} failed after {RETRIES} retries ({detail})"),
            ),
        };
        StorageError {
            url: url.to_string(),
            kind,
            message,
        }
    }

    /// The object or prefix the request was about.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The class of failure.
    pub fn kind(&self) -> StorageErrorKind {
        self.kind
    }

    /// What failed, without the URL.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The environment variable that lets `scheme`'s client use a plain-HTTP endpoint.
fn allow_http_variable(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::S3 => "AWS_ALLOW_HTTP",
        Scheme::Gcs => "GOOGLE_ALLOW_HTTP",
        Scheme::Azure => "AZURE_ALLOW_HTTP",
    }
}

/// The innermost messages of an error chain, joined: the client's own message repeats the
/// request's URL and its retry settings, which say little to a user.
fn source_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        parts.push(err.to_string());
        cur = err.source();
    }
    // The last two levels name the cause (e.g. "connection closed before message completed").
    let n = parts.len();
    parts[n.saturating_sub(2)..].join(": ")
}

impl StorageError {
    /// The error as an I/O error for a reader that names the object itself: its message
    /// without the URL. [`is_storage_failure`] recognises it.
    pub fn into_unnamed_io(self) -> std::io::Error {
        let kind = std::io::Error::from(self.clone()).kind();
        std::io::Error::new(kind, Unnamed(self))
    }
}

/// A [`StorageError`] shown without its URL.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.message)]
pub(crate) struct Unnamed(pub(crate) StorageError);

/// Whether an I/O error is a failed object storage request (made by this crate's readers, or
/// by [`StorageError::into_unnamed_io`]), as opposed to an error of the data or the disk.
pub fn is_storage_failure(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<Unnamed>() || inner.is::<StorageError>())
}

impl From<StorageError> for std::io::Error {
    fn from(e: StorageError) -> std::io::Error {
        let kind = match e.kind {
            StorageErrorKind::NotFound | StorageErrorKind::NoBucket => std::io::ErrorKind::NotFound,
            StorageErrorKind::Denied => std::io::ErrorKind::PermissionDenied,
            StorageErrorKind::Exists => std::io::ErrorKind::AlreadyExists,
            // Not InvalidInput / InvalidData: readers take those for corrupt data.
            StorageErrorKind::Invalid | StorageErrorKind::Config | StorageErrorKind::Network => {
                std::io::ErrorKind::Other
            }
        };
        std::io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections() {
        let text = "[default]\nregion = eu-west-1\n# c\n[profile x]\nregion=us-east-2\n\
                    endpoint_url = http://127.0.0.1:9000\n";
        assert_eq!(
            ini_section(text, "profile x"),
            vec![
                ("region".to_string(), "us-east-2".to_string()),
                (
                    "endpoint_url".to_string(),
                    "http://127.0.0.1:9000".to_string()
                )
            ]
        );
        assert_eq!(ini_section(text, "default").len(), 1);
    }
}
