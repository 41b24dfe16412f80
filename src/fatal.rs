//! The last line of defence when the process dies of a fatal signal (an `abort()` or assertion
//! inside llama.cpp, a segmentation fault): give the terminal back before dying.
//!
//! The chat's finished turns are already on disk (each is saved when it ends), so what a crash
//! can still ruin is the user's terminal: left in the alternate screen, with mouse reporting on
//! and in raw mode. The handler installed here does only async-signal-safe things: it writes
//! fixed escape sequences (leave the alternate screen, stop mouse reporting and bracketed
//! paste, show the cursor) to the terminal, restores the terminal settings saved at start-up
//! with `tcsetattr`, then re-raises the signal with its default action so the exit status (and
//! a core dump, where enabled) stay what they would have been.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

/// The signals that end the process with a crash.
const FATAL_SIGNALS: [libc::c_int; 5] = [
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
];

/// Leave the alternate screen, stop every mouse-reporting mode and bracketed paste, show the
/// cursor, reset colours.
const RESTORE_SEQUENCE: &[u8] =
    b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?2004l\x1b[0m\x1b[?25h\x1b[?1049l\r\n";

const CRASH_NOTE: &[u8] =
    b"tokscope: fatal signal; terminal restored, finished turns are saved\r\n";

static SCREEN_ACTIVE: AtomicBool = AtomicBool::new(false);
static TTY_FD: AtomicI32 = AtomicI32::new(-1);
static SAVED_TERMIOS: OnceLock<libc::termios> = OnceLock::new();

/// Tell the handler whether the full-screen UI owns the terminal (set by `tui::enter` and
/// `tui::restore`): only then are the escape sequences and the saved settings written back.
pub(crate) fn set_screen_active(active: bool) {
    SCREEN_ACTIVE.store(active, Ordering::SeqCst);
}

/// Save the terminal's settings and install the handler. Call once at start-up, before any
/// other thread exists and before the terminal is put into raw mode.
#[allow(unsafe_code)]
pub fn install() {
    // SAFETY: open with a NUL-terminated path literal; the descriptor is kept for the life of
    // the process (the handler writes to it).
    let fd = unsafe {
        libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if fd >= 0 {
        // SAFETY: termios is plain data; tcgetattr fills it or fails.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd is a valid open descriptor and t a valid termios to write into.
        if unsafe { libc::tcgetattr(fd, &mut t) } == 0 {
            let _ = SAVED_TERMIOS.set(t);
            TTY_FD.store(fd, Ordering::SeqCst);
        } else {
            // SAFETY: closing the descriptor opened above, used nowhere else.
            unsafe { libc::close(fd) };
        }
    }
    ensure_alternate_stack();
    for sig in FATAL_SIGNALS {
        // SAFETY: a zeroed sigaction is valid; the handler is an extern "C" fn that only makes
        // async-signal-safe calls; installing at start-up has no other preconditions.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction =
                on_fatal_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            // SA_ONSTACK: a stack overflow (llama.cpp's regex pre-tokenizers recurse on long
            // runs of one character) leaves no stack to run the handler on; the alternate
            // stack does. Rust gives every thread it starts one; `ensure_alternate_stack` covers
            // a thread that has none.
            action.sa_flags = libc::SA_NODEFER | libc::SA_RESETHAND | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Give the calling thread an alternate signal stack when it has none (Rust's runtime makes one
/// for the main thread and every thread it spawns; this is for any other). The memory is kept
/// for the life of the process, as the kernel may use it at any time.
#[allow(unsafe_code)]
pub(crate) fn ensure_alternate_stack() {
    const SIZE: usize = 64 << 10;
    // SAFETY: sigaltstack with a null new stack only reads the current one into `old`.
    let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut old) } != 0 {
        return;
    }
    if old.ss_flags & libc::SS_DISABLE == 0 {
        return;
    }
    let memory: &'static mut [u8] = Box::leak(vec![0u8; SIZE].into_boxed_slice());
    let stack = libc::stack_t {
        ss_sp: memory.as_mut_ptr().cast(),
        ss_flags: 0,
        ss_size: SIZE,
    };
    // SAFETY: the stack points at leaked memory of SIZE bytes that is never freed.
    unsafe { libc::sigaltstack(&stack, std::ptr::null_mut()) };
}

#[allow(unsafe_code)]
extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let fd = TTY_FD.load(Ordering::SeqCst);
    if fd >= 0 && SCREEN_ACTIVE.swap(false, Ordering::SeqCst) {
        // SAFETY: write and tcsetattr are async-signal-safe; the buffers are statics and the
        // termios was saved before the handler was installed.
        unsafe {
            libc::write(fd, RESTORE_SEQUENCE.as_ptr().cast(), RESTORE_SEQUENCE.len());
            if let Some(t) = SAVED_TERMIOS.get() {
                libc::tcsetattr(fd, libc::TCSANOW, t);
            }
            libc::write(fd, CRASH_NOTE.as_ptr().cast(), CRASH_NOTE.len());
        }
    }
    // SAFETY: signal and raise are async-signal-safe. SA_RESETHAND already restored the
    // default action; setting it again is harmless, and raise ends the process as the signal
    // would have.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handler must be able to run when the stack is exhausted: it is installed with
    /// SA_ONSTACK and the thread has an alternate stack (before the fix a stack overflow in
    /// llama.cpp left the terminal in the alternate screen).
    #[test]
    #[allow(unsafe_code)]
    fn the_handler_runs_on_an_alternate_stack() {
        install();
        for sig in FATAL_SIGNALS {
            // SAFETY: reading the current action into a zeroed struct.
            let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
            assert_eq!(
                unsafe { libc::sigaction(sig, std::ptr::null(), &mut now) },
                0
            );
            assert_ne!(now.sa_flags & libc::SA_ONSTACK, 0, "signal {sig}");
        }
        // A thread with its alternate stack taken away gets one back.
        std::thread::spawn(|| {
            let off = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
            // SAFETY: disabling this thread's alternate stack, then reading it back.
            unsafe { libc::sigaltstack(&off, std::ptr::null_mut()) };
            ensure_alternate_stack();
            let mut st: libc::stack_t = unsafe { std::mem::zeroed() };
            unsafe { libc::sigaltstack(std::ptr::null(), &mut st) };
            assert_eq!(st.ss_flags & libc::SS_DISABLE, 0);
            assert!(st.ss_size >= 64 << 10);
        })
        .join()
        .unwrap();
    }
}
