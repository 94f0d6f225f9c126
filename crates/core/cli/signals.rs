//! SIGINT, SIGTERM and SIGHUP: the run stops at its next block, removes what it wrote and
//! publishes nothing; a second signal exits at once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};

use neardup::CancelToken;

/// The first of SIGINT, SIGTERM and SIGHUP that arrived (0: none).
pub(crate) static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The running command's cancel token, set before the signal handlers are installed.
pub(crate) static CANCEL: OnceLock<CancelToken> = OnceLock::new();

/// Only async-signal-safe work: atomics, write(2) and _exit(2).
extern "C" fn on_signal(signal: libc::c_int) {
    if SIGNAL
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        const MSG: &[u8] =
            b"\nneardup: second signal: exiting at once; the next run removes what is left\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(128 + signal);
        }
    }
    if let Some(cancel) = CANCEL.get() {
        cancel.cancel();
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP stop the run cleanly: the first cancels the returned token
/// (the run stops at its next block, removes what it wrote and exits with 128 + the signal's
/// number), a second exits at once. A signal ignored when neardup started (`nohup`, a
/// background job) stays ignored.
pub(crate) fn handle_signals() -> CancelToken {
    let cancel = CANCEL.get_or_init(CancelToken::new).clone();
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction with a zeroed, then filled, action; the handler only touches atomics.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
    cancel
}

pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}
