//! A [`KernelTrace`] sink that collects host enqueue spans and GPU execution spans and writes
//! them as Chrome-trace JSON (open it in Perfetto or `chrome://tracing`).

use super::{GpuSpan, KernelTrace, OpInfo};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Which track of its group a span is on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrackKind {
    /// Host time spent enqueueing, on the named thread.
    Host {
        /// The enqueuing thread's name (a lane's thread is named after the lane).
        thread: String,
    },
    /// GPU execution on the group's stream.
    Gpu,
}

/// One span of a [`Timeline`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineSpan {
    /// The group the span's track belongs to: `lane <name>`, or `stream <n>` for work
    /// enqueued on a stream no lane owns.
    pub group: String,
    /// The track within the group.
    pub track: TrackKind,
    /// The op's library.
    pub library: &'static str,
    /// The op's name.
    pub op: String,
    /// Start, from the timeline's creation.
    pub start: Duration,
    /// Length.
    pub duration: Duration,
}

struct State {
    open: HashMap<u64, Instant>,
    spans: Vec<TimelineSpan>,
    dropped: u64,
}

/// Collects a timeline of every op: one group per lane (or stream), holding a host track per
/// enqueuing thread and a GPU track. Set it with [`crate::Device::set_trace`], with
/// [`crate::TraceOptions::gpu_timing`] on to get the GPU track.
///
/// ```
/// use cusched::{Device, SimConfig, Timeline, TraceOptions};
/// let device = Device::sim(SimConfig::default())?;
/// let timeline = Timeline::new();
/// device.set_trace(timeline.clone(), TraceOptions { gpu_timing: true })?;
/// let lane = device.lane("upload")?;
/// lane.submit(|cx| cx.device().upload(cx.stream(), &[1.0f32; 256]).map(drop)).wait()?;
/// let json = timeline.to_chrome_json();
/// assert!(json.contains("\"traceEvents\""));
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct Timeline {
    origin: Instant,
    capacity: usize,
    state: Mutex<State>,
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = crate::sync::lock(&self.state);
        write!(f, "Timeline({} spans, {} dropped)", st.spans.len(), st.dropped)
    }
}

impl Timeline {
    /// A timeline that keeps up to a million spans.
    pub fn new() -> std::sync::Arc<Timeline> {
        Timeline::with_capacity(1_000_000)
    }

    /// A timeline that keeps up to `capacity` spans and counts the rest as dropped.
    pub fn with_capacity(capacity: usize) -> std::sync::Arc<Timeline> {
        std::sync::Arc::new(Timeline {
            origin: Instant::now(),
            capacity,
            state: Mutex::new(State { open: HashMap::new(), spans: Vec::new(), dropped: 0 }),
        })
    }

    fn group(op: &OpInfo) -> String {
        match &op.lane {
            Some(name) => format!("lane {name}"),
            None => format!("stream {}", op.stream.index()),
        }
    }

    fn push(&self, span: TimelineSpan) {
        let mut st = crate::sync::lock(&self.state);
        if st.spans.len() < self.capacity {
            st.spans.push(span);
        } else {
            st.dropped += 1;
        }
    }

    /// Every span so far, sorted by group, track and start.
    pub fn spans(&self) -> Vec<TimelineSpan> {
        let mut spans = crate::sync::lock(&self.state).spans.clone();
        spans.sort_by(|a, b| (&a.group, &a.track, a.start).cmp(&(&b.group, &b.track, b.start)));
        spans
    }

    /// Spans not kept because the timeline was full.
    pub fn dropped(&self) -> u64 {
        crate::sync::lock(&self.state).dropped
    }

    /// The timeline as Chrome-trace JSON: one process per group (named after the lane), one
    /// thread per track, complete (`"ph":"X"`) events in microseconds.
    ///
    /// GPU timestamps have about half a microsecond of resolution, so a GPU span may appear to
    /// start a fraction of a microsecond before its predecessor on the same stream ends; such
    /// starts are moved to the predecessor's end so that a track never shows overlap the GPU
    /// cannot have (one stream runs its ops in order).
    pub fn to_chrome_json(&self) -> String {
        let spans = self.spans();
        let mut groups: Vec<&str> = spans.iter().map(|s| s.group.as_str()).collect();
        groups.dedup();
        let mut out = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
        let mut first = true;
        let mut emit = |out: &mut String, event: String| {
            if !first {
                out.push_str(",\n");
            }
            first = false;
            out.push_str(&event);
        };
        let mut tracks: Vec<(&str, &TrackKind)> = Vec::new();
        let mut last_end: HashMap<(usize, usize), f64> = HashMap::new();
        for span in &spans {
            let pid = groups.iter().position(|g| *g == span.group).unwrap_or(0) + 1;
            let tid = match tracks.iter().position(|(g, t)| *g == span.group && *t == &span.track) {
                Some(i) => i + 1,
                None => {
                    tracks.push((&span.group, &span.track));
                    let tid = tracks.len();
                    if !tracks.iter().take(tid - 1).any(|(g, _)| *g == span.group) {
                        emit(
                            &mut out,
                            format!(
                                "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":{}}}}}",
                                json_string(&span.group)
                            ),
                        );
                    }
                    let name = match &span.track {
                        TrackKind::Host { thread } => format!("host: {thread}"),
                        TrackKind::Gpu => "GPU".to_string(),
                    };
                    emit(
                        &mut out,
                        format!(
                            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
                            json_string(&name)
                        ),
                    );
                    tid
                }
            };
            let mut ts = span.start.as_secs_f64() * 1e6;
            let prev = last_end.entry((pid, tid)).or_insert(0.0);
            ts = ts.max(*prev);
            let dur = (span.start + span.duration).as_secs_f64() * 1e6 - ts;
            let dur = dur.max(0.0);
            *prev = ts + dur;
            emit(
                &mut out,
                format!(
                    "{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{ts:.3},\"dur\":{dur:.3}}}",
                    json_string(&span.op),
                    json_string(span.library)
                ),
            );
        }
        out.push_str("\n]}\n");
        out
    }

    /// Writes [`to_chrome_json`](Self::to_chrome_json) to `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_chrome_json())
            .map_err(|e| Error::invalid("path", format!("could not write the timeline to {}: {e}", path.display())))
    }
}

impl KernelTrace for Timeline {
    fn before_enqueue(&self, op: &OpInfo) {
        crate::sync::lock(&self.state).open.insert(op.id, Instant::now());
    }

    fn after_enqueue(&self, op: &OpInfo) {
        let end = Instant::now();
        let Some(start) = crate::sync::lock(&self.state).open.remove(&op.id) else { return };
        let thread = std::thread::current();
        let thread = thread.name().map_or_else(|| format!("{:?}", thread.id()), str::to_string);
        self.push(TimelineSpan {
            group: Timeline::group(op),
            track: TrackKind::Host { thread },
            library: op.library,
            op: op.op.to_string(),
            start: start.saturating_duration_since(self.origin),
            duration: end.saturating_duration_since(start),
        });
    }

    fn after_completion(&self, op: &OpInfo, gpu: Option<GpuSpan>) {
        if let Some(gpu) = gpu {
            self.push(TimelineSpan {
                group: Timeline::group(op),
                track: TrackKind::Gpu,
                library: op.library,
                op: op.op.to_string(),
                start: gpu.start.saturating_duration_since(self.origin),
                duration: gpu.duration,
            });
        }
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
