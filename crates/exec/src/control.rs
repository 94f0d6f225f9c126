//! What a caller hands a running step beside its settings: the token that stops it and the
//! counters it is watched by. Settings say what a step computes; these say how a caller follows
//! and stops one run of it, so they are never part of the settings (a settings value can be
//! cloned, compared, saved; a token is shared and set from another thread).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::progress::Progress;

/// Asks a running step to stop: set it from any thread (or a signal handler — [`cancel`] only
/// stores a flag, which is async-signal-safe), and the steps holding it end at their next block,
/// partition or file with an "interrupted" error; an output publication not yet committed
/// (`neardup_corpus::Publication`, which looks at the token a last time before it commits) then
/// removes what it wrote. Cloning shares the flag.
///
/// [`cancel`]: CancelToken::cancel
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Asks every step holding this token to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The runtime handles of one streaming step, passed beside its settings: the counters a caller
/// watches it by (none: nobody watches) and the token that stops it. The default is unwatched
/// and never cancelled.
#[derive(Clone, Debug, Default)]
pub struct StepControl {
    /// Counters the step updates as blocks finish.
    pub progress: Option<Arc<Progress>>,
    /// Stops the step at its next block or partition.
    pub cancel: CancelToken,
}

impl StepControl {
    /// Handles watched by `progress` (when given) and stopped by `cancel`.
    pub fn new(progress: Option<Arc<Progress>>, cancel: CancelToken) -> StepControl {
        StepControl { progress, cancel }
    }

    /// The counters, when watched.
    pub fn progress(&self) -> Option<&Progress> {
        self.progress.as_deref()
    }

    /// Whether the step has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}
