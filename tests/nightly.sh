#!/usr/bin/env bash
# The checks that need nightly Rust tools. Each runs where its tool is present and
# says why it is skipped where not:
#   - Miri: the core's unit tests that need no driver (handle tables, block lists,
#     the segment owner table, the pinned pool on host ranges, statistics,
#     configuration, staging, graph pools), for undefined behaviour, leaks and data
#     races in the unsafe code;
#   - ThreadSanitizer: the multi-threaded unit tests (allocator shards, handle
#     tables, pinned pool, stream and event state, IPC holds, the memory history's rings
#     and snapshots), built with -Zsanitizer=thread;
#   - cargo-fuzz: each target in fuzz/ for FUZZ_SECONDS (default 15) seconds.
# NIGHTLY_TOOLS=miri,tsan,fuzz chooses among them (default: all three).
set -euo pipefail
cd "$(dirname "$0")/.."
tools=",${NIGHTLY_TOOLS:-miri,tsan,fuzz},"
target=$(rustc -vV | sed -n 's/^host: //p')

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "nightly tools: skipped (no nightly toolchain: rustup toolchain install nightly)"
    exit 0
fi
has_rust_src() { [ -d "$(rustc +nightly --print sysroot)/lib/rustlib/src/rust/library" ]; }

# Under Miri: the modules whose unit tests need no driver (Miri loads no foreign
# library), in a hundredth of their native iterations (`test_iterations`). The
# allocator's own suite (alloc::tests) takes over an hour there (ThreadSanitizer runs
# it natively): MIRI_FULL=1 adds it.
miri_tests=(handle:: alloc::blocks alloc::config alloc::stats alloc::owners alloc::mempool copy::staged alloc::capture::pools pinned::tests dtype sanitizer::tracker sanitizer::shadow sanitizer::clock)
[ "${MIRI_FULL:-0}" = 1 ] && miri_tests+=(alloc::tests)
# Each tool has a time budget, so that a slow or stuck run fails with its name
# instead of running into CI's limit.
budget() {
    local seconds=$1 name=$2; shift 2
    timeout "$seconds" "$@" || { local rc=$?; [ $rc = 124 ] && echo "$name: over its budget of $seconds s"; return $rc; }
}
if [[ $tools == *,miri,* ]]; then
    echo "== Miri"
    if cargo +nightly miri --version >/dev/null 2>&1 && has_rust_src; then
        MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-tree-borrows -Zmiri-permissive-provenance}" budget 1200 Miri cargo +nightly miri test --lib -- "${miri_tests[@]}"
    else
        echo "Miri: skipped (nightly has no miri: rustup component add --toolchain nightly miri rust-src)"
    fi
fi

if [[ $tools == *,tsan,* ]]; then
    echo "== ThreadSanitizer"
    if has_rust_src; then
        RUSTFLAGS="-Zsanitizer=thread" TSAN_OPTIONS="halt_on_error=1" \
            budget 1500 ThreadSanitizer cargo +nightly test -Zbuild-std --target "$target" --target-dir target/tsan --lib -- \
            alloc::tests alloc::history alloc::snapshot handle::tests pinned::tests stream::tests event::tests ipc::holders
    else
        echo "ThreadSanitizer: skipped (needs nightly's rust-src: rustup component add --toolchain nightly rust-src)"
    fi
fi

if [[ $tools == *,fuzz,* ]]; then
    echo "== cargo-fuzz"
    if cargo +nightly fuzz --version >/dev/null 2>&1; then
        for fuzz_target in $(cd fuzz && cargo +nightly fuzz list); do
            (cd fuzz && cargo +nightly fuzz run "$fuzz_target" -- -max_total_time="${FUZZ_SECONDS:-15}" 2>&1 | tail -n 1)
        done
    else
        echo "cargo-fuzz: skipped (not installed: cargo install cargo-fuzz)"
    fi
fi
