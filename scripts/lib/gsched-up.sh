# Sourced by the acceptance scripts (scripts/compat/*.sh,
# scripts/browser/*.sh); expects $root (the repository) to be set.

# compat_venv PACKAGE... — the shared virtual environment
# target/compat-venv ($venv), with the packages installed.
compat_venv() {
    venv=$root/target/compat-venv
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
}

# gsched_up GSCHED [ARG...] — starts `GSCHED up` with a fresh state
# directory in $work (created; removed at exit with the server) on a free
# loopback port, exports GSCHED_URL, and waits until its node is up (at
# most 10 s; otherwise prints the log and exits 1).
gsched_up() {
    local gsched=$1; shift
    work=$(mktemp -d)
    trap 'kill "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    # CPUs to spare (64, cores not confined): these scripts check
    # compatibility with other programs, whose jobs run at once however few
    # cores CI has (CPUs are scheduled; tests/confinement.rs checks that).
    printf 'constrain_cores = false\n' > "$work/cgroup.toml"
    "$gsched" up --state-dir "$work/state" --listen "127.0.0.1:$port" \
        --heartbeat-interval 1 --cpus 64 --cgroup-config "$work/cgroup.toml" \
        "$@" > "$work/up.log" 2>&1 &
    up_pid=$!
    export GSCHED_URL="http://127.0.0.1:$port"
    for _ in $(seq 100); do
        if curl -sf "$GSCHED_URL/healthz" 2>/dev/null | grep -q '"nodes_up":1'; then
            return 0
        fi
        sleep 0.1
    done
    echo "gsched up did not come up within 10 s; its log:" >&2
    tail -50 "$work/up.log" >&2
    exit 1
}
