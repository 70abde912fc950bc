#!/bin/bash
# `loomc kb` end to end: import an export into a new file, list (human and JSON), show by hash
# prefix, export and import again (nothing better: all kept), prune the stale record; a mistyped
# path, a file that is not a knowledge base and a bad record are errors that name the file.
# Usage: kb_cli.sh LOOMC
set -u
loomc=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "kb_cli: $*" >&2; exit 1; }
kb="$dir/kb.db"
cube='{"kind":"cube","m_l1":64,"n_l1":64,"k_l1":128,"m_l0":16,"n_l0":16,"k_l0":32,"n_outer":false,"double_buffer":true,"cores":0}'
rec() {  # cost_model_version cost
  echo "{\"kernel\":\"conv\",\"signature\":\"f16,f16->f16\",\"dims\":[[1,64,56,56],[64,64,3,3],[1,64,56,56]],\"attrs\":\"group=1\",\"spec_hash\":\"0123456789abcdef\",\"spec_name\":\"mychip\",\"cost_model_version\":$1,\"tiling\":$cube,\"cost_ns\":$2,\"default_cost_ns\":18000,\"method\":\"ga\",\"trials\":400,\"seconds\":3.5,\"seed\":7,\"loom_version\":\"0.1.0\",\"created\":\"2026-11-20T10:00:00Z\",\"updated\":\"2026-11-21\"}"
}
# One record of the cost model this loomc was built with (fresh), one of the version before (stale).
cost_model=$(grep -o 'kCostModelVersion = [0-9]*' "$(dirname "$0")/../device/cost.hpp" | grep -o '[0-9]*$')
[[ -n $cost_model ]] || fail "no kCostModelVersion in device/cost.hpp"
echo "{\"format\":\"loom-kb\",\"version\":1,\"records\":[$(rec "$cost_model" 12000),$(rec $((cost_model - 1)) 9000)]}" >"$dir/team.json"

out=$("$loomc" kb list --kb "$kb" 2>&1) && fail "list of a missing file succeeded: $out"
[[ $out == *"$kb: no such knowledge base"* ]] || fail "list of a missing file said: $out"
out=$("$loomc" kb import "$dir/team.json" --kb "$kb") || fail "import: $out"
[[ $out == *"2 records: 2 new"* ]] || fail "import said: $out"
out=$("$loomc" kb list --kb "$kb") || fail "list: $out"
[[ $out == *"f16[1x64x56x56],f16[64x64x3x3]->f16[1x64x56x56]"*"1.50x  ga"* ]] || fail "list said: $out"
[[ $out == *"2 records, 1 stale"* ]] || fail "list (stale count) said: $out"
hash=$("$loomc" kb list --kb "$kb" --json | grep -o '"key_hash": "[0-9a-f]*"' | head -1 | grep -o '[0-9a-f]\{16\}')
out=$("$loomc" kb show "${hash:0:6}" --kb "$kb") || fail "show: $out"
[[ $out == *"found by      ga: 400 trials"* ]] || fail "show said: $out"
"$loomc" kb export --kb "$kb" -o "$dir/out.json" 2>/dev/null || fail "export failed"
out=$("$loomc" kb import "$dir/out.json" --kb "$kb" --json) || fail "re-import: $out"
[[ $out == *'"kept": 2'* ]] || fail "re-import said: $out"
out=$("$loomc" kb prune --stale --kb "$kb") || fail "prune: $out"
[[ $out == *"removed 1 records"* ]] || fail "prune said: $out"
echo "not a database" >"$dir/text.db"
out=$("$loomc" kb list --kb "$dir/text.db" 2>&1) && fail "list of a text file succeeded"
[[ $out == *"$dir/text.db: not a SQLite database"* ]] || fail "list of a text file said: $out"
echo "{\"format\":\"loom-kb\",\"version\":1,\"records\":[$(rec "$cost_model" -5)]}" >"$dir/bad.json"
out=$("$loomc" kb import "$dir/bad.json" --kb "$kb" 2>&1) && fail "bad import succeeded"
[[ $out == *"$dir/bad.json: record 0: cost_ns: -5 is not a positive time"* ]] || fail "bad import said: $out"
echo "kb cli: ok"
