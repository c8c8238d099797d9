#!/usr/bin/env bash
# Installs everything cpmserve needs on a fresh Debian 12 machine (run as root, or with sudo).
# Build tools, the libraries in DESIGN.md, numpy for the reference implementations, Pillow for
# the image conformance checks, jsonschema for the structured-outputs check, and the npm
# packages for the conformance tests (into tests/conformance/node_modules).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

PKGS=(build-essential cmake ninja-build ccache pkg-config git
      nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
      libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libutf8proc-dev
      libsentencepiece-dev sentencepiece libjpeg62-turbo-dev libpng-dev libwebp-dev
      libcurl4-openssl-dev libssl-dev zlib1g-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev
      libsimde-dev python3 python3-numpy python3-pil python3-jinja2
      python3-jsonschema
      curl nodejs npm)

missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# nodejs/npm may come from elsewhere (e.g. NodeSource); accept any working node + npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install_deps: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if [ -f tests/conformance/package.json ] && [ ! -d tests/conformance/node_modules ]; then
  echo "install_deps: npm ci (tests/conformance)"
  (cd tests/conformance && npm ci --no-audit --no-fund --loglevel=error)
fi
