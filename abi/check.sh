#!/usr/bin/env bash
# gpurt's ABI check (docs/compatibility.md).
#
#   abi/check.sh LIB          LIB (the built libgpurt.so) exports exactly the functions
#                             include/gpurt.h declares, each under GPURT_<major>, and
#                             nothing else; the header's ABI (abi/probe.py) against the
#                             baseline abi/gpurt.abi with abidiff, and its integer
#                             constants and extensible structs' layouts against
#                             abi/constants.txt: a removed function, a
#                             changed parameter or return type, a struct field moved or
#                             resized, an enum value or constant changed fail with the
#                             report; additions pass.
#   abi/check.sh --self-test  builds changed copies of the header (a function removed, a
#                             parameter type changed, two struct fields swapped, an enum
#                             value changed, a constant changed) and shows each is caught,
#                             and that additions pass.
#   abi/check.sh --new-major  a deliberate break: bumps the major version (and with it the
#                             SONAME and the symbol version node) everywhere it is written,
#                             regenerates the header, and writes the new baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${GPURT_ABI_WORK:-$root/target/abi}
mkdir -p "$work"
for tool in abidw abidiff objdump python3 cc; do
  command -v $tool >/dev/null || { echo "abi/check.sh: $tool missing (apt-get install abigail-tools binutils)"; exit 1; }
done
major=$(sed -n 's/^version = "\([0-9]*\)\..*/\1/p' Cargo.toml)

# probe HEADER DIR: the header's ABI in DIR/gpurt.abi, its constants in DIR/constants.txt.
probe() {
  local header=$1 dir=$2
  mkdir -p "$dir/include"
  cp "$header" "$dir/include/gpurt.h"
  python3 abi/probe.py "$dir/include/gpurt.h" "$dir/probe.c" "$dir/suppressions" "$dir/constants.all" "$dir/layout.c" >/dev/null
  # The layout and the constants are compared line by line, so kept in one file.
  cc -I"$dir/include" "$dir/layout.c" -o "$dir/layout"
  { grep -v '^GPURT_VERSION_' "$dir/constants.all" | sed 's/^/constant /'   # a release changes those
    "$dir/layout" | sed 's/^/struct /'; } > "$dir/constants.txt"
  cc -g -O0 -fPIC -shared -I"$dir/include" "$dir/probe.c" -Wl,--version-script=abi/gpurt.map \
     -Wl,-soname,libgpurt.so."$major" -o "$dir/libgpurt.so.$major"
  abidw --headers-dir "$dir/include" --drop-private-types --no-corpus-path --no-comp-dir-path \
        --short-locs --type-id-style hash "$dir/libgpurt.so.$major" > "$dir/gpurt.abi"
}

# compare DIR: 0 if DIR's ABI keeps the baseline's, else abidiff's report or the changed constants.
compare() {
  local dir=$1 rc=0
  abidiff --no-added-syms --suppressions "$dir/suppressions" abi/gpurt.abi "$dir/gpurt.abi" > "$dir/abidiff.txt" || rc=$?
  if [ $rc -ne 0 ]; then
    echo "abidiff (exit $rc) against abi/gpurt.abi:"; cat "$dir/abidiff.txt"
  fi
  # Every baseline constant and extensible struct member must be there as it was;
  # new ones may be added (a member only past the struct's old end: the old lines
  # keep their offsets).
  local changed
  changed=$(comm -23 <(sort abi/constants.txt) <(sort "$dir/constants.txt"))
  if [ -n "$changed" ]; then
    echo "constants or extensible struct members removed or changed (baseline shown):"; echo "$changed"; rc=1
  fi
  return $rc
}

# exports_check LIB PROBE: LIB exports exactly the functions PROBE (the header's probe
# library, which declares them) does, less its type anchors, each under GPURT_<major>.
exports_check() {
  python3 - "$1" "$2" "$major" <<'PY'
import subprocess, sys
lib, probe, major = sys.argv[1], sys.argv[2], sys.argv[3]
def exports(path):
    """{name: version} of the functions and data path defines in its dynamic table."""
    out = {}
    for line in subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout.splitlines():
        f = line.split()
        if len(f) >= 6 and "*UND*" not in line and "*ABS*" not in line and f[1] in ("g", "w"):  # *ABS*: a version node
            out[f[-1]] = f[-2]
    return out
exported = exports(lib)
declared = {n for n in exports(probe) if not n.startswith("gpurt_abi_type_")}
wrong = [f"{n} ({v})" for n, v in exported.items() if v != f"GPURT_{major}"]
problems = []
if wrong: problems.append(f"exported without version GPURT_{major}: " + ", ".join(sorted(wrong)[:20]))
if exported.keys() - declared: problems.append("exported but not in gpurt.h: " + ", ".join(sorted(exported.keys() - declared)[:20]))
if declared - exported.keys(): problems.append("declared in gpurt.h but not exported: " + ", ".join(sorted(declared - exported.keys())[:20]))
if problems:
    sys.exit(f"{lib}:\n  " + "\n  ".join(problems))
print(f"{lib}: {len(exported)} functions, each under GPURT_{major}, and nothing else exported")
PY
}

case "${1:-}" in
  --self-test)
    probe include/gpurt.h "$work/current"
    compare "$work/current" >/dev/null || { echo "the header itself differs from the baseline: run abi/check.sh LIB"; exit 1; }
    # mutate NAME EXPECT PYTHON: a copy of the header changed by PYTHON (on `s`),
    # which must be caught (EXPECT=caught) or pass (EXPECT=passes).
    mutate() {
      local name=$1 expect=$2 edit=$3 dir=$work/self-test/$1
      mkdir -p "$dir"
      python3 -c "
import re, sys
def in_struct(s, name, change):
    # applies change to the body of the typedef'd struct name only
    end = s.index('} ' + name + ';')
    start = s.rindex('typedef struct', 0, end)
    return s[:start] + change(s[start:end]) + s[end:]
def swap(body, a, b):
    return body.replace(a, '@@').replace(b, a).replace('@@', b)
s = open('include/gpurt.h').read()
before = s
$edit
assert s != before, 'the edit changed nothing'
open('$dir/gpurt.h', 'w').write(s)"
      probe "$dir/gpurt.h" "$dir/out"
      if compare "$dir/out" > "$dir/report.txt"; then result=passes; else result=caught; fi
      if [ "$result" != "$expect" ]; then
        echo "ABI self-test '$name': $result, expected $expect"; cat "$dir/report.txt"; exit 1
      fi
      if [ $result = caught ]; then
        echo "ABI self-test '$name': caught: $(grep -m1 -E 'Removed|changed|Changed|constants|members' "$dir/report.txt" | sed 's/^ *//')"
      else
        echo "ABI self-test '$name': passes, as it should"
      fi
    }
    mutate function-removed caught "s = re.sub(r'\ngpurt_status_t gpurt_stream_query\([^;]*\);', '', s)"
    mutate parameter-type-changed caught "s = re.sub(r'(gpurt_memcpy_async\([^;]*?)size_t bytes', r'\1uint32_t bytes', s)"
    mutate return-type-changed caught "s = s.replace('gpurt_status_t gpurt_stream_query(', 'int64_t gpurt_stream_query(')"
    mutate struct-fields-swapped caught "s = in_struct(s, 'gpurt_stat_t', lambda b: swap(b, 'int64_t current;', 'int64_t peak;'))"
    mutate extensible-struct-fields-swapped caught "s = in_struct(s, 'gpurt_launch_config_t', lambda b: swap(b, 'unsigned int shared_memory_bytes;', 'gpurt_stream_t stream;'))"
    mutate struct-field-resized caught "s = in_struct(s, 'gpurt_stat_t', lambda b: b.replace('int64_t current;', 'int32_t current;'))"
    mutate enum-value-changed caught "s = s.replace('GPURT_ERROR_OUT_OF_MEMORY = 5,', 'GPURT_ERROR_OUT_OF_MEMORY = 18,')"
    mutate constant-changed caught "s = s.replace('#define GPURT_HISTORY_CLEAR 2', '#define GPURT_HISTORY_CLEAR 4')"
    mutate additions passes "
s = in_struct(s, 'gpurt_memory_stats_t', lambda b: b + '  int64_t num_new;\n')
s = s.replace('  GPURT_ERROR_COMM = 17,\n', '  GPURT_ERROR_COMM = 17,\n  GPURT_ERROR_NEW = 18,\n')
s = s.replace('#define GPURT_HISTORY_CLEAR 2', '#define GPURT_HISTORY_CLEAR 2\n#define GPURT_HISTORY_NEW 4')
s = s.replace('#ifdef __cplusplus\n}  // extern', 'gpurt_status_t gpurt_new_function(int x);\n\n#ifdef __cplusplus\n}  // extern')"
    echo "ABI self-test: every change caught, additions pass"
    ;;
  --new-major)
    old=$major new=$((major + 1))
    echo "a deliberate ABI break: $old -> $new.0.0 (libgpurt.so.$new, symbol version GPURT_$new)"
    sed -i "s/^version = \"$old\.[0-9]*\.[0-9]*\"/version = \"$new.0.0\"/" Cargo.toml pyproject.toml
    sed -i "s/^__version__ = \"$old\.[0-9]*\.[0-9]*\"/__version__ = \"$new.0.0\"/" python/gpurt/__init__.py
    sed -i "s/^project(gpurt VERSION $old\.[0-9]*\.[0-9]*/project(gpurt VERSION $new.0.0/" CMakeLists.txt
    sed -i "s/^pub const GPURT_VERSION_MAJOR: i32 = $old;/pub const GPURT_VERSION_MAJOR: i32 = $new;/; s/^pub const GPURT_VERSION_MINOR: i32 = [0-9]*;/pub const GPURT_VERSION_MINOR: i32 = 0;/; s/^pub const GPURT_VERSION_PATCH: i32 = [0-9]*;/pub const GPURT_VERSION_PATCH: i32 = 0;/" src/lib.rs
    sed -i "s/\bGPURT_$old\b/GPURT_$new/g; s/libgpurt\.so\.$old\b/libgpurt.so.$new/g" abi/gpurt.map
    { grep -rlI "libgpurt\.so\.$old\b" gpu tests benches README.md docs bindings python || true; } \
      | xargs -r sed -i "s/libgpurt\.so\.$old\([^.0-9]\|\$\)/libgpurt.so.$new\1/g"
    sed -i "s/^    version = \"$old\.[0-9]*\.[0-9]*\"/    version = \"$new.0.0\"/" conanfile.py
    cargo update -p gpurt --offline >/dev/null 2>&1 || cargo update -p gpurt >/dev/null
    GPURT_UPDATE_HEADER=1 cargo test --test header >/dev/null
    major=$new
    probe include/gpurt.h "$work/current"
    cp "$work/current/gpurt.abi" abi/gpurt.abi
    cp "$work/current/constants.txt" abi/constants.txt
    echo "new baseline written: abi/gpurt.abi, abi/constants.txt; add the break to CHANGELOG.md under a new major"
    ;;
  --write-baseline)
    # Only for the first baseline of a major version (the --new-major path uses it).
    probe include/gpurt.h "$work/current"
    cp "$work/current/gpurt.abi" abi/gpurt.abi
    cp "$work/current/constants.txt" abi/constants.txt
    echo "baseline written: abi/gpurt.abi, abi/constants.txt"
    ;;
  ""|-*)
    echo "usage: abi/check.sh LIB | --self-test | --new-major"; exit 2 ;;
  *)
    probe include/gpurt.h "$work/current"
    exports_check "$1" "$work/current/libgpurt.so.$major"
    compare "$work/current"
    echo "ABI: gpurt.h keeps abi/gpurt.abi ($(grep -c '<elf-symbol name=.gpurt_[a-z]' abi/gpurt.abi) symbols) and abi/constants.txt"
    ;;
esac
