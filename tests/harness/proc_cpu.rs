//! A process's CPU time from `/proc/<pid>/stat`, for the benchmarks.

/// CPU seconds of one process, from `/proc/<pid>/stat` (all zero when it is
/// gone or unreadable).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcCpu {
    /// User time.
    pub user: f64,
    /// System (kernel) time.
    pub system: f64,
    /// User and system time of the children it waited for (reaped).
    pub reaped: f64,
}

impl ProcCpu {
    /// Reads process `pid`'s figures now.
    pub fn of(pid: u32) -> ProcCpu {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // After the command: state is field 3; utime, stime, cutime, cstime are 14 to 17 (1-based).
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
        // SAFETY: sysconf has no memory effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let secs = |i: usize| {
            let ticks = fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
            if hz > 0.0 { ticks / hz } else { 0.0 }
        };
        ProcCpu { user: secs(11), system: secs(12), reaped: secs(13) + secs(14) }
    }

    /// User plus system time of the process itself.
    pub fn own(&self) -> f64 {
        self.user + self.system
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_spent_some_cpu_and_a_gone_one_none() {
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(ProcCpu::of(std::process::id()).own() > 0.0);
        assert_eq!(ProcCpu::of(u32::MAX), ProcCpu::default());
    }
}
