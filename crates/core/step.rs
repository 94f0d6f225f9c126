//! The one shape of a staged run's steps: a step is a type built from its settings and inputs
//! (checked before any work), run into a value in memory ([`Step::run`]) or into that value's
//! saved form at a path ([`Step::write`]: streamed, so memory stays bounded, and published all
//! or nothing with the step's report). A value ([`StepValue`]) saves to and loads from the path
//! `write` writes, and turns into bytes and back (object stores, Ray's object store), the same
//! bytes whichever way it was made: a scheduler passes values, files, or both, from step to step.
//!
//! | step | inputs | value | saved as |
//! | --- | --- | --- | --- |
//! | [`crate::KeysStep`] | one shard's inputs | [`KeyTable`] | a key-table file (`neardup keys`) |
//! | [`crate::HotStep`] | every shard's key table | [`HotKeys`] (with the plan of groups) | a hot-key file (`neardup hot`) |
//! | [`crate::SignStep`] | one shard's key table, the hot keys | [`crate::SignedShard`] | a sign directory (`neardup sign`) |
//! | [`crate::DecideStep`] | every shard's signed value, the hot keys' summary | [`crate::DecidedGroup`] | a decide directory (`neardup decide`) |
//!
//! The steps that end a run write the dataset itself rather than a value for another step:
//! [`crate::ApplyStep`] (stage 2 in one process, from the key tables) and [`crate::WriteStep`]
//! (one shard's part, from the decided values). They are built the same way and write
//! `config.output` ([`crate::ApplyStep::run`], [`crate::WriteStep::run`]).

use std::path::Path;

use neardup_keys::{HotKeys, KeyTable, KeysError};
use serde::Serialize;

use crate::error::Error;
use crate::own_files::OwnFile;
use crate::paths::RunPaths;
use crate::pipeline::RunControl;

/// What a step makes: a value that saves to and loads from a file or directory (what the CLI's
/// command of the same step writes and reads), and turns into bytes and back; a value loaded
/// or rebuilt from bytes equals the one saved.
pub trait StepValue: Sized {
    /// Writes the value at `path` (a file or a directory, as the step's `write` does), published
    /// all or nothing.
    fn save(&self, path: &Path) -> Result<(), Error>;
    /// Reads a value saved at `path`, checking it (a damaged or foreign file is refused, its
    /// message naming it).
    fn load(path: &Path) -> Result<Self, Error>;
    /// The value as one checksummed buffer.
    fn to_bytes(&self) -> Result<Vec<u8>, Error>;
    /// Reads the bytes of [`StepValue::to_bytes`], verifying them.
    fn from_bytes(bytes: &[u8]) -> Result<Self, Error>;
}

/// A step of a staged run (see the module docs): its settings and inputs were checked when it was
/// built; [`Step::run`] makes its value in memory and [`Step::write`] the value's saved form, the
/// bytes [`StepValue::save`] would write. Both stop at the next block when `control.cancel` is
/// set (the run then fails with [`Error::Interrupted`] and publishes nothing).
pub trait Step {
    /// The value the step makes.
    type Value: StepValue;
    /// What a run in memory measured (beside the value).
    type Stats: Serialize;
    /// What [`Step::write`] did: the JSON of the CLI's `--report`.
    type Report: Serialize;

    /// The step's value in memory, and what the run measured.
    fn run(&self, control: &RunControl) -> Result<(Self::Value, Self::Stats), Error>;

    /// The step's value written at `out` (its paths checked first), with the report's JSON at
    /// `report` when given; returns the report.
    fn write(
        &self,
        out: &Path,
        report: Option<&Path>,
        control: &RunControl,
    ) -> Result<Self::Report, Error>;
}

/// A key-table or hot-key file given to a step (not made by this run) that cannot be used: a
/// usage error when it is the wrong file for the run.
pub(crate) fn key_file_error(e: KeysError) -> Error {
    match e {
        e @ KeysError::Config(_) => Error::WrongKeyFiles(e),
        other => Error::KeyFile(other),
    }
}

impl StepValue for KeyTable {
    fn save(&self, path: &Path) -> Result<(), Error> {
        RunPaths::new()
            .write_file("the key table", path, OwnFile::KeyTable)
            .check()?;
        Ok(KeyTable::save(self, path)?)
    }
    fn load(path: &Path) -> Result<Self, Error> {
        KeyTable::load(path).map_err(key_file_error)
    }
    fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        Ok(KeyTable::to_bytes(self))
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        KeyTable::from_bytes(bytes).map_err(key_file_error)
    }
}

impl StepValue for HotKeys {
    fn save(&self, path: &Path) -> Result<(), Error> {
        RunPaths::new()
            .write_file("the hot-key file", path, OwnFile::HotKeys)
            .check()?;
        Ok(HotKeys::save(self, path)?)
    }
    fn load(path: &Path) -> Result<Self, Error> {
        HotKeys::load(path).map_err(key_file_error)
    }
    fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        Ok(HotKeys::to_bytes(self)?)
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        HotKeys::from_bytes(bytes).map_err(key_file_error)
    }
}
