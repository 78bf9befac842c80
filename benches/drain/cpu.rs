//! Where the CPU goes during a drain: this process (the handler), the
//! processor(s), the database servers and the whole machine, from /proc.

use std::process::Command;

use serde::Serialize;

/// CPU seconds spent from processor spawn until the drain was seen done.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct CpuUse {
    pub(crate) window_s: f64,
    /// The processor(s), SQLite included for that backend.
    pub(crate) processor_s: f64,
    /// This process: the handler, plus the benchmark's completion polling.
    pub(crate) handler_s: f64,
    /// PostgreSQL or MariaDB server processes.
    pub(crate) database_s: f64,
    /// Every CPU of the machine busy (anything, other work included).
    pub(crate) machine_busy_s: f64,
    /// window × CPUs.
    pub(crate) machine_capacity_s: f64,
}

/// Cumulative CPU ticks of what a drain is made of.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuSnap {
    pub(crate) own: u64,
    pub(crate) database: u64,
    pub(crate) machine_busy: u64,
}

impl CpuSnap {
    pub(crate) fn take() -> CpuSnap {
        CpuSnap {
            own: std::fs::read_to_string("/proc/self/stat")
                .ok()
                .and_then(|s| stat_ticks(&s))
                .unwrap_or(0),
            database: database_ticks(),
            machine_busy: machine_busy_ticks(),
        }
    }
}

/// utime + stime of a /proc/<pid>/stat line.
pub(crate) fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

pub(crate) fn pid_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_ticks(&s))
        .unwrap_or(0)
}

/// Ticks of every PostgreSQL and MariaDB/MySQL server process.
pub(crate) fn database_ticks() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut total = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let comm = stat
            .split_once('(')
            .and_then(|(_, r)| r.rsplit_once(')'))
            .map_or("", |(c, _)| c);
        if matches!(comm, "postgres" | "mariadbd" | "mysqld") {
            total += stat_ticks(&stat).unwrap_or(0);
        }
    }
    total
}

/// Busy ticks of all CPUs (everything but idle and iowait).
pub(crate) fn machine_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else {
        return 0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    if f.len() < 5 {
        return 0;
    }
    f.iter().sum::<u64>() - f[3] - f[4]
}

/// Clock ticks per second of /proc figures.
pub(crate) fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}
