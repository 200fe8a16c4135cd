#!/usr/bin/env bash
# Installs what building shunt needs, with --tests what its tests need and with --bench what
# the benchmarks against other libraries need (Open MPI), on a Debian or Ubuntu machine. Run by scripts/run.sh, scripts/test.sh and .ci/run; safe to run again
# (it installs only what is missing and says what it did).
#   Debian packages: with apt-get as root; otherwise it stops before anything is built and
#                    prints the one command that installs them.
#   NCCL from PyPI:  the nvidia-nccl-cu13 wheel, unpacked into .deps/ (no pip install, so no
#                    Python environment is touched). The tests call a real NCCL 2.32.3; and on
#                    a machine without the CUDA toolkit, its headers and library (with the CUDA
#                    runtime headers of the nvidia-cuda-runtime wheel) stand in for the toolkit's.
set -euo pipefail
cd "$(dirname "$0")/.."
tests=0 bench=0
for a in "$@"; do
  case $a in
  --tests) tests=1 ;;
  --bench) bench=1 ;;
  *)
    echo "usage: scripts/setup.sh [--tests] [--bench]" >&2
    exit 2
    ;;
  esac
done

NCCL_WHEEL_VERSION=2.32.3
# The CUDA 13.0 headers nccl.h includes (cuda_runtime.h and what it pulls in), for machines
# without the toolkit.
CUDA_HEADER_WHEELS=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85)
say() { printf 'setup: %s\n' "$*"; }

# ---- Debian packages ----
pkgs=(cmake make gcc libcjson-dev libibverbs-dev python3 binutils)
[ $tests = 1 ] && pkgs+=(clang libclang-rt-14-dev iproute2) # iproute2: the network-namespace hosts
# The wheel's tests make virtual environments: Debian's python3 needs python3-venv for that (a
# Python of another origin that has venv and ensurepip needs nothing).
if [ $tests = 1 ] && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then pkgs+=(python3-venv); fi
[ $bench = 1 ] && pkgs+=(openmpi-bin libopenmpi-dev iperf3 iproute2) # bench/host_vs_mpi.sh, bench/net_vs_iperf3.sh
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  cmd="apt-get install -y --no-install-recommends ${missing[*]}"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "missing packages: ${missing[*]}"
    say "install them with:  sudo $cmd"
    exit 1
  fi
fi

# ---- Wheels from PyPI, unpacked into .deps/ ----
# unpack DEST NAME==VERSION...: downloads the manylinux wheels and extracts them into DEST.
unpack() {
  local dest=$1 tmp
  shift
  tmp=$(mktemp -d)
  if ! python3 -m pip --version >/dev/null 2>&1; then
    say "python3 has no pip: install python3-pip (apt-get install -y python3-pip), then run this again"
    rm -rf "$tmp"
    exit 1
  fi
  say "downloading $* from PyPI into $dest"
  if ! python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_18_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
      --python-version 3.11 -d "$tmp" "$@"; then
    say "could not download $* (no network?)"
    rm -rf "$tmp"
    exit 1
  fi
  mkdir -p "$dest.partial"
  python3 - "$tmp" "$dest.partial" <<'EOF'
import glob, sys, zipfile
for w in glob.glob(sys.argv[1] + "/*.whl"):
    zipfile.ZipFile(w).extractall(sys.argv[2])
EOF
  rm -rf "$tmp" "$dest"
  mv "$dest.partial" "$dest"
}

mkdir -p .deps
nccl_dir=.deps/nccl-$NCCL_WHEEL_VERSION
have_toolkit_nccl=0
for d in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include /usr/include; do
  [ -f "$d/nccl.h" ] && have_toolkit_nccl=1
done
if { [ $tests = 1 ] || [ $have_toolkit_nccl = 0 ]; } && ! [ -f "$nccl_dir/nvidia/nccl/lib/libnccl.so.2" ]; then
  unpack "$nccl_dir" "nvidia-nccl-cu13==$NCCL_WHEEL_VERSION"
fi
if [ $have_toolkit_nccl = 0 ] && ! [ -f .deps/cuda-headers/nvidia/cu13/include/cuda_runtime.h ]; then
  say "no CUDA toolkit with nccl.h found: using NCCL's and CUDA's headers from PyPI"
  unpack .deps/cuda-headers "${CUDA_HEADER_WHEELS[@]}"
fi
exit 0
