//! SIGINT, SIGTERM and SIGHUP: the run stops at its next block, removes what it wrote and
//! publishes nothing; a second signal exits at once. The handlers are the command's only while
//! it runs ([`handle_signals`] to [`stop_handling`]): the process may be a Python interpreter,
//! whose own handlers come back after.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

use neardup::CancelToken;

/// The first of SIGINT, SIGTERM and SIGHUP that arrived while the command ran (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The running command's cancel token, set before the signal handlers are installed. A
/// pointer, not a lock, because the handler reads it; each command's token is leaked (a few
/// bytes) since a handler on another thread may still hold the previous one.
static CANCEL: AtomicPtr<CancelToken> = AtomicPtr::new(std::ptr::null_mut());
/// The handlers the signals had before [`handle_signals`] replaced them.
static PREVIOUS: Mutex<Vec<(libc::c_int, libc::sigaction)>> = Mutex::new(Vec::new());

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
    let cancel = CANCEL.load(Ordering::SeqCst);
    if !cancel.is_null() {
        // SAFETY: tokens are leaked, never freed; cancel() is an atomic store.
        unsafe { (*cancel).cancel() };
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP stop the run cleanly: the first cancels the returned token
/// (the run stops at its next block, removes what it wrote and exits with 128 + the signal's
/// number), a second exits at once. A signal ignored when neardup started (`nohup`, a
/// background job) stays ignored. Called again before [`stop_handling`], returns the same token.
pub(crate) fn handle_signals() -> CancelToken {
    let current = CANCEL.load(Ordering::SeqCst);
    if !current.is_null() {
        // SAFETY: set below from a leaked box, never freed.
        return unsafe { (*current).clone() };
    }
    let cancel: &'static CancelToken = Box::leak(Box::new(CancelToken::new()));
    CANCEL.store(std::ptr::from_ref(cancel).cast_mut(), Ordering::SeqCst);
    let mut previous = PREVIOUS.lock().unwrap_or_else(|e| e.into_inner());
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction with a zeroed, then filled, action; the handler only touches atomics.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) == 0 {
                previous.push((signal, old));
            }
        }
    }
    cancel.clone()
}

/// Gives the signals back the handlers they had before [`handle_signals`] and returns the
/// signal that arrived meanwhile (0: none), forgetting it for the next command in this process.
pub(crate) fn stop_handling() -> i32 {
    let mut previous = PREVIOUS.lock().unwrap_or_else(|e| e.into_inner());
    for (signal, old) in previous.drain(..) {
        // SAFETY: puts back an action sigaction returned.
        unsafe {
            libc::sigaction(signal, &old, std::ptr::null_mut());
        }
    }
    CANCEL.store(std::ptr::null_mut(), Ordering::SeqCst);
    SIGNAL.swap(0, Ordering::SeqCst)
}

pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}
