//! The caching allocator's options: `GPURT_ALLOC_CONF`, with the syntax and keys of
//! `PYTORCH_CUDA_ALLOC_CONF` (`key:value,key:value`). A malformed string is an
//! error naming the bad key or value; nothing falls back to a default silently.

use crate::error::{Error, Result};

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq)]
pub struct AllocConfig {
    /// Blocks at least this large are never split (`max_split_size_mb`); `u64::MAX` = no limit.
    pub max_split_size: u64,
    /// Per size interval (a power of two, 1 MiB and up), how many divisions a request is
    /// rounded to; 0 keeps the 512-byte rounding (`roundup_power2_divisions`).
    pub roundup_power2_divisions: [u32; 64],
    /// Fraction of the allowed memory past which free cached blocks are reclaimed
    /// before asking the driver (`garbage_collection_threshold`); 0 = off.
    pub garbage_collection_threshold: f64,
    /// Each stream's blocks live in one reserved address range per pool, backed with
    /// memory as it grows (`expandable_segments`, the default), instead of separate
    /// segments; a source that cannot map memory gives separate segments regardless.
    pub expandable_segments: bool,
    /// New memory is mapped in the size a request needs, rounded to 2 MiB as
    /// `cudaMalloc` maps it (`exact_segments`, gpurt's own key): no 20 MiB segment
    /// for a request of 1-10 MiB and no growth step past what an expandable segment
    /// lacks. For engines that allocate few, large, long-lived buffers (ggml's
    /// weights, caches and compute buffers), whose peak the shared segments raise.
    pub exact_segments: bool,
    /// Where a device's default pool takes its memory (`backend`): the process
    /// chooses once, at its first allocation.
    pub backend: Backend,
    /// A pool's own key (`use_on_oom`, torch.cuda.MemPool's): an allocation elsewhere
    /// on its device that runs out of memory is served from this pool as a last resort.
    pub use_on_oom: bool,
    /// A pool's own key (`no_split`, torch.cuda.MemPool's): no block is split, so each
    /// allocation has a segment of its own, mapped in the size it needs (rounded to
    /// 2 MiB), and a freed one serves a later request whole (one at most 20 MiB
    /// smaller). Sets `max_split_size` to 0, whole and exact segments.
    pub no_split: bool,
    /// The share group every device joins as its default pool is made (`share`,
    /// gpurt's own key; `gpurt_share_join` with the options of the next two).
    pub share: Option<String>,
    /// What the process offers the group (`share_offer`: never, cached, sleep-discard,
    /// sleep-offload; gpurt_share_join's options->offer).
    pub share_offer: ShareOffer,
    /// How long a pool must be idle before the group may put it to sleep, in ms
    /// (`share_idle_ms`; 0: the default, options->idle_ms).
    pub share_idle_ms: u32,
    /// What the process's requests to the group leave free beside the memory refused, in
    /// MiB (`share_headroom_mib`; 0: the default, options->headroom_mib).
    pub share_headroom_mib: u32,
}

/// What a share group member lets the group reclaim from it, each level including the
/// ones before: nothing, its cached free memory (an empty_cache), or its idle pools put
/// to sleep dropping or keeping their contents (`share_offer`; `crate::share`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub enum ShareOffer {
    Never = 0,
    Cached = 1,
    SleepDiscard = 2,
    SleepOffload = 3,
}

impl ShareOffer {
    pub(crate) fn from_u32(value: u32) -> ShareOffer {
        match value {
            1 => ShareOffer::Cached,
            2 => ShareOffer::SleepDiscard,
            3 => ShareOffer::SleepOffload,
            _ => ShareOffer::Never,
        }
    }

    /// The offer a `share_offer` value names.
    fn parse(key: &str, value: &str) -> Result<ShareOffer> {
        match value {
            "never" => Ok(ShareOffer::Never),
            "cached" => Ok(ShareOffer::Cached),
            "sleep-discard" => Ok(ShareOffer::SleepDiscard),
            "sleep-offload" => Ok(ShareOffer::SleepOffload),
            _ => Err(bad(key, value, "expected never, cached, sleep-discard or sleep-offload")),
        }
    }
}

/// The allocator behind each device's default pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// gpurt's caching allocator (`backend:native`).
    Native,
    /// Every allocation from the device's stream-ordered driver pool, uncached by
    /// gpurt (`backend:cudaMallocAsync`, torch's backend of that name).
    CudaMallocAsync,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::CudaMallocAsync => "cudaMallocAsync",
        }
    }
}

impl Default for AllocConfig {
    fn default() -> Self {
        AllocConfig {
            max_split_size: u64::MAX,
            roundup_power2_divisions: [0; 64],
            garbage_collection_threshold: 0.0,
            expandable_segments: true,
            exact_segments: false,
            backend: Backend::Native,
            use_on_oom: false,
            no_split: false,
            share: None,
            share_offer: ShareOffer::Cached,
            share_idle_ms: 0,
            share_headroom_mib: 0,
        }
    }
}

impl AllocConfig {
    /// The defaults with whole segments instead of expandable ones
    /// (`expandable_segments:False`).
    pub fn segmented() -> AllocConfig {
        AllocConfig { expandable_segments: false, ..AllocConfig::default() }
    }
}

fn bad(key: &str, value: &str, why: &str) -> Error {
    Error::invalid_argument(format!("GPURT_ALLOC_CONF: bad value {value:?} for `{key}`: {why}"))
}

fn flag(key: &str, value: &str) -> Result<bool> {
    match value {
        "False" | "false" => Ok(false),
        "True" | "true" => Ok(true),
        _ => Err(bad(key, value, "expected True or False")),
    }
}

fn divisions(key: &str, text: &str) -> Result<u32> {
    let n: u32 = text.trim().parse().map_err(|_| bad(key, text, "expected a whole number"))?;
    if n != 0 && !n.is_power_of_two() {
        return Err(bad(key, text, "divisions must be a power of two"));
    }
    Ok(n)
}

impl AllocConfig {
    /// Parses the process's configuration string; the empty string is the default.
    /// A pool's own keys are refused here.
    pub fn parse(text: &str) -> Result<AllocConfig> {
        let config = AllocConfig::default().with(text)?;
        for (key, set) in [("use_on_oom", config.use_on_oom), ("no_split", config.no_split)] {
            if set {
                return Err(Error::invalid_argument(format!(
                    "GPURT_ALLOC_CONF: `{key}` is a pool's own option (gpurt_mem_pool_options_t.config), not the process's"
                )));
            }
        }
        Ok(config)
    }

    /// This configuration with the options of `text` applied over it (a pool's own
    /// options over the process's).
    pub fn with(&self, text: &str) -> Result<AllocConfig> {
        let mut config = self.clone();
        for (key, value) in split_options(text)? {
            config.apply(key, value)?;
        }
        if config.no_split {
            // A split needs a request below max_split_size (small ones are, under any
            // size the key accepts), so 0 splits nothing, and every block found must
            // be at most 20 MiB larger than the request: PyTorch's oversize rule.
            config.max_split_size = 0;
            config.expandable_segments = false;
            config.exact_segments = true;
        }
        Ok(config)
    }

    fn apply(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "max_split_size_mb" => {
                let mb: u64 = value.parse().map_err(|_| bad(key, value, "expected a whole number of MiB"))?;
                // PyTorch's floor: a smaller limit would stop splitting of 20 MiB segments.
                if mb <= 20 {
                    return Err(bad(key, value, "must be greater than 20 (MiB)"));
                }
                self.max_split_size =
                    mb.checked_mul(MIB).ok_or_else(|| bad(key, value, "too large (the limit is 2^44 - 1 MiB)"))?;
            }
            "roundup_power2_divisions" => self.roundup_power2_divisions = parse_divisions(key, value)?,
            "garbage_collection_threshold" => {
                let t: f64 = value.parse().map_err(|_| bad(key, value, "expected a number"))?;
                if !(t > 0.0 && t < 1.0) {
                    return Err(bad(key, value, "must be strictly between 0 and 1"));
                }
                self.garbage_collection_threshold = t;
            }
            "expandable_segments" => self.expandable_segments = flag(key, value)?,
            "exact_segments" => self.exact_segments = flag(key, value)?,
            "use_on_oom" => self.use_on_oom = flag(key, value)?,
            "no_split" => self.no_split = flag(key, value)?,
            "share" => self.share = Some(value.to_string()),
            "share_offer" => self.share_offer = ShareOffer::parse(key, value)?,
            "share_idle_ms" => self.share_idle_ms = value.parse().map_err(|_| bad(key, value, "expected a whole number of milliseconds"))?,
            "share_headroom_mib" => self.share_headroom_mib = value.parse().map_err(|_| bad(key, value, "expected a whole number of MiB"))?,
            "backend" => match value {
                "native" => self.backend = Backend::Native,
                "cudaMallocAsync" => self.backend = Backend::CudaMallocAsync,
                _ => return Err(bad(key, value, "expected native or cudaMallocAsync")),
            },
            _ => {
                return Err(Error::invalid_argument(format!(
                    "GPURT_ALLOC_CONF: unknown key `{key}` (known: max_split_size_mb, roundup_power2_divisions, \
                     garbage_collection_threshold, expandable_segments, exact_segments, backend, use_on_oom, no_split, share, share_offer, share_idle_ms, share_headroom_mib)"
                )))
            }
        }
        Ok(())
    }

    /// Rounds a request as the allocator will: up to 512 bytes, or, where
    /// `roundup_power2_divisions` is set for its size interval, up to the next of
    /// that many equal steps between two powers of two.
    pub fn round_size(&self, size: u64) -> u64 {
        const MIN_BLOCK: u64 = 512;
        let minimal = size.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK;
        if size <= MIB {
            return minimal;
        }
        let interval = 63 - (size - 1).leading_zeros() as usize; // floor(log2(size - 1))
        let divs = self.roundup_power2_divisions[interval.min(63)] as u64;
        if divs <= 1 {
            return minimal;
        }
        let floor = 1u64 << interval;
        let step = (floor / divs).max(MIN_BLOCK);
        floor + (size - floor).div_ceil(step) * step
    }
}

/// Splits `key:value,key:value`, where a value may be a bracketed list with commas.
fn split_options(text: &str) -> Result<Vec<(&str, &str)>> {
    let mut options = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let colon = rest
            .find(':')
            .ok_or_else(|| Error::invalid_argument(format!("GPURT_ALLOC_CONF: expected key:value, got {rest:?}")))?;
        let key = rest[..colon].trim();
        let after = &rest[colon + 1..];
        let end = if after.trim_start().starts_with('[') {
            after.find(']').map(|i| i + 1).ok_or_else(|| bad(key, after, "unclosed ["))?
        } else {
            after.find(',').unwrap_or(after.len())
        };
        let value = after[..end].trim();
        if key.is_empty() || value.is_empty() {
            return Err(Error::invalid_argument(format!("GPURT_ALLOC_CONF: empty key or value in {text:?}")));
        }
        options.push((key, value));
        rest = after[end..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Ok(options)
}

/// `N` for every interval, or `[256:1,512:2,>:8]`: per interval size in MiB, `>` for the rest.
fn parse_divisions(key: &str, value: &str) -> Result<[u32; 64]> {
    let mut table = [0u32; 64];
    let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        let n = divisions(key, value)?;
        table[20..].iter_mut().for_each(|d| *d = n);
        return Ok(table);
    };
    let mut last = 20usize;
    for item in list.split(',') {
        let (size, n) = item.split_once(':').ok_or_else(|| bad(key, item, "expected SIZE_MB:DIVISIONS"))?;
        let n = divisions(key, n)?;
        if size.trim() == ">" {
            table[last..].iter_mut().for_each(|d| *d = n);
            continue;
        }
        let mb: u64 = size.trim().parse().map_err(|_| bad(key, size, "expected a size in MiB or >"))?;
        if !mb.is_power_of_two() {
            return Err(bad(key, size, "interval sizes must be powers of two (MiB)"));
        }
        let interval = 20 + mb.trailing_zeros() as usize;
        if interval >= 64 {
            return Err(bad(key, size, "interval too large"));
        }
        table[interval] = n;
        last = interval + 1;
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Status;

    #[test]
    fn defaults_and_valid_strings() {
        assert_eq!(AllocConfig::parse("").unwrap(), AllocConfig::default());
        let c = AllocConfig::parse("max_split_size_mb:128, garbage_collection_threshold:0.6,expandable_segments:False").unwrap();
        assert_eq!(c.max_split_size, 128 * MIB);
        assert_eq!(c.garbage_collection_threshold, 0.6);
        let c = AllocConfig::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.roundup_power2_divisions[24], 4);
        assert_eq!(c.roundup_power2_divisions[10], 0);
        let c = AllocConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8],backend:native").unwrap();
        assert_eq!(c.roundup_power2_divisions[28], 1);
        assert_eq!(c.roundup_power2_divisions[29], 2);
        assert_eq!(c.roundup_power2_divisions[30], 8);
        assert_eq!(c.roundup_power2_divisions[40], 8);
        assert_eq!(c.backend, Backend::Native);
        assert_eq!(AllocConfig::parse("backend:cudaMallocAsync").unwrap().backend, Backend::CudaMallocAsync);
        assert_eq!(AllocConfig::parse("share:llm-servers").unwrap().share.as_deref(), Some("llm-servers"));
        let c = AllocConfig::parse("share_idle_ms:250,share:llm,share_offer:sleep-offload,share_headroom_mib:64").unwrap();
        assert_eq!((c.share.as_deref(), c.share_offer, c.share_idle_ms, c.share_headroom_mib), (Some("llm"), ShareOffer::SleepOffload, 250, 64));
        assert_eq!(AllocConfig::parse("share:llm").unwrap().share_offer, ShareOffer::Cached, "the default offer");
    }

    #[test]
    fn malformed_strings_name_the_problem() {
        let cases = [
            ("max_split_size_mb:abc", "max_split_size_mb"),
            ("max_split_size_mb:10", "greater than 20"),
            ("garbage_collection_threshold:1.5", "between 0 and 1"),
            ("share_offer:sleep", "expected never, cached, sleep-discard or sleep-offload"),
            ("share_idle_ms:-1", "whole number of milliseconds"),
            ("share_headroom_mib:1.5", "whole number of MiB"),
            ("roundup_power2_divisions:3", "power of two"),
            ("roundup_power2_divisions:[256:1", "unclosed"),
            ("roundup_power2_divisions:[300:2]", "powers of two"),
            ("no_such_key:1", "unknown key `no_such_key`"),
            ("max_split_size_mb", "expected key:value"),
            ("expandable_segments:maybe", "True or False"),
            ("exact_segments:1", "True or False"),
            ("max_split_size_mb:,", "empty key or value"),
            ("backend:cudaMalloc", "native or cudaMallocAsync"),
            ("use_on_oom:True", "a pool's own option"),
            ("no_split:True", "`no_split` is a pool's own option"),
        ];
        for (text, needle) in cases {
            let err = AllocConfig::parse(text).unwrap_err();
            assert_eq!(err.status, Status::GPURT_ERROR_INVALID_ARGUMENT, "{text}");
            assert!(err.message.contains(needle), "{text}: {}", err.message);
        }
        assert!(AllocConfig::parse("expandable_segments:True").unwrap().expandable_segments);
    }

    #[test]
    fn options_apply_over_a_base() {
        let process = AllocConfig::parse("expandable_segments:True,max_split_size_mb:64").unwrap();
        let pool = process.with("exact_segments:True,max_split_size_mb:128,use_on_oom:True").unwrap();
        assert!(pool.expandable_segments && pool.exact_segments && pool.use_on_oom);
        assert_eq!(pool.max_split_size, 128 * MIB);
        assert_eq!(process.with("").unwrap(), process);
        assert!(!process.exact_segments);
        let err = process.with("exact_segments:maybe").unwrap_err();
        assert!(err.message.contains("exact_segments"), "{}", err.message);
    }

    #[test]
    fn rounding() {
        let c = AllocConfig::default();
        assert_eq!(c.round_size(0), 512);
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(513), 1024);
        assert_eq!(c.round_size(3 * MIB + 1), 3 * MIB + 512);
        let c = AllocConfig::parse("roundup_power2_divisions:4").unwrap();
        // 1200 MiB lies in [1024, 2048) MiB: steps of 256 MiB -> 1280 MiB.
        assert_eq!(c.round_size(1200 * MIB), 1280 * MIB);
        assert_eq!(c.round_size(1024 * MIB), 1024 * MIB);
        // Small requests keep the 512-byte rounding.
        assert_eq!(c.round_size(1000), 1024);
    }
}
