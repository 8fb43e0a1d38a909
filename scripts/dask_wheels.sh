#!/usr/bin/env bash
# Wheels of the 'dask' extra for a machine without network (the GPU box: Python 3.12,
# torch 2.11, Triton 3.6, x86_64 Linux), and that set unpacked into a folder to put on
# PYTHONPATH there.
#
#   bash scripts/dask_wheels.sh [DEST]            # here, with PyPI; DEST defaults to .whl/dask
#
# DEST/wheels: every wheel dask and distributed need for CPython 3.12 on manylinux x86_64,
#   dependencies included (pip download resolves them for that target, not for this machine).
# DEST/site:   the same wheels unzipped (a wheel is a zip of site-packages entries), so
#   PYTHONPATH=DEST/site imports them with no pip and no network.
#
# On the GPU box (the repository root, DEST carried along; .whl/ is git-ignored):
#   PYTHONPATH=$PWD:$PWD/.whl/dask/site python -c "import distributed; print(distributed.__version__)"
#   PYTHONPATH=$PWD:$PWD/.whl/dask/site python scripts/executor_bench.py --backend gpu \
#       --ops rms_norm,softmax,swiglu,layer_norm --cases 200 --runs serial,local:1,dask:1 --out $OUT/executor_bench.json
# or, where pip may install:  python -m pip install --no-index --find-links .whl/dask/wheels dask==2026.8.0 distributed==2026.8.0
#
# Not pure Python (manylinux cp312 / abi3 wheels are carried; all four are binary-compatible
# with any glibc >= 2.17 x86_64 Linux):
#   psutil   - C extension, no fallback; distributed imports it at start (required)
#   tornado  - abi3 wheel; its C 'speedups' module is optional (pure-Python fallback)
#   msgpack  - C extension with a pure-Python fallback (msgpack.fallback)
#   pyyaml   - C LibYAML binding optional; the pure-Python parser is used without it
#   markupsafe (jinja2's) - C speedups optional
# Wheels of packages a torch image already has (jinja2, markupsafe, fsspec, packaging) are
# carried too; unpacked on PYTHONPATH they come first, so they are the pinned versions below.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-.whl/dask}"
PY_VERSION="${PY_VERSION:-3.12}"
PLATFORM="${PLATFORM:-manylinux_2_17_x86_64}"
mkdir -p "$DEST/wheels"
python3 -m pip download -q --dest "$DEST/wheels" --only-binary=:all: \
    --python-version "$PY_VERSION" --implementation cp --platform "$PLATFORM" --platform manylinux2014_x86_64 \
    dask==2026.8.0 distributed==2026.8.0
rm -rf "$DEST/site"
mkdir -p "$DEST/site"
python3 - "$DEST" <<'EOF'
import pathlib, sys, zipfile
dest = pathlib.Path(sys.argv[1])
rows = []
for w in sorted((dest / "wheels").glob("*.whl")):
    tag = w.name[:-4].split("-")[-3:]
    pure = tag[2] == "any"
    zipfile.ZipFile(w).extractall(dest / "site")
    rows.append(f"{w.name:70s} {'pure' if pure else 'binary ' + '-'.join(tag)}  {w.stat().st_size // 1024} KiB")
print("\n".join(rows))
total = sum(w.stat().st_size for w in (dest / "wheels").glob("*.whl"))
print(f"{len(rows)} wheels, {total / 2**20:.1f} MiB; unpacked into {dest / 'site'}")
EOF
