#!/usr/bin/env bash
# The checks that need nightly Rust tools:
#   - Miri: the core's unit tests that need no driver (handle tables, block lists,
#     the segment owner table, the pinned pool on host ranges, statistics,
#     configuration, staging, graph pools), for undefined behaviour, leaks and data
#     races in the unsafe code;
#   - ThreadSanitizer: the multi-threaded unit tests (allocator shards, handle
#     tables, pinned pool, stream and event state, IPC holds, the memory history's rings
#     and snapshots), built with -Zsanitizer=thread;
#   - cargo-fuzz: each target in fuzz/ for FUZZ_SECONDS (default 15) seconds.
# What a tool needs is installed when missing (the nightly toolchain, its miri and
# rust-src components, cargo-fuzz), so that a fresh machine runs all three; a tool
# that cannot be installed or run fails the command, naming it.
# NIGHTLY_TOOLS=miri,tsan,fuzz chooses among them (default: all three; "none": none).
set -euo pipefail
cd "$(dirname "$0")/.."
tools=",${NIGHTLY_TOOLS:-miri,tsan,fuzz},"
if [[ $tools == ,none, ]]; then
    echo "nightly tools: none chosen (NIGHTLY_TOOLS=none)"
    exit 0
fi
target=$(rustc -vV | sed -n 's/^host: //p')

need() {  # need TOOL COMMAND...: runs the installation step, or fails naming the tool
    local tool=$1; shift
    "$@" || { echo "nightly tools: $tool cannot be installed here ($*): failing" >&2; exit 1; }
}
cargo +nightly --version >/dev/null 2>&1 || need "the nightly toolchain" rustup toolchain install nightly --profile minimal
if [[ $tools == *,miri,* || $tools == *,tsan,* ]]; then
    components=(rust-src)
    [[ $tools == *,miri,* ]] && components+=(miri)
    need "Miri / ThreadSanitizer (nightly components ${components[*]})" rustup component add --toolchain nightly "${components[@]}"
fi
if [[ $tools == *,fuzz,* ]] && ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    need cargo-fuzz cargo install --locked cargo-fuzz
fi

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
    MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-tree-borrows -Zmiri-permissive-provenance}" budget 1200 Miri cargo +nightly miri test --lib -- "${miri_tests[@]}"
fi

if [[ $tools == *,tsan,* ]]; then
    echo "== ThreadSanitizer"
    RUSTFLAGS="-Zsanitizer=thread" TSAN_OPTIONS="halt_on_error=1" \
        budget 1500 ThreadSanitizer cargo +nightly test -Zbuild-std --target "$target" --target-dir target/tsan --lib -- \
        alloc::tests alloc::history alloc::snapshot handle::tests pinned::tests stream::tests event::tests ipc::holders
fi

if [[ $tools == *,fuzz,* ]]; then
    echo "== cargo-fuzz"
    for fuzz_target in $(cd fuzz && cargo +nightly fuzz list); do
        (cd fuzz && cargo +nightly fuzz run "$fuzz_target" -- -max_total_time="${FUZZ_SECONDS:-15}" 2>&1 | tail -n 1)
    done
fi
