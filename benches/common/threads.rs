//! What the process's threads did during a measurement, from Linux's `/proc`: the CPU time and
//! wake-ups of cusched's completion threads, and how often the measuring thread was switched
//! out. It tells apart "the op path does more work" from "the op path blocks or shares a
//! lock with a busy completion thread". Elsewhere than Linux every figure reads zero.

use std::fs;

/// Cumulative counters at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadSample {
    /// CPU time of every thread named `cusched-completion` (nanoseconds).
    pub completion_cpu_ns: u64,
    /// Times those threads were scheduled in (each wake-up from a sleep or a blocking receive
    /// counts once).
    pub completion_slices: u64,
    /// The calling thread's voluntary context switches (it blocked: a futex wait, a sleep).
    pub own_blocked: u64,
    /// The calling thread's involuntary context switches (it was preempted).
    pub own_preempted: u64,
}

impl ThreadSample {
    /// Reads the counters now. Call from the thread whose switches should be counted.
    pub fn now() -> ThreadSample {
        let mut s = ThreadSample::default();
        if let Ok(tasks) = fs::read_dir("/proc/self/task") {
            for task in tasks.flatten() {
                let dir = task.path();
                // `comm` is cut to 15 bytes.
                let named = fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim_end() == "cusched-complet");
                if !named {
                    continue;
                }
                if let Some((cpu, slices)) = schedstat(&dir.join("schedstat")) {
                    s.completion_cpu_ns += cpu;
                    s.completion_slices += slices;
                }
            }
        }
        if let Ok(status) = fs::read_to_string("/proc/thread-self/status") {
            for line in status.lines() {
                let value = |prefix: &str| line.strip_prefix(prefix).and_then(|v| v.trim().parse::<u64>().ok());
                if let Some(v) = value("voluntary_ctxt_switches:") {
                    s.own_blocked = v;
                } else if let Some(v) = value("nonvoluntary_ctxt_switches:") {
                    s.own_preempted = v;
                }
            }
        }
        s
    }

    /// The counters from `before` to `self`.
    pub fn since(&self, before: &ThreadSample) -> ThreadSample {
        ThreadSample {
            completion_cpu_ns: self.completion_cpu_ns.saturating_sub(before.completion_cpu_ns),
            completion_slices: self.completion_slices.saturating_sub(before.completion_slices),
            own_blocked: self.own_blocked.saturating_sub(before.own_blocked),
            own_preempted: self.own_preempted.saturating_sub(before.own_preempted),
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &ThreadSample) {
        self.completion_cpu_ns += other.completion_cpu_ns;
        self.completion_slices += other.completion_slices;
        self.own_blocked += other.own_blocked;
        self.own_preempted += other.own_preempted;
    }

    /// One table cell: per op over `ops` ops.
    pub fn per_op(&self, ops: u64) -> String {
        let ops = ops.max(1) as f64;
        format!(
            "{:.0} ns, {:.3} wakes / {:.3} blocked, {:.3} preempted",
            self.completion_cpu_ns as f64 / ops,
            self.completion_slices as f64 / ops,
            self.own_blocked as f64 / ops,
            self.own_preempted as f64 / ops
        )
    }
}

/// A thread's CPU time (ns) and timeslices from its `schedstat` file.
fn schedstat(path: &std::path::Path) -> Option<(u64, u64)> {
    let text = fs::read_to_string(path).ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    let cpu = fields.next()??;
    let _waiting = fields.next()??;
    let slices = fields.next()??;
    Some((cpu, slices))
}
