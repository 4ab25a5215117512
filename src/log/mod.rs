//! Logging: off by default. `GPURT_LOG=error|warn|info|debug` sends it to stderr;
//! `gpurt_set_log_callback` routes it to the caller instead.

pub mod ffi;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Once, RwLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    Off = 0,
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

impl Level {
    pub fn parse(text: &str) -> Option<Level> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "none" | "0" => Some(Level::Off),
            "error" => Some(Level::Error),
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" => Some(Level::Debug),
            _ => None,
        }
    }
    pub fn from_raw(raw: i32) -> Option<Level> {
        [Level::Off, Level::Error, Level::Warn, Level::Info, Level::Debug].into_iter().find(|l| *l as i32 == raw)
    }
    fn name(self) -> &'static str {
        match self {
            Level::Off => "off",
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// A caller's log sink: `(level, NUL-terminated message, user pointer)`.
pub type Callback = unsafe extern "C" fn(level: libc::c_int, message: *const libc::c_char, user: *mut libc::c_void);

#[derive(Clone, Copy)]
struct Sink {
    callback: Callback,
    user: usize,
}

static MAX_LEVEL: AtomicU8 = AtomicU8::new(Level::Off as u8);
static FROM_ENV: Once = Once::new();
static SINK: RwLock<Option<Sink>> = RwLock::new(None);

fn read_env_once() {
    FROM_ENV.call_once(|| {
        if let Ok(value) = std::env::var("GPURT_LOG") {
            // An unknown value turns on warnings so the mistake itself is visible.
            let level = Level::parse(&value).unwrap_or(Level::Warn);
            MAX_LEVEL.store(level as u8, Ordering::Relaxed);
            if Level::parse(&value).is_none() {
                emit(Level::Warn, &format!("GPURT_LOG={value:?} is not one of off, error, warn, info, debug"));
            }
        }
    });
}

#[inline]
pub fn enabled(level: Level) -> bool {
    read_env_once();
    level != Level::Off && level as u8 <= MAX_LEVEL.load(Ordering::Relaxed)
}

pub fn set_level(level: Level) {
    read_env_once();
    MAX_LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Routes messages to `callback` (or back to stderr with `None`).
pub fn set_callback(callback: Option<Callback>, user: *mut libc::c_void) {
    let mut sink = SINK.write().unwrap_or_else(|e| e.into_inner());
    *sink = callback.map(|callback| Sink { callback, user: user as usize });
}

pub fn log(level: Level, message: &str) {
    if enabled(level) {
        emit(level, message);
    }
}

/// Emits whatever the level filter says: for messages the caller explicitly asked
/// for, such as the sync debug mode's warnings.
pub fn force(level: Level, message: &str) {
    emit(level, message);
}

#[cold]
fn emit(level: Level, message: &str) {
    let sink = *SINK.read().unwrap_or_else(|e| e.into_inner());
    match sink {
        Some(sink) => {
            let text = std::ffi::CString::new(message.replace('\0', "\\0")).unwrap_or_default();
            // SAFETY: the caller registered this callback for exactly this signature.
            unsafe { (sink.callback)(level as i32, text.as_ptr(), sink.user as *mut libc::c_void) }
        }
        None => eprintln!("[gpurt {}] {message}", level.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

    unsafe extern "C" fn collect(level: i32, message: *const libc::c_char, user: *mut libc::c_void) {
        assert_eq!(user as usize, 42);
        let text = std::ffi::CStr::from_ptr(message).to_string_lossy().into_owned();
        SEEN.lock().unwrap().push((level, text));
    }

    #[test]
    fn levels_parse_and_callback_receives_enabled_messages_only() {
        assert_eq!(Level::parse("WARNING"), Some(Level::Warn));
        assert_eq!(Level::parse("verbose"), None);
        set_callback(Some(collect), 42 as *mut libc::c_void);
        set_level(Level::Warn);
        log(Level::Debug, "hidden");
        log(Level::Warn, "shown");
        set_level(Level::Off);
        set_callback(None, std::ptr::null_mut());
        let seen = SEEN.lock().unwrap();
        assert_eq!(seen.iter().filter(|(_, m)| m == "hidden").count(), 0);
        assert!(seen.contains(&(Level::Warn as i32, "shown".to_string())));
    }
}
