#!/bin/bash
# loomd serving its control endpoint and loomctl talking to it, as processes: ping, status and
# device-info answered; SIGTERM stops the daemon cleanly (exit 0, socket file removed); then
# loomctl gets a timeout naming the endpoint, not a hang.
# Usage: loomd_control.sh LOOMD LOOMCTL
set -u
loomd=$1 loomctl=$2
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
endpoint="ipc://$dir/control"
fail() { echo "loomd_control: $*" >&2; exit 1; }

XDG_STATE_HOME="$dir/state" "$loomd" --control "$endpoint" --device edge >"$dir/loomd.out" 2>&1 &
pid=$!
for _ in $(seq 50); do
  "$loomctl" --control "$endpoint" --timeout-ms 200 ping >/dev/null 2>&1 && break
  sleep 0.1
done
out=$("$loomctl" --control "$endpoint" ping) || fail "ping: $out"
[[ $out == *pong* ]] || fail "ping said: $out"
status=$("$loomctl" --control "$endpoint" status --json) || fail "status: $status"
[[ $status == *'"name": "edge"'* && $status == *'"requests_served"'* ]] || fail "status said: $status"
info=$("$loomctl" --control "$endpoint" device-info) || fail "device-info: $info"
[[ $info == *'"count": 2'* ]] || fail "device-info said: $info"
text=$("$loomctl" --control "$endpoint" status) || fail "status (text): $text"
[[ $text == *"device    edge"* ]] || fail "status (text) said: $text"
kill -TERM "$pid"
wait "$pid" || fail "loomd exited with $? after SIGTERM: $(cat "$dir/loomd.out")"
[[ ! -e "$dir/control" ]] || fail "loomd left its socket file behind"
err=$("$loomctl" --control "$endpoint" --timeout-ms 200 ping 2>&1) && fail "ping without a daemon succeeded: $err"
[[ $err == *"no reply from loomd at $endpoint within 200 ms"* ]] || fail "ping without a daemon said: $err"
echo "loomd control: ok"
