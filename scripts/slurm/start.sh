#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for tests: munged, MariaDB + slurmdbd (so `sacct` works:
# submitit polls it, and without it a job killed hard leaves `job.result()` waiting), slurmctld, slurmd.
# Debian bookworm packages (slurm-wlm 22.05), no systemd needed; run as root. Packages:
#   apt-get install -y --no-install-recommends slurm-wlm munge slurmdbd mariadb-server
# One partition, `debug` (the default), one node (this host, 90 % of its memory). Stop it with stop.sh.
# Already running (the node answers `sinfo`): nothing is started.
set -euo pipefail
host=$(hostname -s)
if sinfo -h -n "$host" -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "slurm: already running on $host"
    exit 0
fi
for pid_file in /run/slurmctld.pid /run/slurmd.pid /run/slurmdbd.pid; do
    if [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
        echo "slurm: $pid_file names a running daemon but the node does not answer; run $(dirname "$0")/stop.sh first" >&2
        exit 1
    fi
done

wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds, at most SECONDS
    local tries=$(($1 * 4))
    shift
    for _ in $(seq 1 "$tries"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    echo "slurm: timed out waiting for: $*" >&2
    return 1
}

# munge: slurm's authentication (the package's postinst made the key; made here if it did not)
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
if ! { [ -f /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; }; then
    runuser -u munge -- /usr/sbin/munged
fi
wait_for 10 sh -c 'munge -n | unmunge'

# slurm.conf: this host as controller and node; memory is 90 % of what slurmd finds (more drains the node)
node=$(slurmd -C | head -1)
memory=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
node=$(sed "s/RealMemory=[0-9]*/RealMemory=$((memory * 9 / 10))/" <<<"$node")
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
chown slurm:slurm /var/spool/slurmctld /var/log/slurm
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=ci
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
${node} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
CONF

# accounting: MariaDB (its sysvinit script) and slurmdbd, then the cluster registered once
mkdir -p /run/mysqld
chown mysql:mysql /run/mysqld
if ! { [ -f /run/mysqld/mysqld.pid ] && kill -0 "$(cat /run/mysqld/mysqld.pid)" 2>/dev/null; }; then
    /etc/init.d/mariadb start
fi
mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
          GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
cat >/etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
chown slurm:slurm /etc/slurm/slurmdbd.conf
chmod 600 /etc/slurm/slurmdbd.conf
/usr/sbin/slurmdbd
wait_for 60 sacctmgr -n list cluster
sacctmgr -n list cluster format=cluster | grep -qw ci || sacctmgr -i add cluster ci

# the controller and the node (both read slurm.conf: a change needs both restarted)
/usr/sbin/slurmctld
/usr/sbin/slurmd
wait_for 30 sh -c "sinfo -h -n $host -o %T | grep -qx idle"
sinfo
