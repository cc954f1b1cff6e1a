#!/usr/bin/env bash
# Stop the cluster scripts/slurm/start.sh started: each daemon by the PID in its PID file, node first.
set -uo pipefail
stop() {  # stop NAME PID_FILE
    local pid
    [ -f "$2" ] || return 0
    pid=$(cat "$2")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 40); do
            # a daemon re-parented to PID 1 may stay a zombie a moment: that counts as stopped
            { kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid" | cut -c1)" != Z ]; } || break
            sleep 0.25
        done
    fi
    rm -f "$2"
    echo "slurm: stopped $1 ($pid)"
}
stop slurmd /run/slurmd.pid
stop slurmctld /run/slurmctld.pid
stop slurmdbd /run/slurmdbd.pid
stop mariadb /run/mysqld/mysqld.pid # mysqld_safe exits when mariadbd does
stop munged /run/munge/munged.pid
