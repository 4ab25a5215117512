//! Property tests on stable: random byte strings decoded into operation sequences by
//! `tests/harness` (shared with the cargo-fuzz targets in `fuzz/`), every invariant
//! checked after each operation; a failure is shrunk to a minimal sequence.
//! PROPTEST_CASES raises the number of cases (the defaults keep `cargo test` short).

mod harness;

use proptest::collection::vec;
use proptest::prelude::*;

fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn allocator_keeps_every_invariant_and_exact_counts(bytes in vec(any::<u8>(), 0..1536)) {
        harness::allocator_operations(&bytes);
    }

    #[test]
    fn handle_table_matches_its_model(bytes in vec(any::<u8>(), 0..1024)) {
        harness::handle_table_operations(&bytes);
    }

    #[test]
    fn configuration_parser_never_panics(bytes in vec(any::<u8>(), 0..96)) {
        harness::config_text(&bytes);
    }

    #[test]
    fn environment_values_are_parsed_within_bounds(
        value in "[0-9:]{0,40}|[0-9.eE+-]{0,24}|(inf|nan|NaN|-0|1e309|0x10)|.{0,32}",
    ) {
        harness::env_values(value.as_bytes());
    }

    #[test]
    fn configuration_parser_accepts_what_it_describes(bytes in vec(any::<u8>(), 0..16)) {
        harness::config_round_trip(&bytes);
    }

    #[test]
    fn configuration_parser_never_panics_on_near_valid_text(
        key in prop::sample::select(vec!["max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
                                          "expandable_segments", "backend", "bogus"]),
        value in "[0-9]{1,22}|[0-9\\[\\]:>,.eE+-]{0,24}|[A-Za-z]{0,8}",
    ) {
        harness::config_text(format!("{key}:{value}").as_bytes());
    }
}

/// Found by `configuration_parser_never_panics_on_near_valid_text`: a limit in MiB
/// whose bytes overflow (it wrapped to 0 in release builds: nothing was ever split).
#[test]
fn configuration_values_that_overflow_are_refused() {
    for text in ["max_split_size_mb:17592186044416", "max_split_size_mb:18446744073709551615"] {
        harness::config_text(text.as_bytes());
        assert!(gpurt::alloc::config::AllocConfig::parse(text).is_err(), "{text}");
    }
}
