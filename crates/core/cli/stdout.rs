//! `-` for an output file (`--decisions -`, `--report -`): standard output. The command writes
//! a file of its own in its place, and that file goes to stdout once the command has succeeded,
//! so stdout, like every output, gets the whole of it or nothing.

use std::io::Write;
use std::path::{Path, PathBuf};

use neardup::{Config, Error, IoOp, IoTarget, Report};

/// An output file given as `-`: where the command writes it instead, until [`ToStdout::send`].
pub(crate) struct ToStdout {
    /// A directory of this command's own, removed when dropped.
    dir: PathBuf,
    file: PathBuf,
}

/// Whether an output path means standard output.
pub(crate) fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

impl ToStdout {
    /// Replaces a `-` in `path` with a file named `name` in a new directory (under
    /// `scratch`, else the system's temporary directory) and returns what sends it to stdout;
    /// any other path is left as it is.
    pub(crate) fn take(
        path: &mut Option<PathBuf>,
        name: &str,
        scratch: Option<&Path>,
    ) -> Result<Option<ToStdout>, Error> {
        if !path.as_deref().is_some_and(is_stdout) {
            return Ok(None);
        }
        let base = scratch.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!(".neardup-stdout-{}-{nanos:09}", std::process::id()));
        std::fs::create_dir_all(&base)
            .and_then(|()| std::fs::create_dir(&dir))
            .map_err(|error| Error::Io {
                op: IoOp::Create {
                    what: "the directory of what goes to standard output".into(),
                },
                target: IoTarget::Path(dir.clone()),
                error,
            })?;
        let file = dir.join(name);
        *path = Some(file.clone());
        Ok(Some(ToStdout { dir, file }))
    }

    /// Copies the file to stdout. A reader that stopped early (`| head`) ends it quietly.
    pub(crate) fn send(self) -> Result<(), Error> {
        let read = |error| Error::Io {
            op: IoOp::Read,
            target: IoTarget::Path(self.file.clone()),
            error,
        };
        let mut file = std::fs::File::open(&self.file).map_err(read)?;
        let mut out = std::io::stdout().lock();
        match std::io::copy(&mut file, &mut out).and_then(|_| out.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Io {
                op: IoOp::Write,
                target: IoTarget::Stdout,
                error: e,
            }),
            _ => Ok(()),
        }
    }
}

impl Drop for ToStdout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A run's decisions and report given as `-`: the decisions go to a file of the command's own,
/// the report stays with the command (the library writes none), and [`send_all`] sends the one
/// asked for to stdout once the run has succeeded.
pub(crate) struct RunToStdout {
    decisions: Option<ToStdout>,
    report: bool,
}

/// Takes `-` out of the run's decisions and report (one stdout holds one of them).
pub(crate) fn take_outputs(config: &mut Config) -> Result<RunToStdout, Error> {
    let output = &mut config.output;
    let report = output.report.as_deref().is_some_and(is_stdout);
    if report && output.decisions.as_deref().is_some_and(is_stdout) {
        return Err(Error::Usage(
            "--decisions - and --report - both ask for standard output, which holds one of \
             them: give a file for the other"
                .into(),
        ));
    }
    if report {
        output.report = None;
    }
    let scratch = config.keys.spill_dir.clone();
    let decisions = ToStdout::take(
        &mut config.output.decisions,
        "decisions.jsonl",
        scratch.as_deref(),
    )?;
    config.output.decisions_to_stdout = decisions.is_some();
    Ok(RunToStdout { decisions, report })
}

/// Sends what was asked for stdout there: the decisions file, or the run's report as a report
/// file holds it (with `-` as the report's path).
pub(crate) fn send_all(taken: RunToStdout, report: &Report) -> Result<(), Error> {
    if let Some(decisions) = taken.decisions {
        decisions.send()?;
    }
    if taken.report {
        let mut report = report.clone();
        report.paths.report = Some("-".into());
        let mut text = serde_json::to_string_pretty(&report).expect("a report serialises");
        text.push('\n');
        super::view::answer(&text)?;
    }
    Ok(())
}
