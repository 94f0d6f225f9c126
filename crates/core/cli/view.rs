//! What the command line shows: log output, progress bars on a terminal, and its lines on
//! stderr and answers on stdout.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use neardup::{Error, IoOp, IoTarget, RunControl};

/// Sends log lines to stderr, filtered by `RUST_LOG` or else by `-q`/`-v`. A process that has a
/// global subscriber already (an earlier command run in it) keeps it.
pub(crate) fn init_logging(quiet: bool, verbose: u8) {
    let default = if quiet {
        "error"
    } else {
        // The storage client's retries (which do not name the object) only with -v: the
        // request that fails after its last retry is reported, naming it.
        match verbose {
            0 => "info,object_store=warn",
            1 => "debug",
            _ => "trace",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// How often the progress thread looks at the counters.
const REFRESH: Duration = Duration::from_millis(200);

/// Shows the stages' progress on stderr until dropped: bars on a terminal, a log line every
/// ten seconds otherwise.
pub(crate) struct ProgressView {
    /// Dropped to stop the thread: its wait between refreshes ends at once. (A sleep there made
    /// every run end up to a refresh interval late, about 0.1 s on average, waiting to join it.)
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressView {
    /// Shows the counters of `control`'s stages.
    pub(crate) fn start(control: &RunControl, quiet: bool) -> ProgressView {
        ProgressView::refreshed_every(REFRESH, control, quiet)
    }

    /// [`ProgressView::start`], looking at the counters every `refresh`.
    fn refreshed_every(refresh: Duration, control: &RunControl, quiet: bool) -> ProgressView {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = (!quiet).then(|| {
            let control = control.clone();
            std::thread::spawn(move || {
                let terminal = std::io::stderr().is_terminal();
                let started = Instant::now();
                let mut last_log = Instant::now();
                let mut bar: Option<(u8, ProgressBar)> = None;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(refresh) {
                    let Some((stage, p)) = control.current() else {
                        return;
                    };
                    if terminal {
                        if bar.as_ref().is_none_or(|(s, _)| *s != stage) {
                            if let Some((_, b)) = bar.take() {
                                b.finish_and_clear();
                            }
                            let b = ProgressBar::new(p.total().max(1));
                            b.set_style(
                                ProgressStyle::with_template(
                                    "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}",
                                )
                                .expect("progress template")
                                .progress_chars("=> "),
                            );
                            b.set_prefix(if stage == 1 { "stage 1 keys " } else { "stage 2 dedup" });
                            bar = Some((stage, b));
                        }
                        let (_, b) = bar.as_ref().expect("bar");
                        b.set_length(p.total().max(p.bytes()).max(1));
                        b.set_position(p.bytes());
                        b.set_message(format!("{} samples", p.samples()));
                    } else if last_log.elapsed() >= Duration::from_secs(10) {
                        last_log = Instant::now();
                        let secs = started.elapsed().as_secs_f64();
                        tracing::info!(
                            "stage {}: {:.0} MB of ~{:.0} MB, {} samples ({:.0} s elapsed)",
                            stage,
                            p.bytes() as f64 / 1e6,
                            p.total() as f64 / 1e6,
                            p.samples(),
                            secs
                        );
                    }
                }
                if let Some((_, b)) = bar {
                    b.finish_and_clear();
                }
            })
        });
        ProgressView {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A line for the user on stderr. A closed stderr is no reason to fail a run that succeeded.
pub(crate) fn note(quiet: bool, line: impl std::fmt::Display) {
    if !quiet {
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

/// Writes a command's answer to stdout. A reader that stopped early (`neardup params | head -1`)
/// ends the command quietly; any other write error is one.
pub(crate) fn answer(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Io {
            op: IoOp::Write,
            target: IoTarget::Stdout,
            source: e,
        }),
        _ => Ok(()),
    }
}

/// An error's message as the command line shows it: the library names settings by what they
/// are ("the preference `score:desc`"); here the flag that set them is added.
pub(crate) fn error_message(e: &Error) -> String {
    match e {
        Error::Dedup(neardup::dedup::DedupError::BadRank(b)) => {
            format!("{e} (--prefer {})", b.prefer)
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_stops_at_once_when_dropped() {
        // Waiting out the refresh interval on drop made every run end late; with an interval
        // of an hour, a view that waits for it cannot end within the minute allowed here.
        let control = RunControl::watched();
        let (done, dropped) = mpsc::channel();
        std::thread::spawn(move || {
            let view = ProgressView::refreshed_every(Duration::from_secs(3600), &control, false);
            assert!(
                view.thread.is_some(),
                "a view that is not quiet has a thread"
            );
            drop(view);
            done.send(()).expect("the test waits");
        });
        dropped
            .recv_timeout(Duration::from_secs(60))
            .expect("the view's thread ended when the view was dropped");
    }
}
