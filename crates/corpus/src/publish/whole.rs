//! The whole output of a distributed run: its per-shard steps publish into one directory (or
//! prefix), each under its own manifest `_SUCCESS.shard-NNNNN`; once every shard's manifest is
//! in, the whole output's manifest `_SUCCESS` lists all their files, in shard order, so a reader
//! that waits for `_SUCCESS` (Spark, Hadoop, most pipelines) sees the dataset complete, and only
//! then. A shard that publishes again removes the whole output's manifest first, in its own
//! commit, and publishes it again if the output is whole.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::time::SystemTime;

use neardup_storage::ObjectUrl;

use super::journal::sync_dir;
use super::liveness::temp_name;
use super::{
    Distributed, MANIFEST, MANIFEST_FORMAT, Manifest, RunId, absolute, object_sizes,
    parse_manifest, read_manifest, read_object_manifest, rfc3339_utc, storage_failure,
    write_manifest,
};
use crate::error::WriteError;

/// The manifest name of shard `index`'s files in a distributed run's output.
pub fn shard_manifest_name(index: u32) -> String {
    format!("{MANIFEST}.shard-{index:05}")
}

/// Publishes the whole output's manifest `dir/_SUCCESS` of the distributed run `dataset` (see
/// [`Distributed`]) when every one of its shards' manifests is in `dir` (a directory or an
/// object storage prefix) and every file they list is there with the size they give. Returns
/// the manifest, or `None` when a shard is missing (then nothing is written). Publishing it
/// again once it is there writes the same list. Refuses (`"foreign_manifest"`) a `_SUCCESS`
/// that is not a neardup manifest, and (`"changed"`) a listed file whose size changed.
pub fn publish_whole(dir: &Path, dataset: &str) -> Result<Option<Manifest>, WriteError> {
    match ObjectUrl::from_path(dir) {
        Some(url) => publish_whole_objects(dir, &url, dataset),
        None => {
            let dir = absolute(dir)?;
            let _lock = lock_dir(&dir).map_err(|e| WriteError::io(&dir, e))?;
            publish_whole_locked(&dir, dataset)
        }
    }
}

/// Holds an exclusive `flock` on a directory while its whole-output manifest is checked and
/// written, or while a shard's commit changes what it would list: two shards finishing at once
/// then publish it one after the other, and never from a listing a commit is changing.
pub(crate) fn lock_dir(dir: &Path) -> io::Result<File> {
    let f = File::open(dir)?;
    f.lock()?;
    Ok(f)
}

/// [`publish_whole`] in a local directory whose lock ([`lock_dir`]) the caller holds.
pub(crate) fn publish_whole_locked(
    dir: &Path,
    dataset: &str,
) -> Result<Option<Manifest>, WriteError> {
    // The whole manifest is checked first: a foreign one is never replaced.
    read_manifest(dir, MANIFEST)?;
    let mut shards = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| WriteError::io(dir, e))? {
        let entry = entry.map_err(|e| WriteError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_shard_manifest(&name) {
            let path = dir.join(&name);
            let bytes = match fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WriteError::io(&path, e)),
            };
            shards.push(parse_manifest(&path, &bytes)?);
        }
    }
    let Some(files) = whole_listing(&shards, dataset) else {
        return Ok(None);
    };
    for (rel, bytes) in &files {
        let path = dir.join(rel);
        let len = fs::symlink_metadata(&path)
            .map(|m| m.file_type().is_file().then_some(m.len()))
            .unwrap_or(None);
        if len != Some(*bytes) {
            return Err(changed(&path, *bytes));
        }
    }
    let m = whole_manifest(&shards, dataset);
    let path = dir.join(MANIFEST);
    let temp = temp_name(&path, RunId::new());
    let written = write_manifest(&temp, &m).and_then(|_lock| fs::rename(&temp, &path));
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(WriteError::io(&path, e));
    }
    sync_dir(&path);
    Ok(Some(m))
}

/// [`publish_whole`] on an object storage prefix.
fn publish_whole_objects(
    shown: &Path,
    dir: &ObjectUrl,
    dataset: &str,
) -> Result<Option<Manifest>, WriteError> {
    read_object_manifest(dir, MANIFEST)?;
    let held = object_sizes(dir)?;
    let mut shards = Vec::new();
    for name in held.keys() {
        let name = name.to_string_lossy();
        if is_shard_manifest(&name)
            && let Some(m) = read_object_manifest(dir, &name)?
        {
            shards.push(m);
        }
    }
    let Some(files) = whole_listing(&shards, dataset) else {
        return Ok(None);
    };
    for (rel, bytes) in &files {
        if held.get(Path::new(rel)) != Some(bytes) {
            return Err(changed(&shown.join(rel), *bytes));
        }
    }
    let m = whole_manifest(&shards, dataset);
    let mut bytes = serde_json::to_vec_pretty(&m)
        .map_err(|e| WriteError::new(shown, "invalid_output", format!("manifest: {e}")))?;
    bytes.push(b'\n');
    neardup_storage::put(&dir.join(MANIFEST), bytes).map_err(storage_failure)?;
    Ok(Some(m))
}

/// Whether `name` is a shard's manifest (`_SUCCESS.shard-` and digits).
fn is_shard_manifest(name: &str) -> bool {
    name.strip_prefix(MANIFEST)
        .and_then(|rest| rest.strip_prefix(".shard-"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Every file `dataset`'s shard manifests list, with its size, when all its shards are in.
fn whole_listing(shards: &[Manifest], dataset: &str) -> Option<BTreeMap<String, u64>> {
    let ours = ours(shards, dataset);
    let count = ours.first()?.1.shards;
    let places: Vec<u32> = ours
        .iter()
        .map(|(_, d)| d.shard.unwrap_or(u32::MAX))
        .collect();
    if places != (0..count).collect::<Vec<_>>() || ours.iter().any(|(_, d)| d.shards != count) {
        return None;
    }
    Some(
        ours.iter()
            .flat_map(|(m, _)| m.files.iter().map(|f| (f.path.clone(), f.bytes)))
            .collect(),
    )
}

/// `dataset`'s shard manifests, in shard order.
fn ours<'a>(shards: &'a [Manifest], dataset: &str) -> Vec<(&'a Manifest, &'a Distributed)> {
    let mut ours: Vec<(&Manifest, &Distributed)> = shards
        .iter()
        .filter_map(|m| m.distributed.as_ref().map(|d| (m, d)))
        .filter(|(_, d)| d.dataset == dataset && d.shard.is_some())
        .collect();
    ours.sort_by_key(|(_, d)| d.shard);
    ours
}

/// The whole output's manifest: every shard's files in shard order.
fn whole_manifest(shards: &[Manifest], dataset: &str) -> Manifest {
    let ours = ours(shards, dataset);
    Manifest {
        format: MANIFEST_FORMAT.to_string(),
        format_version: 1,
        run_id: dataset.to_string(),
        neardup_version: env!("CARGO_PKG_VERSION").to_string(),
        committed_at: rfc3339_utc(SystemTime::now()),
        files: ours.iter().flat_map(|(m, _)| m.files.clone()).collect(),
        decisions: None,
        report: None,
        distributed: Some(Distributed {
            dataset: dataset.to_string(),
            shards: ours.len() as u32,
            shard: None,
        }),
    }
}

fn changed(path: &Path, bytes: u64) -> WriteError {
    WriteError::new(
        path,
        "changed",
        format!(
            "a shard's manifest lists this file with {bytes} bytes, and it is missing or has \
             another size now; the whole output's _SUCCESS was not written: write that shard \
             again"
        ),
    )
}
