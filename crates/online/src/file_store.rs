//! The index in a saved index file (`neardup dedup --index-out`'s format, shared with batch
//! runs): opened into this process's memory ([`MemoryIndex`], which records what a saved index
//! holds as it decides), saved back atomically. A batch run's index opened here decides new
//! documents as `neardup dedup --against` it does, and an index saved here serves `--against`.

use std::io::Read;
use std::path::{Path, PathBuf};

use neardup_index::{ResolveOptions, SavedIndex, StoredId};

use crate::memory::{MemoryIndex, doc_id};
use crate::{DocId, IndexError, IndexSettings};

/// An online index whose store is a saved index file.
pub struct FileIndex {
    memory: MemoryIndex,
    path: PathBuf,
}

impl FileIndex {
    /// The index saved at `path` (refused when it was made with other settings, naming each),
    /// or, when nothing is there, a new empty one saved there at once (so that a path that
    /// cannot be written is found now, not after an hour of checks).
    pub fn open(settings: IndexSettings, path: &Path) -> Result<FileIndex, IndexError> {
        let memory = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let memory = MemoryIndex::new(settings)?;
                memory.save(path)?;
                memory
            }
            // Whatever is there is only read: one that is not an index is refused by `load`.
            _ => {
                let saved = SavedIndex::load(path).map_err(|error| IndexError::File {
                    path: path.to_path_buf(),
                    error,
                })?;
                MemoryIndex::from_saved(settings, saved, path)?
            }
        };
        Ok(FileIndex {
            memory,
            path: path.to_path_buf(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The index in memory.
    pub fn memory(&self) -> &MemoryIndex {
        &self.memory
    }

    /// The index in memory, to check and insert.
    pub fn memory_mut(&mut self) -> &mut MemoryIndex {
        &mut self.memory
    }
}

/// Refuses `path` unless it is a regular file holding a neardup index (what this tool wrote
/// there before): an index is only ever saved over another index, never over anything else.
pub(crate) fn refuse_other_than_index(path: &Path) -> Result<(), IndexError> {
    let refuse = |what: &str| {
        Err(IndexError::NotIndexFile {
            path: path.to_path_buf(),
            what: what.to_string(),
        })
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(IndexError::Save {
                path: path.to_path_buf(),
                error: e,
            });
        }
    };
    if meta.file_type().is_symlink() {
        return refuse("a symbolic link");
    }
    if meta.is_dir() {
        return refuse("a directory");
    }
    if !meta.is_file() {
        return refuse("not a regular file");
    }
    let mut head = [0u8; 8];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    if read.is_err() || !SavedIndex::starts_like_index(&head) {
        return refuse("a file that is not a neardup index");
    }
    Ok(())
}

/// Saves `saved` at `path` atomically (the whole index or nothing is there): refused when `path`
/// holds anything but a neardup index. Returns the bytes written.
pub(crate) fn save_saved(saved: &SavedIndex, path: &Path) -> Result<u64, IndexError> {
    refuse_other_than_index(path)?;
    let io = |error| IndexError::Save {
        path: path.to_path_buf(),
        error,
    };
    let mut file = neardup_corpus::AtomicFile::create(path).map_err(io)?;
    let bytes = saved.write_to(&mut file).map_err(io)?;
    file.commit().map_err(io)?;
    Ok(bytes)
}

impl MemoryIndex {
    /// Saves the index at `path` atomically (the whole index or nothing is there): refused when
    /// `path` holds anything but a neardup index.
    pub fn save(&self, path: &Path) -> Result<u64, IndexError> {
        save_saved(self.saved(), path)
    }

    /// The index opened from `saved` (loaded from `path`): refused when made with other
    /// settings; an index that does not store its entries' sketches (a batch run's, verified
    /// by exact Jaccard) has them read back from the indexed runs' files once.
    pub fn from_saved(
        settings: IndexSettings,
        mut saved: SavedIndex,
        path: &Path,
    ) -> Result<MemoryIndex, IndexError> {
        let recorded = settings.recorded();
        // The text selection is a batch run's (which field of a record): the online index is
        // given texts, whatever field they came from.
        let ours = neardup_index::IndexSettings {
            layout: neardup_keys::TableLayout {
                selector: saved.settings().layout.selector.clone(),
                ..recorded.layout
            },
            ..recorded
        };
        let mut differences = saved.settings().differences(&ours);
        if let Some(o) = saved.online()
            && o.keep_empty != settings.keep_empty
        {
            let show = |k: bool| if k { "keep" } else { "drop" };
            differences.push(format!(
                "empty: {} vs {}",
                show(o.keep_empty),
                show(settings.keep_empty)
            ));
        }
        if !differences.is_empty() {
            return Err(IndexError::FileSettingsDiffer {
                path: path.to_path_buf(),
                differences,
            });
        }
        let shingles = settings.deduper.verify == neardup_dedup::Verify::Jaccard;
        let complete = if shingles {
            saved.self_contained_with_shingles()
        } else {
            saved.self_contained()
        };
        if !complete {
            let selector = saved.settings().layout.selector.clone();
            saved
                .store_sketches(&ResolveOptions {
                    sketcher: &settings.sketcher,
                    rule: settings.rule,
                    selector: &selector,
                    shingles,
                    block_bytes: neardup_corpus::ReadOptions::DEFAULT_BLOCK_BYTES,
                    threads: rayon::current_num_threads(),
                })
                .map_err(|error| IndexError::File {
                    path: path.to_path_buf(),
                    error,
                })?;
        }
        let names: Vec<String> = saved.files().iter().map(|f| f.name.clone()).collect();
        let state = saved
            .stored_full_state(shingles, &|addr, id| {
                Some(entry_doc_id(&names, addr, id).encode())
            })
            .expect("self-contained now");
        MemoryIndex::seeded(settings, saved, &state)
    }
}

/// The online id of an entry of an index whose files are `names`: its stored id, or for a batch
/// run's record without one, "FILE:RECORD" (as its decisions name it).
pub(crate) fn entry_doc_id(
    names: &[String],
    addr: neardup_dedup::SampleAddr,
    id: Option<&StoredId>,
) -> DocId {
    match id {
        Some(id) => doc_id(id),
        None => DocId::Str(format!("{}:{}", names[addr.file as usize], addr.record)),
    }
}
