//! Files gpurt writes and reads on its own account (SECURITY.md): results and
//! snapshots written for the caller are replaced atomically, through a temporary file
//! created exclusively (never through a link planted at its name); the kernel cache
//! trusts only a directory and entries of this user that no one else can write.
//!
//! At the bottom of the module graph: it imports nothing of gpurt.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode bits that let the group or others write.
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// Writes `bytes` to `path` atomically: into a new temporary file beside it (created
/// with O_EXCL and O_NOFOLLOW, `mode` less the umask), flushed, then renamed over
/// `path`. A link at `path` is replaced, not followed; on failure `path` is as it was
/// and the temporary file is gone. A device, FIFO or socket at `path` (`/dev/stdout`)
/// is written to as it is: it cannot be replaced.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let kind = meta.file_type();
        if kind.is_char_device() || kind.is_block_device() || kind.is_fifo() || kind.is_socket() {
            return OpenOptions::new().write(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)?.write_all(bytes);
        }
    }
    let (temporary, mut file) = create_temporary(path, mode)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all()).and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// A new file beside `path`, named after it, that did not exist before this call.
fn create_temporary(path: &Path, mode: u32) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut last = None;
    for _ in 0..16 {
        // The process, a counter and the clock: unpredictable enough that planting a
        // file at the name ahead is a guess, and O_EXCL refuses whatever is there.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let unique = format!(".{}.tmp.{}.{}.{nanos:x}", name.to_string_lossy(), std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let temporary = path.with_file_name(unique);
        match create_exclusive(&temporary, mode) {
            Ok(file) => return Ok((temporary, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("the loop ran"))
}

/// Creates `path`, which must not exist (a link there, even a dangling one, fails).
pub fn create_exclusive(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
}

/// Why a directory is not trusted with code gpurt will load from it, or None.
pub fn untrusted_directory(dir: &Path) -> Option<String> {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) => return Some(format!("{}: {e}", dir.display())),
    };
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        Some(format!("{} is not a directory", dir.display()))
    } else if meta.uid() != me {
        Some(format!("{} belongs to user {}, not to this process's user {me}", dir.display(), meta.uid()))
    } else if meta.mode() & WRITABLE_BY_OTHERS != 0 {
        Some(format!("{} is writable by its group or others (mode {:o})", dir.display(), meta.mode() & 0o7777))
    } else {
        None
    }
}

/// Creates `dir` and its missing parents with mode 0700 (an existing one is left as
/// it is), then says whether it is trusted.
pub fn private_directory(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    untrusted_directory(dir).map_or(Ok(()), Err)
}

/// The contents of `path` if it is a regular file of this user that no one else may
/// write, read without following a link; None otherwise (missing, a link, a device,
/// a file of another user).
pub fn read_private(path: &Path) -> Option<Vec<u8>> {
    let mut file = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK).open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != unsafe { libc::geteuid() } || meta.mode() & WRITABLE_BY_OTHERS != 0 {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// A fresh directory under the temporary directory, removed with everything in it
/// when dropped, so test runs leave nothing behind.
#[cfg(test)]
pub(crate) struct ScratchDir(PathBuf);

#[cfg(test)]
impl ScratchDir {
    pub(crate) fn new(name: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("gpurt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }
}

#[cfg(test)]
impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new(&format!("files-{name}"))
    }

    fn is_root() -> bool {
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_link_at_the_destination_is_replaced_not_followed() {
        let dir = scratch("link");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let path = dir.join("results.csv");
        symlink(&victim, &path).unwrap();
        write_atomically(&path, b"new", 0o644).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_file());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    }

    #[test]
    fn a_device_is_written_to_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        write_atomically(Path::new("/dev/null"), b"snapshot", 0o644).unwrap();
        assert!(std::fs::symlink_metadata("/dev/null").unwrap().file_type().is_char_device());
    }

    #[test]
    fn a_temporary_file_is_never_opened_through_a_planted_link() {
        let dir = scratch("planted");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = dir.join(".x.tmp");
        symlink(&victim, &planted).unwrap();
        assert_eq!(create_exclusive(&planted, 0o600).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        let dangling = dir.join(".y.tmp");
        symlink(dir.join("nothing"), &dangling).unwrap();
        assert_eq!(create_exclusive(&dangling, 0o600).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert!(!dir.join("nothing").exists(), "a dangling link's target was created");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn a_failed_write_leaves_the_file_as_it_was() {
        let dir = scratch("failed");
        let path = dir.join("missing-dir").join("file");
        assert!(write_atomically(&path, b"x", 0o644).is_err());
        let path = dir.join("kept");
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        let refused = write_atomically(&path, b"new", 0o644);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        if !is_root() {
            assert!(refused.is_err());
            assert_eq!(std::fs::read(&path).unwrap(), b"old");
        }
    }

    #[test]
    fn directories_others_can_write_or_own_are_untrusted() {
        let dir = scratch("trust");
        let private = dir.join("a/b");
        private_directory(&private).unwrap();
        assert_eq!(std::fs::metadata(&private).unwrap().mode() & 0o777, 0o700);
        let open = dir.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(untrusted_directory(&open).unwrap().contains("writable by its group or others (mode 777)"));
        assert!(private_directory(&open).is_err(), "an existing open directory is not made private behind the user's back");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(untrusted_directory(&open).is_some(), "sticky, as /tmp: still writable by others");
        let file = dir.join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(untrusted_directory(&file).unwrap().contains("not a directory"));
        if is_root() {
            let theirs = dir.join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            assert!(untrusted_directory(&theirs).unwrap().contains("belongs to user 65534"));
        } else {
            println!("a directory of another user: not checked (it needs root to make one)");
        }
    }

    #[test]
    fn only_private_regular_files_of_this_user_are_read() {
        let dir = scratch("read");
        let good = dir.join("good");
        std::fs::write(&good, b"code").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_private(&good).unwrap(), b"code");
        let link = dir.join("link");
        symlink(&good, &link).unwrap();
        assert!(read_private(&link).is_none(), "a link is not followed");
        let open = dir.join("open");
        std::fs::write(&open, b"code").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(read_private(&open).is_none(), "a file others may write");
        assert!(read_private(&dir).is_none(), "a directory");
        assert!(read_private(Path::new("/dev/null")).is_none(), "a device");
        if is_root() {
            let theirs = dir.join("theirs");
            std::fs::write(&theirs, b"code").unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o644)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            assert!(read_private(&theirs).is_none(), "a file of another user");
        }
    }
}
