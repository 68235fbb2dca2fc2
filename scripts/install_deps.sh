#!/usr/bin/env bash
# Installs what the build needs and is missing (Debian packages; from PyPI: numpy for the export
# test scripts/tests/test_export_numpy.py and the Python module's tests, matplotlib for the plots,
# nanobind for the Python module python/); silent when all is present.
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake g++ make libeigen3-dev libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev python3-pip; do
  have_pkg "$p" || need+=("$p")
done
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
for module in numpy matplotlib nanobind; do
  if ! python3 -c "import $module" 2>/dev/null; then
    echo "installing: $module"
    python3 -m pip install -q "$module" 2>/dev/null || python3 -m pip install -q --break-system-packages "$module"
  fi
done
# FlashInfer's header-only attention kernels for `kvbuf step --measure` (CUDA builds only), unpacked
# from the PyPI wheel into .deps/ (ignored by git), where CMake's KVBUF_FLASHINFER_INCLUDE_DIR
# looks. Pinned to 0.6.0: from 0.7 its fastdiv.cuh needs cuda::fast_mod_div, which CUDA 13.0's CCCL
# does not have yet.
flashinfer_version=0.6.0
deps="$(cd "$(dirname "$0")/.." && pwd)/.deps"
if command -v nvcc >/dev/null 2>&1 && [ ! -f "$deps/flashinfer/include/flashinfer/attention/decode.cuh" ]; then
  echo "installing: FlashInfer $flashinfer_version headers into $deps/flashinfer"
  tmp=$(mktemp -d)
  if ! python3 -m pip download -q --no-deps --dest "$tmp" "flashinfer-python==$flashinfer_version"; then
    echo "warning: could not download flashinfer-python $flashinfer_version: kvbuf step --measure is left out" >&2
  else
    python3 - "$tmp"/flashinfer_python-*.whl "$deps/flashinfer" <<'PY'
import sys, zipfile, pathlib
wheel, dest = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = "flashinfer/data/include/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            out = dest / "include" / name[len(prefix):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(name))
PY
  fi
  rm -rf "$tmp"
fi
