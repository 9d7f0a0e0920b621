//! Completion latency: from submitting one small kernel to the waiting thread running again,
//! through `Completion::wait`, `on_complete`, a future polled by a minimal executor, and a lane
//! job, against a raw cudarc launch plus `cuStreamSynchronize`. Back to back, and after the
//! threads have gone idle (parked), where the floor is waking a parked thread.
//!
//! `bench-latency [reps]` on a GPU; `bench-latency --sim` (or no GPU) runs the cusched paths on
//! the simulated backend against a simulated launch plus `Device::synchronize`.

mod common;

use common::*;
use cusched::cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cusched::{Completion, Device, GpuRef, LaunchRecorder, Result as CuResult, SimConfig, StreamId};
use std::time::{Duration, Instant};

const N: u32 = 256;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One small op on `s` whose completion covers it: the typed launch on CUDA, a recorder around
/// a simulated kernel on the simulator.
fn op(
    device: &Device,
    kernel: Option<&cusched::Kernel>,
    s: StreamId,
    a: &GpuRef<f32>,
    c: &GpuRef<f32>,
) -> CuResult<Completion<()>> {
    match kernel {
        Some(k) => {
            let launch = k.launch(device, s, LaunchConfig::for_num_elems(N)).read(a).read(a).write(c).scalar(N);
            // SAFETY: 1. add3 reads its first two parameters (both `a`) and writes the third
            // (`c`), as declared; 2. it touches indices below N, the length of both buffers;
            // 3. the parameters are three float pointers and an unsigned, as declared.
            unsafe { launch.enqueue() }
        }
        // The recorder path returns no completion; a job on the stream covers the kernel.
        None => Ok(cusched::Handles::new(device, s)?.run(|cx| {
            let mut rec = cx.recorder();
            rec.read(a)?.write(c)?;
            let (x, y) = (a.sim_data()?, c.sim_data()?);
            rec.launch(cx.device(), move |scope| scope.sim_kernel(move || y.lock().copy_from_slice(&x.read())))
        })),
    }
}

struct Row {
    label: &'static str,
    samples: Vec<f64>,
}

fn main() -> Res<()> {
    let reps: usize =
        std::env::args().skip(1).find(|a| !a.starts_with('-')).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let gpu = if sim_requested() { None } else { Device::open(0).ok() };
    let device = match &gpu {
        Some(d) => d.clone(),
        None => {
            println!("running on the simulated backend (no GPU, or --sim): the baseline is a simulated launch plus synchronize\n");
            Device::sim(SimConfig { max_delay: Duration::ZERO, ..SimConfig::default() })?
        }
    };
    let s = device.new_stream()?;
    let kernel = if device.is_simulated() { None } else { Some(device.compile(ADD_SRC, &[])?.kernel("add3")?) };
    let a = device.alloc_zeros::<f32>(s, N as usize)?;
    let c = device.alloc_zeros::<f32>(s, N as usize)?;
    let lane = device.lane("latency")?;
    // The raw baseline: its own context object with tracking off, its own stream.
    let raw = match &gpu {
        Some(_) => {
            let ctx = CudaContext::new(0)?;
            // SAFETY: the baseline's slices are used by its own launches on one stream only.
            unsafe { ctx.disable_event_tracking() };
            let st = ctx.new_stream()?;
            let f = ctx.load_module(cusched::cudarc::nvrtc::compile_ptx(ADD_SRC)?)?.load_function("add3")?;
            let (ra, rc) = (st.alloc_zeros::<f32>(N as usize)?, st.alloc_zeros::<f32>(N as usize)?);
            Some((st, f, ra, rc))
        }
        None => None,
    };

    for (idle, title) in
        [(Duration::ZERO, "back to back"), (Duration::from_millis(2), "after 2 ms idle (threads parked)")]
    {
        let reps = if idle.is_zero() { reps } else { reps.min(300) };
        let mut rows: Vec<Row> = [
            "raw launch + synchronize",
            "cusched wait()",
            "cusched on_complete",
            "cusched future (block_on)",
            "cusched lane submit + wait()",
            "wake floor: channel ping-pong",
        ]
        .into_iter()
        .map(|label| Row { label, samples: Vec::with_capacity(reps) })
        .collect();
        let (ping_tx, ping_rx) = crossbeam_channel::bounded::<Instant>(1);
        let (pong_tx, pong_rx) = crossbeam_channel::bounded::<Instant>(1);
        let echo = std::thread::spawn(move || {
            while let Ok(t) = ping_rx.recv() {
                if pong_tx.send(t).is_err() {
                    break;
                }
            }
        });
        for rep in 0..reps + 20 {
            for (i, row) in rows.iter_mut().enumerate() {
                if !idle.is_zero() {
                    std::thread::sleep(idle);
                }
                let t = Instant::now();
                match i {
                    0 => match &raw {
                        Some((st, f, ra, rc)) => {
                            let mut l = st.launch_builder(f);
                            let mut rc = rc.clone();
                            l.arg(ra).arg(ra).arg(&mut rc).arg(&N);
                            // SAFETY: `add3` takes three float pointers and a length; N floats each.
                            unsafe { l.launch(LaunchConfig::for_num_elems(N)) }?;
                            st.synchronize()?;
                        }
                        None => {
                            let mut rec = LaunchRecorder::new_strict(s);
                            rec.read(&a)?.write(&c)?;
                            let (x, y) = (a.sim_data()?, c.sim_data()?);
                            rec.launch(&device, move |sc| sc.sim_kernel(move || y.lock().copy_from_slice(&x.read())))?;
                            device.synchronize(s)?;
                        }
                    },
                    1 => op(&device, kernel.as_ref(), s, &a, &c)?.wait()?,
                    2 => {
                        let (tx, rx) = crossbeam_channel::bounded(1);
                        op(&device, kernel.as_ref(), s, &a, &c)?.on_complete(move |r| {
                            let _ = tx.send((Instant::now(), r.is_ok()));
                        });
                        let (at, ok) = rx.recv()?;
                        if !ok {
                            return Err("on_complete delivered an error".into());
                        }
                        if rep >= 20 {
                            row.samples.push(at.duration_since(t).as_secs_f64());
                        }
                        continue;
                    }
                    3 => block_on(op(&device, kernel.as_ref(), s, &a, &c)?)?,
                    4 => {
                        let (k, a, c) = (kernel.clone(), a.clone(), c.clone());
                        lane.submit(move |cx| op(cx.device(), k.as_ref(), cx.stream(), &a, &c).map(drop)).wait()?
                    }
                    _ => {
                        ping_tx.send(t)?;
                        pong_rx.recv()?;
                    }
                }
                if rep >= 20 {
                    row.samples.push(t.elapsed().as_secs_f64());
                }
            }
        }
        drop(ping_tx);
        let _ = echo.join();
        println!("### {title}: median (p99) of {reps}\n");
        println!("| path | latency | vs raw |");
        println!("| --- | --- | --- |");
        let base = median(&mut rows[0].samples.clone());
        for row in &mut rows {
            let m = median(&mut row.samples);
            let p99 = percentile(&mut row.samples, 99.0);
            println!("| {} | {} ({}) | {} |", row.label, us(m), us(p99), ratio(m, base));
        }
        println!();
    }
    Ok(())
}
