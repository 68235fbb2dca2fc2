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
