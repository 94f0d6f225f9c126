//! Where neardup's bytes live: local paths and object storage URLs (`s3://bucket/key`,
//! `gs://bucket/key`, `az://container/key`), through Apache Arrow's `object_store` clients.
//!
//! This crate owns:
//! - **locations**: telling a URL from a local path and taking it apart ([`ObjectUrl`],
//!   [`is_url`]);
//! - **the clients**: one per bucket, set up from the standard environment (S3: `AWS_*`
//!   variables such as `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_REGION`, `AWS_ALLOW_HTTP`,
//!   and the profile's settings in `~/.aws/credentials` and `~/.aws/config`), their retries
//!   and what their errors mean ([`StorageError`]: missing bucket or object, denied access, a
//!   connection that kept dropping — each naming the object);
//! - **listing** a prefix sorted by key ([`list`], [`head`]);
//! - **reading**: a sequential stream of an object from an offset with read-ahead over ranged
//!   GETs ([`ObjectReader`]), and ranged reads for Parquet's readers that fetch the footer and
//!   then only the column chunks asked for, concurrently ([`ObjectRanges`]);
//! - **writing** objects as multipart uploads that a run completes all together when it
//!   publishes, and aborts when it does not ([`UploadSet`], [`ObjectWriter`]); whole small
//!   objects ([`put`], [`get`], [`delete`]);
//! - **files or objects alike** by a path that may hold a URL ([`file`]): how the steps of a
//!   run read what earlier steps wrote (key tables, hot-key files, sign and decide outputs).
//!
//! It does not own formats, records, or which files a run reads or writes: `neardup-corpus`
//! asks it for bytes where a path names object storage, and keeps every rule about files.
//! Requests run on a small runtime of its own; callers block on them from their own threads.

// Modules from the bottom up: each names only those above it.
mod location;
mod client;
mod read;
pub mod file;
mod write;

pub use client::{RETRIES, StorageError, StorageErrorKind, is_storage_failure};
pub use location::{ObjectUrl, Scheme, UrlError, is_url, is_url_path};
pub use read::{ObjectEntry, ObjectRanges, ObjectReader, RangeRead, head, list, read_ranges};
pub use write::{ObjectWriter, UploadSet, delete, get, put};
