#!/usr/bin/env bash
# The README cannot rot: every code block in it is compiled or run, and every relative
# link in it and in docs/ names a file that exists.
#   - C blocks: compiled as C99 with every warning an error against the installed
#     gpurt, run without a driver and on the stand-in driver;
#   - C++ blocks: compiled as C++17 likewise, run on the stand-in driver;
#   - Python blocks: byte-compiled;
#   - shell blocks: each is one the test command runs in substance (the build, install
#     and gpurt-info of "Quick start", the test command itself, `pip install .`).
# usage: tests/readme.sh PREFIX STUB_DIR WORK_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$1 stub=$2 work=$3/readme
rm -rf "$work"
mkdir -p "$work"

python3 - "$work" <<'EOF'
import re, sys, pathlib
work = pathlib.Path(sys.argv[1])
blocks = re.findall(r"^```(\w+)\n(.*?)^```$", pathlib.Path("README.md").read_text(), re.S | re.M)
known_shell = ["prefix/bin/gpurt-info", "bash tests/run-all.sh", "pip install ."]
counts = {}
for lang, body in blocks:
    n = counts[lang] = counts.get(lang, 0) + 1
    if lang == "sh":
        if not any(k in body for k in known_shell):
            sys.exit(f"README: a shell block the test command does not run: {body!r}")
        continue
    ext = {"c": "c", "cpp": "cpp", "python": "py"}.get(lang)
    if ext is None:
        sys.exit(f"README: a code block in {lang!r}, which tests/readme.sh cannot check")
    (work / f"block{n}.{ext}").write_text(body)
print("README code blocks:", ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))

broken = []
for md in [pathlib.Path("README.md"), *sorted(pathlib.Path("docs").glob("*.md"))]:
    for target in re.findall(r"\]\(([^)\s]+)\)", md.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (md.parent / target.split("#")[0]).exists():
            broken.append(f"{md}: {target}")
if broken:
    sys.exit("links to nothing:\n" + "\n".join(broken))
print("links of README.md and docs/*.md: every target exists")
EOF

flags=(-I"$prefix/include" -L"$prefix/lib" -lgpurt -Wl,-rpath,"$prefix/lib")
for src in "$work"/block*.c; do
    [ -e "$src" ] || continue
    cc -std=c99 -Wall -Wextra -pedantic -Werror "$src" "${flags[@]}" -o "${src%.c}"
    "${src%.c}"
    LD_LIBRARY_PATH=$stub "${src%.c}"
done
for src in "$work"/block*.cpp; do
    [ -e "$src" ] || continue
    c++ -std=c++17 -Wall -Wextra -pedantic -Werror "$src" "${flags[@]}" -o "${src%.cpp}"
    LD_LIBRARY_PATH=$stub "${src%.cpp}"
done
for src in "$work"/block*.py; do
    [ -e "$src" ] || continue
    python3 -m py_compile "$src"
done
echo "README: every C and C++ block compiled and run, every Python block compiled"
