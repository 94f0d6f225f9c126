//! What the command line shows: log output (coloured on a terminal only), progress (bars on a
//! terminal, log lines otherwise), and its lines on stderr and answers on stdout.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use neardup::exec::Progress;
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
        // Colours for a terminal only: a log file or a pipe gets the lines as text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// How often the progress thread looks at the counters.
const REFRESH: Duration = Duration::from_millis(200);
/// How often a line of progress is logged when stderr is no terminal (a batch job's log).
const LOG_EVERY: Duration = Duration::from_secs(10);
/// How long a stage is watched before a rate and an ETA are shown: the first refresh finds
/// the blocks read before the view first looked, and a rate over them would be absurd.
const RATE_AFTER: Duration = Duration::from_secs(1);

/// One stage as the view has watched it: since when, and from which count of bytes, so that
/// rates are over what the view saw happen.
struct Watched {
    stage: u8,
    since: Instant,
    bytes_then: u64,
}

impl Watched {
    fn new(stage: u8, p: &Progress) -> Watched {
        Watched {
            stage,
            since: Instant::now(),
            bytes_then: p.bytes(),
        }
    }

    /// Bytes per second since the view began watching the stage, once it has for a while.
    fn rate(&self, p: &Progress) -> Option<f64> {
        let secs = self.since.elapsed();
        (secs >= RATE_AFTER)
            .then(|| p.bytes().saturating_sub(self.bytes_then) as f64 / secs.as_secs_f64())
            .filter(|r| *r > 0.0)
    }

    /// What the stage has read, of how much, how fast and for how much longer: a bar's
    /// message or a log line's end.
    fn describe(&self, p: &Progress, with_bytes: bool) -> String {
        let mut s = String::new();
        if with_bytes {
            s += &format!("{} of ~{}", mb(p.bytes()), mb(p.total().max(p.bytes())));
            if p.total() > 0 {
                s += &format!(
                    " ({:.0} %)",
                    100.0 * p.bytes().min(p.total()) as f64 / p.total() as f64
                );
            }
            s += ", ";
        }
        s += &format!("{} samples", p.samples());
        if let Some(rate) = self.rate(p) {
            s += &format!(", {}/s", mb(rate as u64));
            let left = p.total().saturating_sub(p.bytes());
            if left > 0 {
                s += &format!(", ETA {}", eta(left as f64 / rate));
            }
        }
        s
    }
}

/// Characters between a bar's brackets.
const BAR_WIDTH: usize = 30;

/// `[=====>    ]`: `done` of `total` in `width` characters. Progress counts bytes on disk, as
/// the total does, so the count never passes it; a stage that does not know its total yet
/// shows an empty bar, not a full one.
fn bar_text(done: u64, total: u64, width: usize) -> String {
    let filled = if total == 0 {
        0
    } else {
        (done.min(total) as u128 * width as u128 / total as u128) as usize
    };
    let head = usize::from(filled < width && filled > 0);
    format!(
        "[{}{}{}]",
        "=".repeat(filled),
        ">".repeat(head),
        " ".repeat(width - filled - head)
    )
}

/// A byte count for people: MB with one decimal below 10, else whole.
fn mb(bytes: u64) -> String {
    let mb = bytes as f64 / 1e6;
    if mb < 10.0 {
        format!("{mb:.1} MB")
    } else {
        format!("{mb:.0} MB")
    }
}

/// Seconds left, as `42 s`, `3 min 05 s` or `2 h 10 min`.
fn eta(secs: f64) -> String {
    let s = secs.ceil() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

fn stage_name(stage: u8) -> &'static str {
    if stage == 1 {
        "stage 1 keys "
    } else {
        "stage 2 dedup"
    }
}

/// Shows the stages' progress on stderr until dropped: bars on a terminal; otherwise (a pipe,
/// a batch job's log) a line when a stage starts and every ten seconds, never a bar's frames.
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
                if std::io::stderr().is_terminal() {
                    show_bars(&control, refresh, &stopped);
                } else {
                    log_lines(&control, refresh, &stopped);
                }
            })
        });
        ProgressView {
            stop: Some(stop),
            thread,
        }
    }
}

/// A bar per stage on a terminal, until `stopped`.
fn show_bars(control: &RunControl, refresh: Duration, stopped: &mpsc::Receiver<()>) {
    let mut bar: Option<(Watched, ProgressBar)> = None;
    // Looked at once before the first wait: a stage shorter than a refresh still gets its bar.
    let mut first = true;
    while std::mem::take(&mut first)
        || matches!(
            stopped.recv_timeout(refresh),
            Err(RecvTimeoutError::Timeout)
        )
    {
        let Some((stage, p)) = control.current() else {
            return;
        };
        if bar.as_ref().is_none_or(|(w, _)| w.stage != stage) {
            if let Some((_, b)) = bar.take() {
                b.finish_and_clear();
            }
            // The bar is drawn into the message, from the same look at the counters as the
            // figures beside it: indicatif draws between calls, and a bar set apart from its
            // message showed a full bar beside an old "0.0 MB (0 %)".
            let b = ProgressBar::new(1);
            b.set_style(ProgressStyle::with_template("{prefix} {msg}").expect("progress template"));
            b.set_prefix(stage_name(stage));
            bar = Some((Watched::new(stage, p), b));
        }
        let (watched, b) = bar.as_ref().expect("bar");
        b.set_message(format!(
            "{} {}",
            bar_text(p.bytes(), p.total(), BAR_WIDTH),
            watched.describe(p, true)
        ));
    }
    if let Some((_, b)) = bar {
        b.finish_and_clear();
    }
}

/// Log lines when stderr is no terminal, until `stopped`.
fn log_lines(control: &RunControl, refresh: Duration, stopped: &mpsc::Receiver<()>) {
    let mut watched: Option<Watched> = None;
    let mut last_line = Instant::now();
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(refresh) {
        let Some((stage, p)) = control.current() else {
            return;
        };
        if watched.as_ref().is_none_or(|w| w.stage != stage) {
            // A stage that began and ended between two looks still gets its line, first.
            let seen = watched.as_ref().map_or(0, |w| w.stage);
            for missed in seen + 1..stage {
                let earlier = match missed {
                    1 => control.stage1.as_deref(),
                    _ => None,
                };
                if let Some(e) = earlier.filter(|e| e.bytes() > 0) {
                    tracing::info!(
                        "{}: started, ~{} to read",
                        stage_name(missed).trim_end(),
                        mb(e.total())
                    );
                }
            }
            tracing::info!(
                "{}: started, ~{} to read",
                stage_name(stage).trim_end(),
                mb(p.total())
            );
            watched = Some(Watched::new(stage, p));
            last_line = Instant::now();
        } else if last_line.elapsed() >= LOG_EVERY {
            last_line = Instant::now();
            let w = watched.as_ref().expect("watched");
            tracing::info!("{}: {}", stage_name(stage).trim_end(), w.describe(p, true));
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
            error: e,
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
        Error::Dedup(neardup::dedup::DedupError::Config(
            neardup::dedup::SettingsError::PreferFieldEmpty { prefer, .. },
        )) => format!("{e} (--prefer {prefer})"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_is_drawn_from_the_figures_beside_it() {
        assert_eq!(bar_text(0, 0, 10), "[          ]");
        assert_eq!(bar_text(5, 0, 10), "[          ]");
        assert_eq!(bar_text(0, 100, 10), "[          ]");
        assert_eq!(bar_text(55, 100, 10), "[=====>    ]");
        assert_eq!(bar_text(100, 100, 10), "[==========]");
        assert_eq!(bar_text(250, 100, 10), "[==========]");
    }

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
