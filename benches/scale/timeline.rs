//! Where a measured phase's time goes, tenth by tenth: how busy the machine's cores were (from
//! `/proc/stat`, every process together), the control plane's and the agent's share of that, and
//! how far the objects had come (created, applied, healthy: from their own timestamps, read
//! after the phase), and which processes used the CPU. Both sources are free: reading `/proc` adds nothing to the API server's
//! load, and the timestamps are read once after the phase, so the figures of the phase are
//! those of a run without the timeline.
//!
//! The install's time mostly follows the machine's total CPU; a tenth where the cores idle
//! while bundles are not yet Ready is time that does not follow CPU, which is what this shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::cpu_seconds;

/// How often the sampler reads `/proc`.
const EVERY: Duration = Duration::from_millis(250);

/// The machine's CPU time so far, summed over its cores, in seconds.
#[derive(Clone, Copy, Default)]
pub struct MachineCpu {
    /// user, nice, system, irq and softirq.
    busy: f64,
    /// idle and iowait.
    idle: f64,
    /// Taken by the hypervisor for other guests: time the machine was not there.
    steal: f64,
}

impl MachineCpu {
    /// The first line of `/proc/stat`; zeros where it cannot be read.
    pub fn now() -> MachineCpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0.0))
            .collect();
        let at = |i: usize| ticks.get(i).copied().unwrap_or(0.0) / crate::common::clock_ticks();
        // user nice system idle iowait irq softirq steal (guest time is inside user already)
        MachineCpu {
            busy: at(0) + at(1) + at(2) + at(5) + at(6),
            idle: at(3) + at(4),
            steal: at(7),
        }
    }

    fn minus(self, earlier: MachineCpu) -> MachineCpu {
        MachineCpu {
            busy: self.busy - earlier.busy,
            idle: self.idle - earlier.idle,
            steal: self.steal - earlier.steal,
        }
    }

    fn total(self) -> f64 {
        (self.busy + self.idle + self.steal).max(f64::EPSILON)
    }
}

/// One reading.
#[derive(Clone, Copy)]
struct Sample {
    /// Seconds since the phase started.
    at: f64,
    machine: MachineCpu,
    plane: f64,
    agent: f64,
}

/// CPU seconds used so far by every process, by pid, with its name. The benchmark's own entry
/// is split in two: its own time, and that of the children it has waited for (kubectl).
fn processes() -> HashMap<u32, (String, f64)> {
    let mut all = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return all;
    };
    let me = std::process::id();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // exited meanwhile
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<f64> = stat[close + 1..]
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0.0))
            .collect();
        // After the state (index 0): utime, stime, cutime, cstime at 11..=14.
        let at = |i: usize| fields.get(i).copied().unwrap_or(0.0) / crate::common::clock_ticks();
        all.insert(pid, (name.clone(), at(11) + at(12)));
        if pid == me {
            // Not a pid: a key no process has.
            all.insert(
                u32::MAX,
                (
                    format!("children {name} waited for (kubectl)"),
                    at(13) + at(14),
                ),
            );
        }
    }
    all
}

/// Reads `/proc` every [`EVERY`] on a thread of its own (the benchmark's async workers block in
/// kubectl) until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
    /// When the phase started, in seconds since the epoch (the objects' timestamps are).
    started: f64,
    /// Every process's CPU at the start.
    processes: HashMap<u32, (String, f64)>,
}

impl Sampler {
    /// Starts sampling the machine, the control plane `plane_pid` and the agent `agent_pid`.
    pub fn start(plane_pid: u32, agent_pid: Option<u32>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let clock = Instant::now();
        let read = move || Sample {
            at: clock.elapsed().as_secs_f64(),
            machine: MachineCpu::now(),
            plane: cpu_seconds(plane_pid),
            agent: agent_pid.map_or(0.0, cpu_seconds),
        };
        let processes = processes();
        let first = read();
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = vec![first];
            while !stopping.load(Ordering::Relaxed) {
                std::thread::sleep(EVERY);
                samples.push(read());
            }
            samples.push(read());
            samples
        });
        Sampler {
            stop,
            thread,
            started,
            processes,
        }
    }

    /// Stops sampling; the phase ends now.
    pub fn stop(self) -> Timeline {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().unwrap_or_default();
        // What each process used in the phase; one that started during it, all of its time.
        let mut used: Vec<(String, f64)> = processes()
            .into_iter()
            .map(|(pid, (name, now))| {
                let before = self.processes.get(&pid).map_or(0.0, |(_, cpu)| *cpu);
                (name, now - before)
            })
            .filter(|(_, cpu)| *cpu > 0.0)
            .collect();
        used.sort_by(|a, b| b.1.total_cmp(&a.1));
        Timeline {
            samples,
            started: self.started,
            progress: Vec::new(),
            processes: used,
            plane: PlaneWork::default(),
        }
    }
}

/// A phase's samples and the times its objects reached each step.
pub struct Timeline {
    samples: Vec<Sample>,
    started: f64,
    /// Per step (e.g. "created"), the seconds since the epoch at which each object reached it.
    progress: Vec<(&'static str, Vec<f64>)>,
    /// CPU seconds each process used in the phase, the most first.
    processes: Vec<(String, f64)>,
    /// What the control plane did in the phase.
    plane: PlaneWork,
}

/// What the control plane did in a phase, from its own metrics (the API server, the
/// controllers and the fake kubelet run in one process, so one `/metrics` covers them all):
///
/// - per controller work queue, items processed and seconds spent on them
///   (`workqueue_work_duration_seconds`). The controllers' CPU follows their syncs, so this says
///   whether an agent made them sync more than the floor did for the same objects;
/// - the Go runtime's counters: bytes allocated, garbage collection CPU (and its share taken from
///   goroutines as mark assists), time runnable goroutines waited for a core, time spent waiting
///   on contended mutexes. When each controller sync and each request costs more beside pallet
///   than beside the least-work stand-in for the same work, these tell a busier heap from a
///   longer run queue from lock contention;
/// - watch events sent, per resource: what each write costs in fan-out to every watcher.
#[derive(Clone, Default)]
pub struct PlaneWork {
    /// Per work queue: (items processed, seconds spent on them).
    queues: BTreeMap<String, (f64, f64)>,
    /// Counters ([`RUNTIME_COUNTERS`]) and the live heap, by metric name.
    runtime: BTreeMap<&'static str, f64>,
    /// Watch events sent per resource: (events, bytes).
    watch_events: BTreeMap<String, (f64, f64)>,
}

/// Bytes the control plane allocated (a counter; see [`Timeline::plane_allocated`]).
const ALLOCATED: &str = "go_gc_heap_allocs_bytes_total";
/// The Go runtime's counters a phase is charged with (differences over the phase).
const RUNTIME_COUNTERS: [&str; 7] = [
    ALLOCATED,
    "go_cpu_classes_gc_total_cpu_seconds_total",
    "go_cpu_classes_gc_mark_assist_cpu_seconds_total",
    "go_gc_cycles_total_gc_cycles_total",
    "go_sched_latencies_seconds_sum",
    "go_sched_latencies_seconds_count",
    "go_sync_mutex_wait_total_seconds_total",
];
/// The live heap after the last garbage collection (a gauge: the phase's end value is kept).
const LIVE_HEAP: &str = "go_gc_heap_live_bytes";

/// The value of label `name` in a series' labels after its `{` (`group="",resource="pods"}`),
/// matched whole (`resource` is not `subresource`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let rest = match labels.strip_prefix(&key) {
        Some(rest) => rest,
        None => labels.split_once(&format!(",{key}"))?.1,
    };
    rest.split_once('"').map(|(value, _)| value)
}

impl PlaneWork {
    /// Reads the work queues, the runtime's counters and the watch events from a Prometheus
    /// text exposition.
    pub fn parse(metrics: &str) -> PlaneWork {
        let mut work = PlaneWork::default();
        for (series, value) in crate::common::metric_samples(metrics) {
            let (metric, labels) = series.split_once('{').unwrap_or((&series, ""));
            match metric {
                "workqueue_work_duration_seconds_count" | "workqueue_work_duration_seconds_sum" => {
                    let Some(name) = label(labels, "name") else {
                        continue;
                    };
                    let entry = work.queues.entry(name.to_string()).or_default();
                    match metric.ends_with("_count") {
                        true => entry.0 = value,
                        false => entry.1 = value,
                    }
                }
                "apiserver_watch_events_total" | "apiserver_watch_events_sizes_sum" => {
                    let Some(resource) = label(labels, "resource") else {
                        continue;
                    };
                    let entry = work.watch_events.entry(resource.to_string()).or_default();
                    match metric.ends_with("_total") {
                        true => entry.0 += value,
                        false => entry.1 += value,
                    }
                }
                _ => {
                    if let Some(name) = RUNTIME_COUNTERS
                        .iter()
                        .chain([&LIVE_HEAP])
                        .find(|name| **name == metric)
                    {
                        work.runtime.insert(name, value);
                    }
                }
            }
        }
        work
    }

    /// The work done since `before` (the live heap: as it is now).
    pub fn since(&self, before: &PlaneWork) -> PlaneWork {
        let minus = |map: &BTreeMap<String, (f64, f64)>, base: &BTreeMap<String, (f64, f64)>| {
            map.iter()
                .map(|(name, (a, b))| {
                    let (a0, b0) = base.get(name).copied().unwrap_or_default();
                    (name.clone(), (a - a0, b - b0))
                })
                .filter(|(_, (count, _))| *count > 0.0)
                .collect()
        };
        let runtime = self
            .runtime
            .iter()
            .map(|(name, value)| match *name == LIVE_HEAP {
                true => (*name, *value),
                false => (*name, value - before.runtime.get(name).unwrap_or(&0.0)),
            })
            .collect();
        PlaneWork {
            queues: minus(&self.queues, &before.queues),
            runtime,
            watch_events: minus(&self.watch_events, &before.watch_events),
        }
    }

    /// Prints the busiest work queues, the runtime's figures and the watch events sent, each
    /// on a line indented by three spaces.
    fn print(&self) {
        let mut busiest: Vec<_> = self.queues.iter().collect();
        busiest.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let busiest: Vec<String> = busiest
            .iter()
            .take(6)
            .map(|(name, (count, seconds))| format!("{name} {count:.0} ({seconds:.1} s)"))
            .collect();
        if !busiest.is_empty() {
            println!(
                "   controllers (items synced, seconds spent on them; the busiest): {}",
                busiest.join(", ")
            );
        }
        let get = |name: &str| self.runtime.get(name).copied().unwrap_or_default();
        if get(ALLOCATED) > 0.0 {
            let waits = get("go_sched_latencies_seconds_count").max(1.0);
            println!(
                "   control plane runtime: allocated {:.2} GiB; GC {:.1} CPU s (mark assists {:.1}) in {:.0} cycles, live heap {:.0} MiB at the end; runnable goroutines waited {:.2} ms on average for a core ({:.0} waits); contended mutexes {:.1} s",
                get(ALLOCATED) / f64::from(1 << 30),
                get("go_cpu_classes_gc_total_cpu_seconds_total"),
                get("go_cpu_classes_gc_mark_assist_cpu_seconds_total"),
                get("go_gc_cycles_total_gc_cycles_total"),
                get(LIVE_HEAP) / f64::from(1 << 20),
                get("go_sched_latencies_seconds_sum") / waits * 1000.0,
                waits,
                get("go_sync_mutex_wait_total_seconds_total"),
            );
        }
        let mut watched: Vec<_> = self.watch_events.iter().collect();
        watched.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let watched: Vec<String> = watched
            .iter()
            .take(8)
            .map(|(resource, (events, bytes))| {
                format!("{resource} {events:.0} ({:.1} MB)", bytes / 1e6)
            })
            .collect();
        if !watched.is_empty() {
            println!(
                "   watch events sent (events, bytes; the largest): {}",
                watched.join(", ")
            );
        }
    }
}

impl Timeline {
    /// Adds a step: when each object reached it (seconds since the epoch, as the API server
    /// writes them: whole seconds, so a count may run up to a second early).
    pub fn with(mut self, step: &'static str, times: Vec<f64>) -> Timeline {
        self.progress.push((step, times));
        self
    }

    /// Bytes the control plane allocated in the phase: a measure of its work that, unlike its
    /// CPU seconds, does not move with the shared machine's speed (the same floor b has cost
    /// 81.6 and 107.4 CPU s in two runs, allocating 6.58 and 6.65 GiB).
    pub fn plane_allocated(&self) -> f64 {
        self.plane
            .runtime
            .get(ALLOCATED)
            .copied()
            .unwrap_or_default()
    }

    /// Adds what the control plane did in the phase.
    pub fn with_plane_work(mut self, work: PlaneWork) -> Timeline {
        self.plane = work;
        self
    }

    /// Adds the step "created" when the phase `creates` its objects (an upgrade's were created
    /// before it: their times would only say so).
    pub fn created(self, creates: bool, times: Vec<f64>) -> Timeline {
        match creates {
            true => self.with("created", times),
            false => self,
        }
    }

    /// The machine's cores busy on average over the phase, and the idle and stolen shares of
    /// its CPU time.
    pub fn machine(&self) -> (f64, f64, f64) {
        let (Some(first), Some(last)) = (self.samples.first(), self.samples.last()) else {
            return (0.0, 0.0, 0.0);
        };
        let cpu = last.machine.minus(first.machine);
        let seconds = (last.at - first.at).max(f64::EPSILON);
        (
            cpu.busy / seconds,
            cpu.idle / cpu.total(),
            cpu.steal / cpu.total(),
        )
    }

    /// The readings at the start and end of the i-th of `parts` equal slices of the phase.
    fn slice(&self, i: usize, parts: usize) -> Option<(Sample, Sample)> {
        let end = self.samples.last()?.at;
        let at = |k: usize| end * k as f64 / parts as f64;
        // The last reading at or before `t`; the first one for the start.
        let reading = |t: f64| {
            let before = self.samples.iter().rev().find(|s| s.at <= t);
            before.or(self.samples.first()).copied()
        };
        let (from, to) = (reading(at(i))?, reading(at(i + 1))?);
        (to.at > from.at).then_some((from, to))
    }

    /// Prints the averages, the processes that used the most CPU, and one line per tenth of the
    /// phase, indented by three spaces.
    pub fn print(&self) {
        let (busy, idle, steal) = self.machine();
        let seconds = self.samples.last().map_or(0.0, |s| s.at);
        let attributed: f64 = self.processes.iter().map(|(_, cpu)| cpu).sum();
        let top: Vec<String> = self
            .processes
            .iter()
            .take(6)
            .map(|(name, cpu)| format!("{name} {cpu:.1}"))
            .collect();
        println!(
            "   machine: {busy:.2} cores busy on average, {:.1} CPU s (idle {:.0}%, stolen by the hypervisor {:.0}%); by process (CPU s): {}; not in a process still there: {:.1}",
            busy * seconds,
            idle * 100.0,
            steal * 100.0,
            top.join(", "),
            busy * seconds - attributed
        );
        self.plane.print();
        println!(
            "   by tenth of the phase (cores busy; objects that had reached each step, timestamps in whole seconds):"
        );
        let steps: String = self
            .progress
            .iter()
            .map(|(step, _)| format!(" {step:>8}"))
            .collect();
        println!(
            "     {:>13} {:>6} {:>6} {:>6} {:>6}{steps}",
            "seconds", "busy", "idle", "plane", "agent"
        );
        for i in 0..10 {
            let Some((from, to)) = self.slice(i, 10) else {
                continue;
            };
            let seconds = to.at - from.at;
            let cpu = to.machine.minus(from.machine);
            let counts: String = self
                .progress
                .iter()
                .map(|(_, times)| {
                    let before = times.iter().filter(|t| **t - self.started <= to.at).count();
                    format!(" {before:>8}")
                })
                .collect();
            println!(
                "     {:>13} {:>6.2} {:>5.0}% {:>6.2} {:>6.2}{counts}",
                format!("{:.1}-{:.1}", from.at, to.at),
                cpu.busy / seconds,
                cpu.idle / cpu.total() * 100.0,
                (to.plane - from.plane) / seconds,
                (to.agent - from.agent) / seconds,
            );
        }
    }
}
