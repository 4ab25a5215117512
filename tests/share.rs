//! The share group's registry (src/share/registry.rs) across real processes, no GPU:
//! members see each other; a member killed with SIGKILL is pruned (a zombie not yet
//! reaped too), a lock holder killed is replaced and a live one is waited for within
//! bounds; a full group, and registry files of the wrong mode, owner, size or kind, or
//! behind a symbolic link, are refused naming the reason. Child processes are this test
//! binary run again with GPURT_SHARE_CHILD set (the `child` test).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpurt::share::registry::{path_of, Member, Registry};

/// The directory every test of this binary keeps its registries in (GPURT_SHARE_DIR,
/// set once before any registry is opened, and inherited by the children).
fn share_dir() -> &'static str {
    static DIR: OnceLock<String> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var("GPURT_SHARE_DIR").unwrap_or_else(|_| {
            // Emptied at each run's start; a child inherits the variable and keeps it.
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("share");
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            dir.to_string_lossy().into_owned()
        });
        std::env::set_var("GPURT_SHARE_DIR", &dir);
        dir
    })
}

/// This binary's `child` test in a process of its own, doing `what` in group `name`,
/// once it has said it did.
fn spawn(what: &str, name: &str) -> Child {
    share_dir();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("GPURT_SHARE_CHILD", what)
        .env("GPURT_SHARE_NAME", name)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The harness may print "test child ... " before it on the same line.
    let said = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("child: "))).expect("the child says what it did").unwrap();
    assert!(said.ends_with(&format!("child: {what}")), "{said}");
    child
}

fn kill(child: &Child) {
    // SAFETY: a child of this process.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) }, 0);
}

#[test]
fn child() {
    let (Ok(what), Ok(name)) = (std::env::var("GPURT_SHARE_CHILD"), std::env::var("GPURT_SHARE_NAME")) else { return };
    let registry = Registry::open(&name).unwrap();
    match what.as_str() {
        "join" => {
            registry.join(3).unwrap();
            println!("child: join");
            std::thread::sleep(Duration::from_secs(60));
        }
        "lock" => {
            registry
                .with_lock(|| {
                    println!("child: lock");
                    std::thread::sleep(Duration::from_secs(60));
                })
                .unwrap();
        }
        _ => panic!("no such child: {what}"),
    }
}

#[test]
fn members_see_each_other_and_a_killed_member_is_pruned() {
    share_dir();
    let registry = Registry::open("members").unwrap();
    let mine = registry.join(0).unwrap();
    let mut children: Vec<Child> = (0..3).map(|_| spawn("join", "members")).collect();
    let members = registry.members().unwrap();
    assert_eq!(members.len(), 4, "{members:?}");
    for c in &children {
        assert!(members.contains(&Member { pid: c.id(), device: 3 }), "{members:?}");
    }
    // Killed and not yet reaped (a zombie): gone from the group already.
    kill(&children[0]);
    let start = Instant::now();
    while registry.members().unwrap().iter().any(|m| m.pid == children[0].id()) {
        assert!(start.elapsed() < Duration::from_secs(5), "the killed member stays");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(registry.members().unwrap().len(), 3);
    for c in &mut children {
        kill(c);
        c.wait().unwrap();
    }
    assert_eq!(registry.members().unwrap(), vec![Member { pid: std::process::id(), device: 0 }]);
    registry.leave(mine).unwrap();
    assert!(registry.members().unwrap().is_empty());
}

#[test]
fn a_live_lock_holder_is_waited_for_and_a_killed_one_replaced() {
    share_dir();
    let registry = Registry::open("lock").unwrap();
    let mut holder = spawn("lock", "lock");
    let start = Instant::now();
    let refused = registry.members().unwrap_err();
    assert!(start.elapsed() >= Duration::from_secs(2) && start.elapsed() < Duration::from_secs(5), "waited {:?}", start.elapsed());
    assert!(refused.message.contains(&format!("locked by process {}", holder.id())), "{}", refused.message);
    kill(&holder);
    holder.wait().unwrap();
    let start = Instant::now();
    assert!(registry.members().unwrap().is_empty());
    assert!(start.elapsed() < Duration::from_millis(500), "the dead holder's lock taken over at once");
}

#[test]
fn threads_join_at_once_and_a_full_group_refuses() {
    share_dir();
    let registry = Registry::open("full").unwrap();
    let slots: Vec<usize> = std::thread::scope(|s| {
        let registry = &registry;
        let joins: Vec<_> = (0..8).map(|d| s.spawn(move || registry.join(d).unwrap())).collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let mut distinct = slots.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 8, "{slots:?}");
    let more: Vec<usize> = (8..Registry::capacity()).map(|_| registry.join(0).unwrap()).collect();
    let refused = registry.join(0).unwrap_err();
    assert!(refused.message.contains("members already"), "{}", refused.message);
    // Another process's view of the same file agrees.
    assert_eq!(Registry::open("full").unwrap().members().unwrap().len(), Registry::capacity());
    for slot in slots.into_iter().chain(more) {
        registry.leave(slot).unwrap();
    }
    assert!(registry.members().unwrap().is_empty());
}

#[test]
fn registry_files_not_ours_alone_are_refused() {
    share_dir();
    let refused = |name: &str| Registry::open(name).err().map(|e| e.message.to_string()).unwrap_or_default();
    // Readable by others.
    let path = path_of("open-mode").unwrap();
    drop(Registry::open("open-mode").unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(refused("open-mode").contains("mode 644"), "{}", refused("open-mode"));
    // Not a registry's size.
    std::fs::write(path_of("small").unwrap(), b"not a registry").unwrap();
    std::fs::set_permissions(path_of("small").unwrap(), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(refused("small").contains("bytes, a registry has"), "{}", refused("small"));
    // Of the registry's size but never made one (no magic).
    let blank = path_of("blank").unwrap();
    std::fs::write(&blank, vec![0u8; std::fs::metadata(&path).unwrap().len() as usize]).unwrap();
    std::fs::set_permissions(&blank, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(refused("blank").contains("is not a gpurt share registry"), "{}", refused("blank"));
    // A symbolic link where the registry would be.
    std::os::unix::fs::symlink(&path, path_of("link").unwrap()).unwrap();
    assert!(refused("link").contains("cannot open the share registry"), "{}", refused("link"));
    // A directory.
    std::fs::create_dir(path_of("dir").unwrap()).unwrap();
    assert!(!refused("dir").is_empty());
    // Another user's (only root can make one here).
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = path_of("theirs").unwrap();
        drop(Registry::open("theirs").unwrap());
        let c = std::ffi::CString::new(theirs).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        assert!(refused("theirs").contains("owned by user 65534"), "{}", refused("theirs"));
    } else {
        eprintln!("skipped: a registry of another user (needs root to make one)");
    }
    // Names that would leave the directory.
    for name in ["", "../x", ".hidden", "a/b", &"x".repeat(65)] {
        assert!(refused(name).contains("share group name"), "{name:?}: {}", refused(name));
    }
}
