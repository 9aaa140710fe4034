# Shared helpers for tools/*.sh. Source it; it defines functions only (plus the two
# directory variables below) and does not change shell options.

PALLET_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PALLET_CACHE=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
PALLET_STATE=${PALLET_STATE_DIR:-$PALLET_ROOT/.pallet}

log() { printf '%s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# elapsed <start_ms>: seconds since start_ms, with one decimal.
elapsed() {
  local d=$(($(now_ms) - $1))
  printf '%d.%01d' $((d / 1000)) $((d % 1000 / 100))
}

# retry_until <timeout_s> <what> <cmd...>: run cmd until it succeeds or the deadline passes.
# On timeout, prints the last output of cmd and returns 1. The short pause between tries is a
# polling interval; the deadline, not the pause, is what bounds the wait.
retry_until() {
  local timeout=$1 what=$2 out deadline
  shift 2
  deadline=$(($(now_ms) + timeout * 1000))
  while :; do
    if out=$("$@" 2>&1); then
      return 0
    fi
    if (($(now_ms) >= deadline)); then
      log "timed out after ${timeout}s waiting for: $what"
      log "last output: $out"
      return 1
    fi
    sleep 0.2
  done
}

# pid_alive <pid>: true while the process exists (and is not a zombie).
pid_alive() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}
