//! Writing objects so that none is visible before its run publishes: multipart uploads whose
//! parts go up while the run writes, completed all together by the run's commit (an upload
//! never completed is no object: S3, GCS and Azure show an object only once its upload is
//! complete), and single small objects (manifests) put whole.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};

use crate::client::{Object, StorageError, StorageErrorKind, block_on, runtime};
use crate::location::ObjectUrl;

/// Bytes per uploaded part (the services take at least 5 MiB but for the last, at most 10,000
/// parts: objects up to 160 GB).
const PART: usize = 16 << 20;
/// Parts uploading at once per writer, beyond the one being filled.
const PARTS_IN_FLIGHT: usize = 3;

/// The uploads of one run that are written but not yet published. [`UploadSet::complete_all`]
/// publishes them; dropping the set (or [`UploadSet::abort_all`]) aborts every upload it holds,
/// so an interrupted run leaves no object under any of its names.
#[derive(Default)]
pub struct UploadSet {
    pending: Mutex<Vec<Pending>>,
    /// Writers still open: aborted with the set.
    open: Mutex<Vec<UploadSlot>>,
}

/// An upload being written, shared by its writer and the set (which aborts it with itself).
type UploadSlot = Arc<Mutex<Option<Box<dyn MultipartUpload>>>>;

struct Pending {
    object: Object,
    upload: Box<dyn MultipartUpload>,
    bytes: u64,
}

impl std::fmt::Debug for UploadSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("UploadSet")
            .field("pending", &pending.len())
            .finish_non_exhaustive()
    }
}

impl UploadSet {
    /// An empty set.
    pub fn new() -> Arc<UploadSet> {
        Arc::new(UploadSet::default())
    }

    /// A writer of the object `url`, invisible until [`UploadSet::complete_all`].
    pub fn create(self: &Arc<Self>, url: &ObjectUrl) -> Result<ObjectWriter, StorageError> {
        let object = Object::new(url)?;
        let upload = block_on(object.store.put_multipart(&object.key))
            .map_err(|e| StorageError::from_store(url, "starting the upload", e))?;
        let slot = Arc::new(Mutex::new(Some(upload)));
        self.open.lock().unwrap().push(slot.clone());
        Ok(ObjectWriter {
            set: self.clone(),
            object,
            upload: slot,
            buf: Vec::with_capacity(PART),
            in_flight: VecDeque::new(),
            bytes: 0,
            parts: 0,
            done: false,
        })
    }

    /// The finished uploads, `(url, bytes)`, in the order they finished.
    pub fn ready(&self) -> Vec<(ObjectUrl, u64)> {
        let pending = self.pending.lock().unwrap();
        pending
            .iter()
            .map(|p| (p.object.url.clone(), p.bytes))
            .collect()
    }

    /// Completes the finished uploads of `urls` (each becomes visible whole, at once), 16 at a
    /// time. Those not named stay pending. On an error the ones not completed yet stay pending
    /// (and are aborted with the set).
    pub fn complete(&self, urls: &[ObjectUrl]) -> Result<(), StorageError> {
        if urls.is_empty() {
            // A run with no object output never starts the runtime.
            return Ok(());
        }
        let mut taken = Vec::new();
        {
            let mut pending = self.pending.lock().unwrap();
            for url in urls {
                if let Some(i) = pending.iter().position(|p| &p.object.url == url) {
                    taken.push(pending.swap_remove(i));
                } else {
                    return Err(StorageError::new(
                        url,
                        StorageErrorKind::Invalid,
                        "this output was not finished; nothing more was published",
                    ));
                }
            }
        }
        let results: Vec<(Pending, Result<(), StorageError>)> = block_on(
            futures::stream::iter(taken.into_iter().map(|mut p| async move {
                let r = p.upload.complete().await.map(|_| ()).map_err(|e| {
                    StorageError::from_store(&p.object.url, "completing the upload", e)
                });
                (p, r)
            }))
            .buffer_unordered(16)
            .collect(),
        );
        let mut first_error = None;
        let mut pending = self.pending.lock().unwrap();
        for (p, r) in results {
            if let Err(e) = r {
                first_error.get_or_insert(e);
                pending.push(p);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Aborts every upload of the set, finished or still being written: none of them becomes
    /// an object.
    pub fn abort_all(&self) {
        let pending: Vec<Pending> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let open: Vec<_> =
            std::mem::take(&mut *self.open.lock().unwrap_or_else(|e| e.into_inner()));
        let mut uploads: Vec<Box<dyn MultipartUpload>> =
            pending.into_iter().map(|p| p.upload).collect();
        for slot in open {
            if let Some(u) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                uploads.push(u);
            }
        }
        if uploads.is_empty() {
            return;
        }
        block_on(
            futures::stream::iter(uploads.into_iter().map(|mut u| async move {
                if let Err(e) = u.abort().await {
                    tracing::warn!("an unpublished upload could not be aborted ({e}); the service removes it by its lifecycle rules");
                }
            }))
            .buffer_unordered(16)
            .collect::<Vec<()>>(),
        );
    }
}

impl Drop for UploadSet {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// A [`Write`] of one object as a multipart upload: every 16 MiB goes up as a part while the
/// caller writes on (three parts in flight at most, so memory stays bounded);
/// [`ObjectWriter::finish`] uploads the rest and hands the upload to its [`UploadSet`], which
/// completes it when the run publishes. Dropped unfinished, the upload is aborted.
pub struct ObjectWriter {
    set: Arc<UploadSet>,
    object: Object,
    upload: UploadSlot,
    buf: Vec<u8>,
    in_flight: VecDeque<tokio::task::JoinHandle<Result<(), object_store::Error>>>,
    bytes: u64,
    parts: usize,
    done: bool,
}

impl ObjectWriter {
    /// The object's URL.
    pub fn url(&self) -> &ObjectUrl {
        &self.object.url
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn error(&self, e: object_store::Error) -> io::Error {
        let e = StorageError::from_store(&self.object.url, "uploading a part", e);
        let kind = io::Error::from(e.clone()).kind();
        io::Error::new(kind, e.to_string())
    }

    fn send_part(&mut self) -> io::Result<()> {
        let data = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(PART)));
        let part = {
            let mut slot = self.upload.lock().unwrap();
            let upload = slot
                .as_mut()
                .ok_or_else(|| io::Error::other("the upload was aborted"))?;
            upload.put_part(PutPayload::from(data))
        };
        self.in_flight.push_back(runtime().spawn(part));
        self.parts += 1;
        while self.in_flight.len() > PARTS_IN_FLIGHT {
            self.wait_one()?;
        }
        Ok(())
    }

    fn wait_one(&mut self) -> io::Result<()> {
        if let Some(h) = self.in_flight.pop_front() {
            block_on(h)
                .map_err(|e| io::Error::other(e.to_string()))?
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    /// Uploads what is left and hands the upload to the set, to be completed when the run
    /// publishes; returns the object's size.
    pub fn finish(mut self) -> io::Result<u64> {
        // The last part may be small (or empty, for an empty object).
        if !self.buf.is_empty() || self.parts == 0 {
            self.send_part()?;
        }
        while !self.in_flight.is_empty() {
            self.wait_one()?;
        }
        let upload = self
            .upload
            .lock()
            .unwrap()
            .take()
            .ok_or_else(|| io::Error::other("the upload was aborted"))?;
        self.set
            .open
            .lock()
            .unwrap()
            .retain(|s| !Arc::ptr_eq(s, &self.upload));
        self.set.pending.lock().unwrap().push(Pending {
            object: self.object.clone(),
            upload,
            bytes: self.bytes,
        });
        self.done = true;
        Ok(self.bytes)
    }
}

impl Write for ObjectWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = PART - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        self.bytes += n as u64;
        if self.buf.len() == PART {
            self.send_part()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Parts are uploaded whole; what is buffered goes up with the next part or at finish.
        Ok(())
    }
}

impl Drop for ObjectWriter {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        for h in &self.in_flight {
            h.abort();
        }
        let upload = self.upload.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.set
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|s| !Arc::ptr_eq(s, &self.upload));
        if let Some(mut u) = upload {
            let _ = block_on(u.abort());
        }
    }
}

/// Writes `bytes` as the object `url` in one request (visible whole, at once).
pub fn put(url: &ObjectUrl, bytes: Vec<u8>) -> Result<(), StorageError> {
    let object = Object::new(url)?;
    block_on(object.store.put(&object.key, PutPayload::from(bytes)))
        .map(|_| ())
        .map_err(|e| StorageError::from_store(url, "writing the object", e))
}

/// The whole object `url`, or `None` when there is none.
pub fn get(url: &ObjectUrl) -> Result<Option<Bytes>, StorageError> {
    let object = Object::new(url)?;
    let result = block_on(async {
        let r = object.store.get(&object.key).await?;
        r.bytes().await
    });
    match result {
        Ok(b) => Ok(Some(b)),
        Err(e) => {
            let e = StorageError::from_store(url, "reading the object", e);
            match e.kind() {
                StorageErrorKind::NotFound => Ok(None),
                _ => Err(e),
            }
        }
    }
}

/// Deletes the object `url` (no error when it is already gone).
pub fn delete(url: &ObjectUrl) -> Result<(), StorageError> {
    let object = Object::new(url)?;
    match block_on(object.store.delete(&object.key)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let e = StorageError::from_store(url, "deleting the object", e);
            match e.kind() {
                StorageErrorKind::NotFound => Ok(()),
                _ => Err(e),
            }
        }
    }
}
