#!/usr/bin/env bash
# Fixture servers for integration tests, all on 127.0.0.1:
#   - two OCI registries (Debian's docker-registry): plain HTTP without auth, and TLS (test CA) with
#     htpasswd auth; each is fronted by a counting reverse proxy so tests can count requests;
#   - git over smart HTTP (git http-backend), without and with basic auth;
#   - an HTTP file server with ETag/Last-Modified, without auth, with basic auth, with a bearer token;
#   - git over SSH: an sshd (own config, host key and authorized test key, public-key auth only)
#     serving the same bare repos with Debian's git-upload-pack;
#   - a control port with request counters (GET /_stats, GET /_requests, POST /_reset).
# The Go servers are one program, tools/fixtures (pallet-fixtures).
#
# Usage: tools/fixtures.sh start|stop|status|env|deps|build
# (build: only (re)build pallet-fixtures when its sources changed; tests that run its `receiver`
# mode as their own process call it.)
# State (pids, logs, certs, repos, files, endpoints.json) lives in ${PALLET_STATE_DIR:-<repo>/.pallet}/fixtures.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
state=${PALLET_STATE_DIR:-$root/.pallet}/fixtures
bin=$cache/bin/pallet-fixtures
export PATH="/usr/local/go/bin:$PATH"

log() { printf 'fixtures: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# Installs the Debian packages the fixtures need, when missing; apt-get update runs at most once.
deps() {
  local packages=(docker-registry openssl git ca-certificates openssh-server openssh-client jq) missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq </dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
  # Where an init system runs, the package starts a registry on :5000; ours are separate instances.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
    $sudo systemctl disable --now docker-registry || true
  fi
  # Likewise the system sshd on :22; ours is a separate instance with its own config.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet ssh 2>/dev/null; then
    $sudo systemctl disable --now ssh || true
  fi
}


# Builds pallet-fixtures when its sources are newer than the binary; Go's build cache makes a
# rebuild after a source change fast too.
build() {
  local src=$root/tools/fixtures
  if [ -x "$bin" ] && [ -z "$(find "$src" -newer "$bin" -type f -print -quit)" ]; then
    return 0
  fi
  log "building $bin"
  mkdir -p "$(dirname "$bin")"
  # A temporary name per process: two builds at once must not write one file.
  (cd "$src" && go build -o "$bin.tmp.$$" . && mv "$bin.tmp.$$" "$bin")
}

# A test CA and a server certificate for 127.0.0.1 and localhost, made once per state dir.
certs() {
  local d=$state/tls
  [ -s "$d/server.pem" ] && return 0
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=pallet test CA" \
    -keyout "$d/ca-key.pem" -out "$d/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$d/server-key.pem" -out "$d/server.csr" 2>/dev/null
  printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" > "$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -CAcreateserial \
    -days 3650 -extfile "$d/server.ext" -out "$d/server.pem" 2>/dev/null
}

# Test-only credentials, random per state dir so nothing real can ever match them.
creds() {
  local f=$state/creds.env
  if [ ! -s "$f" ]; then
    {
      echo "FIXTURE_USER=pallet"
      echo "FIXTURE_PASSWORD=$(openssl rand -hex 12)"
      echo "FIXTURE_TOKEN=$(openssl rand -hex 20)"
    } > "$f"
    chmod 600 "$f"
  fi
  # shellcheck disable=SC1090
  . "$f"
  [ -s "$state/htpasswd" ] || "$bin" htpasswd "$FIXTURE_USER" "$FIXTURE_PASSWORD" > "$state/htpasswd"
}

# SSH keys, made once per state dir: the sshd host key, and a test client key that is the only
# authorized key. Both are random per state dir, so nothing real can ever match them.
ssh_keys() {
  local d=$state/ssh
  [ -s "$d/client_ed25519" ] && [ -s "$d/host_ed25519" ] && [ -s "$d/authorized_keys" ] && return 0
  mkdir -p "$d"
  chmod 700 "$d"
  rm -f "$d/host_ed25519" "$d/host_ed25519.pub" "$d/client_ed25519" "$d/client_ed25519.pub"
  ssh-keygen -q -t ed25519 -N '' -C pallet-fixtures-host -f "$d/host_ed25519"
  ssh-keygen -q -t ed25519 -N '' -C pallet-fixtures-client -f "$d/client_ed25519"
  # restrict: no pty, no forwarding; commands (git-upload-pack, git-receive-pack) still run.
  echo "restrict $(cat "$d/client_ed25519.pub")" > "$d/authorized_keys"
}

# sshd_config PORT: an sshd for the current user, public-key auth with the test key only.
sshd_config() {
  local d=$state/ssh
  cat > "$d/sshd_config" <<EOF
ListenAddress 127.0.0.1:$1
HostKey "$d/host_ed25519"
PidFile none
AuthorizedKeysFile "$d/authorized_keys"
AllowUsers $(id -un)
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
UseDNS no
PrintMotd no
PermitTTY no
X11Forwarding no
AllowTcpForwarding no
LogLevel VERBOSE
EOF
}

# registry_config NAME PORT TLS(0|1): a docker-registry config with storage under the state dir.
registry_config() {
  local name=$1 port=$2 tls=$3 f=$state/$1.yml
  mkdir -p "$state/$name-data"
  {
    echo "version: 0.1"
    echo "log: {level: info, accesslog: {disabled: false}}"
    echo "storage:"
    echo "  filesystem: {rootdirectory: $state/$name-data}"
    echo "  delete: {enabled: true}"
    echo "http:"
    echo "  addr: 127.0.0.1:$port"
    echo "  secret: pallet-fixtures-$name"
    echo "  headers: {X-Content-Type-Options: [nosniff]}"
    if [ "$tls" = 1 ]; then
      echo "  tls: {certificate: $state/tls/server.pem, key: $state/tls/server-key.pem}"
      echo "auth:"
      echo "  htpasswd: {realm: pallet-fixtures, path: $state/htpasswd}"
    fi
  } > "$f"
}

# alive NAME: the process in NAME.pid is running and is still ours (pids get reused after a reboot).
alive() {
  local pid
  [ -s "$state/$1.pid" ] || return 1
  pid=$(cat "$state/$1.pid")
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qE 'docker-registry|pallet-fixtures|sshd'
}

# Runs a command detached from this shell (own session, no stdin), logging to <state>/NAME.log.
spawn() {
  local name=$1; shift
  setsid "$@" </dev/null >"$state/$name.log" 2>&1 9>&- &
  echo $! > "$state/$name.pid"
}

status() {
  local p ok=0
  for p in registry-plain registry-tls servers git-ssh; do
    if alive "$p"; then echo "$p: running (pid $(cat "$state/$p.pid"))"; else echo "$p: stopped"; ok=1; fi
  done
  if [ -s "$state/endpoints.json" ] && [ -x "$bin" ]; then
    local ctl
    ctl=$(sed -n 's/.*"control_url": "\(.*\)".*/\1/p' "$state/endpoints.json")
    if "$bin" ping "$ctl/_health" 2>/dev/null; then echo "control: $ctl"; else echo "control: not answering"; ok=1; fi
  else
    echo "endpoints.json: missing"; ok=1
  fi
  return $ok
}

stop() {
  local p pid
  for p in git-ssh servers registry-tls registry-plain; do
    if alive "$p"; then
      pid=$(cat "$state/$p.pid")
      kill "$pid" 2>/dev/null || true
      # Wait for the exit (bounded) so a following start finds the ports and files free.
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$state/$p.pid"
  done
  rm -f "$state/endpoints.json" "$state/endpoints.base.json" "$state/endpoints.json.tmp"
}

start() {
  if status >/dev/null 2>&1; then
    log "already running; endpoints in $state/endpoints.json"
    return 0
  fi
  stop # clear whatever half-started state a previous run left
  local t0=$SECONDS
  deps
  mkdir -p "$state"
  build
  certs
  creds
  ssh_keys
  # A port can still be taken between choosing and binding it; then start again on new ports.
  local attempt
  for attempt in 1 2 3; do
    if spawn_servers; then break; fi
    [ "$attempt" -lt 3 ] || die "fixtures: a server could not bind its port 3 times; logs in $state"
    log "a server could not bind its port; starting again on other ports"
  done
  log "ready in $((SECONDS - t0))s; endpoints in $state/endpoints.json"
}

# spawn_servers: start the registries, sshd and pallet-fixtures on fresh ports and wait until all
# answer, then write endpoints.json. Returns 1 (after stopping them) when one failed to bind its
# port, so the caller can retry; dies on any other failure.
spawn_servers() {
  local ports p1 p2 p3
  ports=$("$bin" freeport 3)
  p1=$(sed -n 1p <<<"$ports"); p2=$(sed -n 2p <<<"$ports"); p3=$(sed -n 3p <<<"$ports")
  registry_config registry-plain "$p1" 0
  registry_config registry-tls "$p2" 1
  spawn registry-plain docker-registry serve "$state/registry-plain.yml"
  spawn registry-tls docker-registry serve "$state/registry-tls.yml"
  sshd_config "$p3"
  # sshd's privilege separation directory; /run is a tmpfs, so it may be gone after a reboot.
  if [ ! -d /run/sshd ]; then
    if [ "$(id -u)" -eq 0 ]; then mkdir -p /run/sshd; else sudo mkdir -p /run/sshd; fi
  fi
  spawn git-ssh /usr/sbin/sshd -D -e -f "$state/ssh/sshd_config"
  # pallet-fixtures writes its part; endpoints.json is that plus git-ssh, once sshd answers too.
  spawn servers "$bin" serve --dir "$state" --out "$state/endpoints.base.json" \
    --ca "$state/tls/ca.pem" --cert "$state/tls/server.pem" --key "$state/tls/server-key.pem" \
    --registry-plain "http://127.0.0.1:$p1" --registry-tls "https://127.0.0.1:$p2" \
    --username "$FIXTURE_USER" --password "$FIXTURE_PASSWORD" --token "$FIXTURE_TOKEN"
  # pallet-fixtures writes endpoints.base.json only after every server, registries included, answers.
  local deadline=$((SECONDS + 60)) p
  until [ -s "$state/endpoints.base.json" ] && ssh_answers "$p3"; do
    for p in registry-plain registry-tls servers git-ssh; do
      # Just spawned by us, so the pid alone identifies it (it may not have exec'd yet).
      if ! kill -0 "$(cat "$state/$p.pid")" 2>/dev/null; then
        tail -n 20 "$state/$p.log" >&2
        if grep -qi 'address already in use' "$state/$p.log"; then stop; return 1; fi
        stop; die "$p exited during start; log: $state/$p.log"
      fi
    done
    if [ $SECONDS -ge $deadline ]; then
      stop; die "fixtures did not become ready within 60s; logs in $state"
    fi
    sleep 0.1
  done
  write_endpoints "$p3"
}

# ssh_answers PORT: something on 127.0.0.1:PORT sends an SSH version banner.
ssh_answers() {
  local banner=""
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  read -r -t 2 banner <&3 || true
  exec 3>&-
  [[ $banner == SSH-2.0-* ]]
}

# write_endpoints PORT: endpoints.json = pallet-fixtures' endpoints plus the git-ssh server, written
# atomically (readers never see it without git-ssh). The SSH URL carries the git root's path, so
# "<url>/<name>.git" is a repo, as on the HTTP git servers.
write_endpoints() {
  local d=$state/ssh known
  known="[127.0.0.1]:$1 $(cut -d' ' -f1,2 "$d/host_ed25519.pub")"
  jq --arg port "$1" --arg user "$(id -un)" --arg key "$d/client_ed25519" \
    --arg pub "$d/client_ed25519.pub" --arg known "$known" \
    '.servers["git-ssh"] = {
       name: "git-ssh",
       url: ("ssh://" + $user + "@127.0.0.1:" + $port + .git_root),
       host: ("127.0.0.1:" + $port),
       tls: false,
       ssh_user: $user,
       ssh_private_key: $key,
       ssh_public_key: $pub,
       ssh_known_hosts: $known
     }' "$state/endpoints.base.json" > "$state/endpoints.json.tmp"
  mv "$state/endpoints.json.tmp" "$state/endpoints.json"
}

# Prints shell exports for the endpoints, for use by hand: eval "$(tools/fixtures.sh env)".
env_cmd() {
  [ -s "$state/endpoints.json" ] || die "not running; start with: tools/fixtures.sh start"
  echo "export PALLET_FIXTURES=$state/endpoints.json"
  echo "export PALLET_FIXTURES_CA=$state/tls/ca.pem"
}

# Serializes start/stop between concurrent callers (several developers or test scripts).
lock() {
  mkdir -p "$state"
  exec 9>"$state/.lock"
  flock -w 120 9 || die "another tools/fixtures.sh holds $state/.lock"
}

case "${1:-}" in
  start) lock; start ;;
  stop) lock; stop ;;
  status) status ;;
  env) env_cmd ;;
  deps) deps ;;
  build) build ;;
  *) die "usage: $0 start|stop|status|env|deps|build" ;;
esac
