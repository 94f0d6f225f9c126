//! The `neardup` command line: [`run`] it with a program's arguments. Apart from the rest of the
//! library: arguments (`args`), one function per command (`commands`), what is shown (`view`),
//! the signal handlers (`signals`), `-` for an output file (`stdout`) and the allocator's
//! settings for a run (`allocator`). The rest of the library (`crates/core/lib.rs` and the
//! crates under it) knows nothing of flags, terminals or exit codes.
//!
//! The `neardup` binary (`crates/core/main.rs`) and the Python package's `neardup` command
//! (`python -m neardup`) both call [`run`], so they take the same arguments, write the same
//! outputs and exit with the same codes.

pub(crate) mod allocator;
pub(crate) mod args;
pub(crate) mod commands;
pub(crate) mod signals;
pub(crate) mod stdout;
pub(crate) mod view;

use std::ffi::OsString;
use std::io::Write;

use clap::Parser;

use crate::Error;

/// Runs the `neardup` command line with `args`, the program's name first (as
/// [`std::env::args_os`] gives them), and returns its exit code: 0 when the command did its work
/// (or printed `--help`), 1 when it failed, 2 for arguments, settings or outputs it refused
/// ([`exit_code`], and clap's for arguments it cannot parse), 128 + n when signal n
/// stopped it.
///
/// It acts for the whole process, as the program does: while the command runs, SIGINT, SIGTERM
/// and SIGHUP stop it cleanly (it removes what it wrote and publishes nothing; a second signal
/// exits the process at once) and the handlers they had come back when it returns; its log
/// lines go to stderr through a global `tracing` subscriber, which the first call installs
/// (with that call's `--quiet`/`--verbose`) unless the process has one; and a run without
/// `--memory-limit` sets glibc's allocator to keep freed memory.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match args::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // What clap's `exit` does, without ending the process: help and the version go to
            // stdout, a mistake to stderr.
            let _ = e.print();
            let _ = std::io::stdout().flush();
            return e.exit_code() as u8;
        }
    };
    view::init_logging(cli.quiet, cli.verbose);
    let result = commands::run(cli.command, cli.quiet);
    let signal = signals::stop_handling();
    // The process may go on (a Python interpreter) or end without Rust's flush of stdout.
    let _ = std::io::stdout().flush();
    if signal != 0 {
        let name = signals::signal_name(signal);
        match &result {
            Ok(()) => eprintln!(
                "neardup: {name} arrived while the outputs were being published; they are \
                 published whole"
            ),
            Err(Error::Interrupted) => eprintln!(
                "neardup: interrupted by {name}; nothing was published and the files this run had \
                 written were removed"
            ),
            Err(e) => eprintln!(
                "neardup: error: {}\nneardup: interrupted by {name}",
                view::error_message(e)
            ),
        }
        return (128 + signal) as u8;
    }
    match result {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "neardup: error: {}",
                view::error_message(&e)
            );
            exit_code(&e)
        }
    }
}

/// The exit status of a command that failed with `error`: 2 when the arguments, settings or
/// named files are wrong (what the user must change), 130 (128 + SIGINT) when it was cancelled,
/// 1 for everything else.
pub fn exit_code(error: &Error) -> u8 {
    use neardup_dedup::DedupError;
    use neardup_index::IndexError;
    use neardup_keys::KeysError;
    match error {
        Error::Usage(_)
        | Error::Config(_)
        | Error::Paths(_)
        | Error::StepInput(_)
        | Error::StepOutputs(_)
        | Error::IndexUse(_)
        | Error::WrongKeyFiles(_) => 2,
        Error::Index(
            IndexError::OtherSettings { .. }
            | IndexError::Overlap { .. }
            | IndexError::NotAnIndex { .. }
            | IndexError::MinCount(_)
            | IndexError::Decisions { .. },
        ) => 2,
        Error::Online(
            neardup_online::IndexError::SettingsDiffer { .. }
            | neardup_online::IndexError::FileSettingsDiffer { .. }
            | neardup_online::IndexError::NotIndexFile { .. }
            | neardup_online::IndexError::NotSelfContained { .. }
            | neardup_online::IndexError::NamespaceInUse { .. }
            | neardup_online::IndexError::NoNamespace { .. },
        ) => 2,
        Error::Interrupted => 130,
        Error::Keys(KeysError::Config(_)) | Error::Dedup(DedupError::Config(_)) => 2,
        _ => 1,
    }
}
