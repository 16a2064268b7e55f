#!/usr/bin/env bash
# Starts a throwaway sshd for the compose-ssh tests and bench, in front of this machine's dockerd:
# loopback only, on a free port, with a host key and a client key of its own made in DIR, and a
# remote user whose shell is /bin/sh (root's .bashrc costs ~0.5 s per command), in the docker
# group, with no password but not locked (sshd without PAM refuses a locked account). Extra
# sshd_config lines may follow DIR ("SetEnv PATH=...").
# Prints shell assignments: SSH_PORT, SSHD_PID, SSH_USER, SSHD_LOG; DIR holds client_key and
# known_hosts. The caller stops the server by that pid. Exits 125 when it cannot (not root, no sshd).
# Usage: eval "$(scripts/throwaway-sshd.sh DIR [CONFIG_LINE...])"
set -euo pipefail
DIR=$1
shift
SSH_USER=sandboxer-e2e
[ -x /usr/sbin/sshd ] || { echo "throwaway-sshd: /usr/sbin/sshd is missing (openssh-server)" >&2; exit 125; }
if ! id "$SSH_USER" >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || { echo "throwaway-sshd: user $SSH_USER is missing; only root can add it" >&2; exit 125; }
  (
    flock 9
    id "$SSH_USER" >/dev/null 2>&1 || useradd -m -s /bin/sh -G docker "$SSH_USER"
    usermod -p '*' "$SSH_USER"
  ) 9>/tmp/sandboxer-e2e-user.lock
fi
mkdir -p /run/sshd "$DIR"
# The remote user reads the files it is given (authorized_keys) through every directory above.
chmod 755 "$DIR" "$(dirname "$DIR")"
ssh-keygen -q -t ed25519 -N '' -C throwaway-host -f "$DIR/host_key" </dev/null
ssh-keygen -q -t ed25519 -N '' -C throwaway-client -f "$DIR/client_key" </dev/null
cp "$DIR/client_key.pub" "$DIR/authorized_keys"
chmod 644 "$DIR/authorized_keys"
LOG="$DIR/sshd.log"
for _ in 1 2 3 4 5; do
  PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  {
    printf 'ListenAddress 127.0.0.1\nPort %s\nHostKey %s\n' "$PORT" "$DIR/host_key"
    printf 'AuthorizedKeysFile %s\nPidFile none\nUsePAM no\n' "$DIR/authorized_keys"
    printf 'PasswordAuthentication no\nKbdInteractiveAuthentication no\nStrictModes no\n'
    printf 'AllowUsers %s\nLogLevel VERBOSE\n' "$SSH_USER"
    for line in "$@"; do printf '%s\n' "$line"; done
  } >"$DIR/sshd_config"
  : >"$LOG"
  /usr/sbin/sshd -D -f "$DIR/sshd_config" -E "$LOG" </dev/null >/dev/null 2>&1 &
  PID=$!
  for _ in $(seq 50); do
    grep -q "Server listening" "$LOG" && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  if grep -q "Server listening" "$LOG"; then
    echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$DIR/host_key.pub")" >"$DIR/known_hosts"
    printf 'SSH_PORT=%s\nSSHD_PID=%s\nSSH_USER=%s\nSSHD_LOG=%q\n' "$PORT" "$PID" "$SSH_USER" "$LOG"
    exit 0
  fi
  kill "$PID" 2>/dev/null || true
done
echo "throwaway-sshd: sshd did not start: $(cat "$LOG")" >&2
exit 1
