//! The share group's registry (src/share/registry.rs) and its requests
//! (src/share/requests.rs) across real processes, no GPU: members see each other; a
//! member killed with SIGKILL is pruned (a zombie not yet reaped too), a lock holder
//! killed is replaced and a live one is waited for within bounds; a full group, and
//! registry files of the wrong mode, owner, size or kind, or behind a symbolic link, are
//! refused naming the reason. A request is served by each member down to what it offered
//! and no further; a stuck or killed member delays no one past the deadline; two members
//! asking each other at once, 1 000 times each, both finish; members with idle pools on
//! offer are found longest idle first and asked one at a time. Child processes are this
//! test binary run again with GPURT_SHARE_CHILD set (the `child` test).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpurt::share::registry::{path_of, Member, Offer, Registry};
use gpurt::share::requests::{ask, ask_one, Answer, Request, Server};

const MIB: u64 = 1 << 20;

/// A request down to `level` that wants no particular amount.
fn asking(level: Offer) -> Request {
    Request { level, wanted: 0 }
}

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
    // The rest read as it comes, so that a child that ends may say so.
    std::thread::spawn(move || lines.for_each(drop));
    child
}

fn kill(child: &Child) {
    // SAFETY: a child of this process.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) }, 0);
}

#[test]
fn child() {
    let (Ok(what), Ok(name)) = (std::env::var("GPURT_SHARE_CHILD"), std::env::var("GPURT_SHARE_NAME")) else { return };
    let registry = std::sync::Arc::new(Registry::open(&name).unwrap());
    // A member that serves requests on device 3 offering `offer`, giving back 7 MiB a
    // level and the bytes wanted.
    let serve = |offer: Offer, handler: fn(Request) -> u64| {
        let slot = registry.join(3, offer).unwrap();
        (slot, Server::start(registry.clone(), slot, handler).unwrap())
    };
    match what.as_str() {
        "join" => {
            registry.join(3, Offer::Cached).unwrap();
            println!("child: join");
            std::thread::sleep(Duration::from_secs(60));
        }
        "serve-offload" | "serve-cached" | "serve-never" => {
            let offer = match what.as_str() {
                "serve-offload" => Offer::SleepOffload,
                "serve-cached" => Offer::Cached,
                _ => Offer::Never,
            };
            let _server = serve(offer, |r| r.level as u64 * 7 * MIB + r.wanted);
            println!("child: {what}");
            std::thread::sleep(Duration::from_secs(60));
        }
        "serve-stuck" => {
            let _server = serve(Offer::Cached, |_| {
                std::thread::sleep(Duration::from_secs(60));
                0
            });
            println!("child: serve-stuck");
            std::thread::sleep(Duration::from_secs(60));
        }
        "mutual" => {
            // Two of these ask each other at once: each serves while it waits.
            let (slot, _server) = serve(Offer::Cached, |_| 1);
            println!("child: mutual");
            let start = Instant::now();
            while registry.members().unwrap().len() < 2 {
                assert!(start.elapsed() < Duration::from_secs(20), "the other member never joined");
                std::thread::sleep(Duration::from_millis(1));
            }
            for round in 0..1000 {
                let answers = ask(&registry, Some(slot), 3, asking(Offer::Cached), Instant::now() + Duration::from_secs(10)).unwrap();
                assert!(answers.len() == 1 && answers[0].released == Some(1), "round {round}: {answers:?}");
            }
            // Served until the other one is done too (each marks itself done with a file).
            let dir = std::env::var("GPURT_SHARE_DIR").unwrap();
            std::fs::write(format!("{dir}/mutual-done-{}", std::process::id()), b"").unwrap();
            let done = || std::fs::read_dir(&dir).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("mutual-done-")).count();
            while done() < 2 {
                assert!(start.elapsed() < Duration::from_secs(50), "the other member never finished");
                std::thread::sleep(Duration::from_millis(5));
            }
            registry.leave(slot).unwrap();
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
    let mine = registry.join(0, Offer::Never).unwrap();
    let mut children: Vec<Child> = (0..3).map(|_| spawn("join", "members")).collect();
    let members = registry.members().unwrap();
    assert_eq!(members.len(), 4, "{members:?}");
    for c in &children {
        assert!(members.contains(&Member { pid: c.id(), device: 3, offer: Offer::Cached }), "{members:?}");
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
    assert_eq!(registry.members().unwrap(), vec![Member { pid: std::process::id(), device: 0, offer: Offer::Never }]);
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
        let joins: Vec<_> = (0..8).map(|d| s.spawn(move || registry.join(d, Offer::Cached).unwrap())).collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let mut distinct = slots.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 8, "{slots:?}");
    let more: Vec<usize> = (8..Registry::capacity()).map(|_| registry.join(0, Offer::Cached).unwrap()).collect();
    let refused = registry.join(0, Offer::Cached).unwrap_err();
    assert!(refused.message.contains("members already"), "{}", refused.message);
    // Another process's view of the same file agrees.
    assert_eq!(Registry::open("full").unwrap().members().unwrap().len(), Registry::capacity());
    for slot in slots.into_iter().chain(more) {
        registry.leave(slot).unwrap();
    }
    assert!(registry.members().unwrap().is_empty());
}

/// Processes joining a group at the same moment: whoever makes the registry, the others
/// open it while it is being made (empty, then sized, then marked) and wait for it.
#[test]
fn a_registry_made_while_others_open_it_is_waited_for() {
    share_dir();
    for round in 0..100 {
        let name = format!("race-{round}");
        let opened: Vec<_> = (0..8).map(|_| std::thread::spawn({
            let name = name.clone();
            move || Registry::open(&name).map(drop).map_err(|e| e.message.to_string())
        })).collect();
        for thread in opened {
            assert_eq!(thread.join().unwrap(), Ok(()), "round {round}");
        }
        std::fs::remove_file(path_of(&name).unwrap()).unwrap();
    }
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

#[test]
fn a_request_is_served_down_to_what_each_member_offers() {
    share_dir();
    let registry = Registry::open("requests").unwrap();
    let mut children: Vec<Child> = ["serve-offload", "serve-cached", "serve-never"].iter().map(|w| spawn(w, "requests")).collect();
    let (offload, cached) = (children[0].id(), children[1].id());
    let deadline = || Instant::now() + Duration::from_secs(10);
    let sorted = |mut answers: Vec<Answer>| {
        answers.sort_by_key(|a| a.pid);
        answers
    };
    // Cached memory: both that offer it, 7 MiB each; the one that offers nothing is not asked.
    assert_eq!(
        sorted(ask(&registry, None, 3, asking(Offer::Cached), deadline()).unwrap()),
        sorted(vec![Answer { pid: offload, released: Some(7 * MIB) }, Answer { pid: cached, released: Some(7 * MIB) }])
    );
    // Pools asleep: only the member that offers them, served at the level asked.
    assert_eq!(ask(&registry, None, 3, asking(Offer::SleepDiscard), deadline()).unwrap(), vec![Answer { pid: offload, released: Some(14 * MIB) }]);
    assert_eq!(ask(&registry, None, 3, asking(Offer::SleepOffload), deadline()).unwrap(), vec![Answer { pid: offload, released: Some(21 * MIB) }]);
    // The bytes a request wants reach the member.
    let wanting = Request { level: Offer::SleepOffload, wanted: 5 * MIB };
    assert_eq!(ask(&registry, None, 3, wanting, deadline()).unwrap(), vec![Answer { pid: offload, released: Some(26 * MIB) }]);
    // Members of another device, and a request for nothing, ask no one.
    assert!(ask(&registry, None, 4, asking(Offer::Cached), deadline()).unwrap().is_empty());
    assert!(ask(&registry, None, 3, asking(Offer::Never), deadline()).unwrap().is_empty());
    // Requests from several threads at once are all answered.
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..50 {
                    let answers = ask(&registry, None, 3, asking(Offer::Cached), deadline()).unwrap();
                    assert!(answers.len() == 2 && answers.iter().all(|a| a.released.is_some()), "{answers:?}");
                }
            });
        }
    });
    for c in &mut children {
        kill(c);
        c.wait().unwrap();
    }
}

#[test]
fn a_stuck_or_killed_member_delays_no_one_past_the_deadline() {
    share_dir();
    let registry = Registry::open("stuck").unwrap();
    let mut stuck = spawn("serve-stuck", "stuck");
    let start = Instant::now();
    let answers = ask(&registry, None, 3, asking(Offer::Cached), start + Duration::from_millis(300)).unwrap();
    assert_eq!(answers, vec![Answer { pid: stuck.id(), released: None }]);
    assert!(start.elapsed() >= Duration::from_millis(300) && start.elapsed() < Duration::from_secs(2), "waited {:?}", start.elapsed());
    // Killed while a request waits on it: the request ends at once, not at its deadline.
    let start = Instant::now();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| ask(&registry, None, 3, asking(Offer::Cached), Instant::now() + Duration::from_secs(30)).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        kill(&stuck);
        assert_eq!(waiting.join().unwrap(), vec![Answer { pid: stuck.id(), released: None }]);
    });
    assert!(start.elapsed() < Duration::from_secs(3), "waited {:?} on a dead member", start.elapsed());
    stuck.wait().unwrap();
    assert!(ask(&registry, None, 3, asking(Offer::Cached), Instant::now() + Duration::from_secs(30)).unwrap().is_empty(), "pruned");
}

#[test]
fn two_members_asking_each_other_at_once_both_finish() {
    share_dir();
    let mut pair: Vec<Child> = (0..2).map(|_| spawn("mutual", "mutual")).collect();
    let start = Instant::now();
    for c in &mut pair {
        let status = loop {
            if let Some(status) = c.try_wait().unwrap() {
                break status;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "a member asking its peer never finished: deadlock");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{status}");
    }
}

/// Members that say since when a pool of theirs on offer has been idle are listed
/// longest idle first (those with none, or offering only their cache, left out), and
/// one of them is asked alone.
#[test]
fn members_with_idle_pools_are_asked_one_at_a_time_longest_idle_first() {
    share_dir();
    let registry = std::sync::Arc::new(Registry::open("idle").unwrap());
    // Four slots of this process on device 5: (offer, idle since), each answering its own number of MiB.
    let members = [(Offer::SleepOffload, Some(300)), (Offer::SleepOffload, Some(100)), (Offer::Cached, Some(50)), (Offer::SleepDiscard, Some(200)), (Offer::SleepOffload, None)];
    let servers: Vec<(usize, Server)> = members
        .iter()
        .enumerate()
        .map(|(i, &(offer, since))| {
            let slot = registry.join(5, offer).unwrap();
            registry.publish_idle(slot, since);
            let given = (i as u64 + 1) * MIB;
            (slot, Server::start(registry.clone(), slot, move |_: Request| given).unwrap())
        })
        .collect();
    let slot = |i: usize| servers[i].0;
    assert_eq!(registry.idle_members(None, 5, Offer::SleepDiscard).unwrap(), vec![(slot(1), 100), (slot(3), 200), (slot(0), 300)]);
    assert_eq!(registry.idle_members(Some(slot(1)), 5, Offer::SleepDiscard).unwrap(), vec![(slot(3), 200), (slot(0), 300)], "never itself");
    assert!(registry.idle_members(None, 6, Offer::SleepDiscard).unwrap().is_empty(), "another device");
    let deadline = Instant::now() + Duration::from_secs(10);
    let request = Request { level: Offer::SleepDiscard, wanted: MIB };
    let answer = ask_one(&registry, slot(3), 5, request, deadline).unwrap().unwrap();
    assert_eq!(answer.released, Some(4 * MIB), "the member asked alone answered");
    assert_eq!(ask_one(&registry, slot(2), 5, request, deadline).unwrap(), None, "a member offering only its cache is not asked for pools");
    for (slot, server) in servers {
        drop(server);
        registry.leave(slot).unwrap();
    }
}
