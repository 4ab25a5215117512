//! This process in a share group: joining puts it in the group's registry with what it
//! offers, starts the thread that serves the others' requests, and makes an allocation
//! the device refuses ask the group before it fails (`alloc::reclaim`'s hook). A device
//! is in one group at a time; the group names it by its UUID, the same in every
//! process whatever devices each one sees.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::registry::{Offer, Registry};
use super::requests::{ask, ask_one, Answer, Request, Serve, Server};
use crate::alloc::mempool::on_request::{self, empty_device_caches, reclaimable, Reclaimable};
use crate::alloc::config::AllocConfig;
use crate::alloc::stats::format_bytes;
use crate::alloc::{device as pools, reclaim};
use crate::boundary::lock;
use crate::device;
use crate::error::{Error, Result};
use crate::handle::Handle;

/// What a member offers, how long a pool must have gone unused before it may be put
/// to sleep for the others, how long the member waits for the group when the device
/// refuses it memory, and how many bytes beside the refused ones it asks the group to
/// leave free (`headroom`: the member's memory outside gpurt, such as the modules the
/// CUDA runtime loads at a kernel's first launch, would otherwise find the device full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinOptions {
    pub offer: Offer,
    pub idle: Duration,
    pub deadline: Duration,
    pub headroom: u64,
}

impl Default for JoinOptions {
    /// Cached free memory offered; a pool idle for 1 s (where pools are offered); a
    /// request waits 3 s at most and leaves 256 MiB free.
    fn default() -> Self {
        JoinOptions { offer: Offer::Cached, idle: Duration::from_secs(1), deadline: Duration::from_secs(3), headroom: 256 << 20 }
    }
}

impl JoinOptions {
    /// These options with `offer` and each of the others that is given: the C API and
    /// the configuration say "the default" with 0.
    pub fn given(offer: Offer, deadline_ms: u32, idle_ms: u32, headroom_mib: u32) -> Self {
        let mut options = JoinOptions { offer, ..JoinOptions::default() };
        if deadline_ms > 0 {
            options.deadline = Duration::from_millis(deadline_ms.into());
        }
        if idle_ms > 0 {
            options.idle = Duration::from_millis(idle_ms.into());
        }
        if headroom_mib > 0 {
            options.headroom = u64::from(headroom_mib) << 20;
        }
        options
    }
}

/// What one pool offers where it differs from its device's offer: (offer, idle period),
/// by allocator id (`gpurt_share_pool_offer`).
static POOL_OFFERS: Mutex<Vec<(u64, Offer, Duration)>> = Mutex::new(Vec::new());

/// A member's server: gives back the cached memory of the pools that offer it, then,
/// where the request wants more, puts the idle pools that offer it to sleep, longest
/// idle first, until it gave back what was wanted. Between requests it watches when
/// each pool was last used.
struct Giver {
    ordinal: i32,
    offer: Offer,
    idle: Duration,
    /// Each pool's activity (by allocator id) and since when it has been the same.
    seen: HashMap<u64, (u64, Instant)>,
    /// Where it says since when its longest idle pool on offer has been idle.
    registry: Arc<Registry>,
    slot: usize,
}

/// A pool that may be put to sleep now: idle since `since`, its activity then, and its offer.
struct IdlePool {
    since: Instant,
    pool: Reclaimable,
    activity: u64,
    offer: Offer,
}

/// `since` as CLOCK_MONOTONIC nanoseconds, the clock every process on the host shares.
fn monotonic_ns(since: Instant) -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let now_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
    now_ns.saturating_sub(since.elapsed().as_nanos() as u64)
}

impl Giver {
    /// What `pool` offers, and after how long idle.
    fn offer_of(&self, offers: &[(u64, Offer, Duration)], pool: &Reclaimable) -> (Offer, Duration) {
        offers.iter().find(|o| o.0 == pool.id()).map_or((self.offer, self.idle), |&(_, offer, idle)| (offer, idle))
    }

    /// The awake pools offered asleep that have been idle past their idle period, as
    /// `watch` last saw them.
    fn idle_on_offer(&self, offers: &[(u64, Offer, Duration)]) -> Vec<IdlePool> {
        reclaimable(self.ordinal)
            .into_iter()
            .filter_map(|pool| {
                let (offer, idle) = self.offer_of(offers, &pool);
                let (activity, since) = *self.seen.get(&pool.id())?;
                (offer >= Offer::SleepDiscard && since.elapsed() >= idle && !pool.is_asleep()).then_some(IdlePool { since, pool, activity, offer })
            })
            .collect()
    }

    /// Reads each pool's activity: a pool used (or asleep) since the last look is idle
    /// from now.
    fn watch(&mut self) {
        let now = Instant::now();
        let before = std::mem::take(&mut self.seen);
        for pool in reclaimable(self.ordinal) {
            let activity = pool.activity();
            let since = match before.get(&pool.id()) {
                Some(&(seen, since)) if seen == activity && !pool.is_asleep() => since,
                _ => now,
            };
            self.seen.insert(pool.id(), (activity, since));
        }
    }
}

impl Serve for Giver {
    /// Watches the pools where any is offered asleep, and says since when the longest
    /// idle of those past their idle period has been idle.
    fn tick(&mut self) {
        let offers = lock(&POOL_OFFERS).clone();
        if self.offer < Offer::SleepDiscard && offers.iter().all(|o| o.1 < Offer::SleepDiscard) {
            return;
        }
        self.watch();
        let oldest = self.idle_on_offer(&offers).into_iter().map(|idle| idle.since).min();
        self.registry.publish_idle(self.slot, oldest.map(monotonic_ns));
    }

    /// A quarter of the shortest idle period on offer (10 to 100 ms): a pool is found
    /// idle at most that long after its idle period ended, which is what a switch
    /// between two members waits for beyond it. Rejected: a 2 ms floor, which cost the
    /// idle member 1.4 % of a core (stand-in driver) and left llama-servers' switches
    /// as they were (H200: 61-64 against 58-63 ms at 5 ms idle).
    fn period(&self) -> Duration {
        let offers = lock(&POOL_OFFERS);
        let shortest = offers.iter().filter(|o| o.1 >= Offer::SleepDiscard).map(|o| o.2).fold(self.idle, Duration::min);
        (shortest / 4).clamp(Duration::from_millis(10), Duration::from_millis(100))
    }

    fn serve(&mut self, request: Request) -> u64 {
        let offers = lock(&POOL_OFFERS).clone();
        let mut given = if offers.is_empty() {
            if self.offer >= Offer::Cached { pools::empty_device_cache_of(self.ordinal).unwrap_or(0) } else { 0 }
        } else {
            empty_device_caches(self.ordinal, |pool| self.offer_of(&offers, pool).0 >= Offer::Cached)
        };
        let enough = |given: u64| request.wanted > 0 && given >= request.wanted;
        if request.level < Offer::SleepDiscard || enough(given) {
            return given;
        }
        self.watch();
        let mut idle = self.idle_on_offer(&offers);
        idle.sort_by_key(|idle| idle.since);
        for IdlePool { pool, activity, offer, .. } in idle {
            if enough(given) {
                break;
            }
            // A pool used meanwhile, or one that cannot sleep now, is passed over.
            given += pool.sleep_on_request(offer == Offer::SleepOffload, activity).unwrap_or(0);
        }
        given
    }
}

struct Membership {
    ordinal: i32,
    /// The group's name.
    name: String,
    /// The device as the group names it.
    key: i32,
    registry: Arc<Registry>,
    slot: usize,
    options: JoinOptions,
    server: Server,
}

static MEMBERSHIPS: Mutex<Vec<Membership>> = Mutex::new(Vec::new());

/// The group's name for a device: from its UUID, so that processes that see it under
/// different ordinals (CUDA_VISIBLE_DEVICES) agree.
fn device_key(ordinal: i32) -> Result<i32> {
    let uuid = device::uuid(ordinal)?;
    Ok(i32::from_le_bytes([uuid[0], uuid[1], uuid[2], uuid[3]]) & i32::MAX)
}

/// Joins group `name` for device `ordinal` (`GPURT_CURRENT_DEVICE`: the current one).
/// Refused for a device in a group already.
pub fn join(ordinal: i32, name: &str, options: JoinOptions) -> Result<()> {
    let ordinal = device::resolve(ordinal)?;
    let mut all = lock(&MEMBERSHIPS);
    if all.iter().any(|m| m.ordinal == ordinal) {
        return Err(Error::invalid_argument(format!("device {ordinal} is in a share group already: leave it first")));
    }
    let key = device_key(ordinal)?;
    if options.offer >= Offer::SleepDiscard {
        on_request::offers_sleep();
    }
    let registry = Arc::new(Registry::open(name)?);
    let slot = registry.join(key, options.offer)?;
    // The server takes no lock an asking thread holds (the allocator asks holding none).
    let giver = Giver { ordinal, offer: options.offer, idle: options.idle, seen: HashMap::new(), registry: registry.clone(), slot };
    let server = Server::start(registry.clone(), slot, giver).inspect_err(|_| {
        let _ = registry.leave(slot);
    })?;
    all.push(Membership { ordinal, name: name.to_string(), key, registry, slot, options, server });
    reclaim::set_out_of_memory_hook(Some(Arc::new(ask_group)));
    Ok(())
}

/// `GPURT_ALLOC_CONF=share:NAME`: device `ordinal` joins group `name` with the
/// configuration's offer, idle period and headroom (`share_offer`, `share_idle_ms`,
/// `share_headroom_mib`) and the default deadline.
pub fn join_configured(ordinal: i32, name: &str, config: &AllocConfig) -> Result<()> {
    join(ordinal, name, JoinOptions::given(config.share_offer, 0, config.share_idle_ms, config.share_headroom_mib))
}

/// What the group may take from one pool (`handle`: a pool of gpurt_mem_pool_create or
/// a device's default pool), in place of its device's offer: `Never` keeps it whole,
/// `Cached` its cache only, `Sleep*` also the pool asleep in that mode once it has been
/// idle for `idle` (`None`: the device's idle period). Its device must be in a group.
pub fn offer_pool(handle: Handle, offer: Offer, idle: Option<Duration>) -> Result<()> {
    let (device, pool) = on_request::of_handle(handle)?;
    let all = lock(&MEMBERSHIPS);
    let member = all.iter().find(|m| m.ordinal == device).ok_or_else(|| {
        Error::invalid_argument(format!("device {device} is in no share group: join one (gpurt_share_join) before offering its pools"))
    })?;
    member.registry.raise_offer(member.slot, offer)?;
    if offer >= Offer::SleepDiscard {
        on_request::offers_sleep();
    }
    let mut offers = lock(&POOL_OFFERS);
    offers.retain(|o| o.0 != pool.id());
    offers.push((pool.id(), offer, idle.unwrap_or(member.options.idle)));
    Ok(())
}

/// Leaves the group of device `ordinal`: its server stops, its slot goes back.
pub fn leave(ordinal: i32) -> Result<()> {
    let ordinal = device::resolve(ordinal)?;
    let mut all = lock(&MEMBERSHIPS);
    let at = all.iter().position(|m| m.ordinal == ordinal).ok_or_else(|| Error::invalid_argument(format!("device {ordinal} is in no share group")))?;
    let member = all.remove(at);
    if all.is_empty() {
        reclaim::set_out_of_memory_hook(None);
    }
    drop(all);
    let pools: Vec<u64> = reclaimable(ordinal).iter().map(Reclaimable::id).collect();
    lock(&POOL_OFFERS).retain(|o| !pools.contains(&o.0));
    let Membership { registry, slot, server, .. } = member;
    drop(server);
    registry.leave(slot)
}

/// The out-of-memory hook: asks the other members on the device for their cached
/// memory, then, if the device is still short of `bytes` and the member's headroom,
/// those that offered their idle pools asleep for those; says whether any gave some
/// back, and who gave what.
fn ask_group(device: Option<i32>, bytes: u64) -> Option<reclaim::Asked> {
    let member = lock(&MEMBERSHIPS)
        .iter()
        .find(|m| Some(m.ordinal) == device)
        .map(|m| (m.ordinal, m.name.clone(), m.registry.clone(), m.slot, m.key, m.options));
    let (ordinal, name, registry, slot, key, JoinOptions { deadline, headroom, .. }) = member?;
    let until = Instant::now() + deadline;
    let wanted = bytes.saturating_add(headroom);
    let answers = ask(&registry, Some(slot), key, Request { level: Offer::Cached, wanted }, until)
        .and_then(|answers| ask_for_pools(&registry, slot, key, ordinal, wanted, until, answers));
    Some(account(&name, bytes, deadline, answers))
}

/// While the device has less than `bytes` free, asks the members with an idle pool on
/// offer, one at a time, the longest idle first, for what is lacking; `answers` (those
/// of the ask for cached memory) with theirs added.
fn ask_for_pools(registry: &Registry, me: usize, key: i32, ordinal: i32, bytes: u64, until: Instant, mut answers: Vec<Answer>) -> Result<Vec<Answer>> {
    let free = || device::mem_get_info(ordinal).map_or(0, |(free, _)| free as u64);
    for (member, _) in registry.idle_members(Some(me), key, Offer::SleepDiscard)? {
        let lacking = bytes.saturating_sub(free());
        if lacking == 0 {
            break;
        }
        let Some(answer) = ask_one(registry, member, key, Request { level: Offer::SleepDiscard, wanted: lacking }, until)? else { continue };
        match answers.iter_mut().find(|a| a.pid == answer.pid) {
            Some(first) => first.released = answer.released.map(|bytes| bytes + first.released.unwrap_or(0)),
            None => answers.push(answer),
        }
    }
    Ok(answers)
}

/// What asking the group for `bytes` came to, in words.
fn account(group: &str, bytes: u64, deadline: Duration, answers: Result<Vec<Answer>>) -> reclaim::Asked {
    let asked = format!("share group {group:?} asked for {}", format_bytes(bytes));
    let answers = match answers {
        Ok(answers) => answers,
        Err(e) => return reclaim::Asked { given_back: false, account: format!("{asked}: the asking failed ({e})") },
    };
    if answers.is_empty() {
        return reclaim::Asked { given_back: false, account: format!("{asked}: no other member offers memory") };
    }
    let each: Vec<String> = answers
        .iter()
        .map(|a| match a.released {
            Some(given) => format!("process {} gave back {}", a.pid, format_bytes(given)),
            None => format!("process {} did not answer within {} ms", a.pid, deadline.as_millis()),
        })
        .collect();
    let given_back = answers.iter().any(|a| a.released.is_some_and(|bytes| bytes > 0));
    reclaim::Asked { given_back, account: format!("{asked}: {}", each.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_memory_message_says_who_was_asked_and_what_each_gave() {
        let (deadline, gib) = (Duration::from_millis(3000), 1u64 << 30);
        let answers = vec![Answer { pid: 11, released: Some(gib) }, Answer { pid: 12, released: None }, Answer { pid: 13, released: Some(0) }];
        let asked = account("llm", 2 * gib, deadline, Ok(answers));
        assert!(asked.given_back);
        assert_eq!(
            asked.account,
            "share group \"llm\" asked for 2.00 GiB: process 11 gave back 1.00 GiB, process 12 did not answer within 3000 ms, process 13 gave back 0 B"
        );
        let nothing = account("llm", gib, deadline, Ok(vec![Answer { pid: 13, released: Some(0) }]));
        assert!(!nothing.given_back, "nothing given back: no retry");
        assert_eq!(account("llm", gib, deadline, Ok(Vec::new())).account, "share group \"llm\" asked for 1.00 GiB: no other member offers memory");
        let failed = account("llm", gib, deadline, Err(Error::invalid_argument("the registry is gone")));
        assert!(!failed.given_back && failed.account.contains("the asking failed (") && failed.account.contains("the registry is gone"), "{}", failed.account);
    }
}
