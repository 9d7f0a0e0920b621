//! A module's `__constant__` and `__device__` variables as tracked buffers on a real GPU: a
//! constant table uploaded and read by a kernel, a device counter written by a kernel and
//! downloaded, and a write on another stream fenced against a kernel on a lane.

use crate::common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::Error;

const SRC: &str = r#"
__constant__ float table[4];
__device__ unsigned counter;
extern "C" __global__ void lookup(float* out) { out[threadIdx.x] = 10.0f * table[threadIdx.x]; }
extern "C" __global__ void count(unsigned n) { if (threadIdx.x < n) atomicAdd(&counter, 1u); }
// Spins, then adds the table into `acc`: a slow reader of the global.
extern "C" __global__ void slow_sum(float* acc, long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    acc[threadIdx.x] += table[threadIdx.x];
}
"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_constant_table_is_uploaded_and_read_by_a_kernel() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let module = d.compile(SRC, &[]).unwrap();
    let table = module.global::<f32>("table", 4).unwrap();
    assert!(table.same_buffer(&module.global::<f32>("table", 4).unwrap()));
    table.copy_from_slice(d.default_stream(), &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let out = d.alloc_zeros::<f32>(s, 4).unwrap();
    let k = module.kernel("lookup").unwrap();
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (4, 1, 1), shared_mem_bytes: 0 };
    let launch = k.launch(&d, s, cfg).reads_global(&table).write(&out);
    // SAFETY: 1. `lookup` reads `table` and writes `out`, as declared; 2. 4 threads touch
    // elements 0..4 of both; 3. its one parameter is a float pointer.
    unsafe { launch.enqueue() }.unwrap().wait().unwrap();
    assert_eq!(out.download(s).unwrap(), [10.0, 20.0, 30.0, 40.0]);
    // A wrong size is refused, naming the argument.
    assert!(matches!(module.global::<f32>("table", 5), Err(Error::InvalidArgument { arg: "len", .. })));
    // The buffer keeps the module loaded after its handle drops.
    drop((module, k));
    table.copy_from_slice(s, &[5.0, 6.0, 7.0, 8.0]).unwrap();
    assert_eq!(table.download(s).unwrap(), [5.0, 6.0, 7.0, 8.0]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_device_counter_is_written_by_a_kernel_and_downloaded() {
    let Some(d) = gpu() else { return };
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let module = d.compile(SRC, &[]).unwrap();
    let counter = module.global::<u32>("counter", 1).unwrap();
    counter.copy_from_slice(s1, &[0]).unwrap();
    let k = module.kernel("count").unwrap();
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (64, 1, 1), shared_mem_bytes: 0 };
    for _ in 0..3 {
        let launch = k.launch(&d, s2, cfg).read_writes_global(&counter).scalar(50u32);
        // SAFETY: 1. `count` reads and writes `counter` only, as declared; 2. it is one
        // unsigned; 3. its one parameter is an unsigned.
        unsafe { launch.enqueue() }.unwrap();
    }
    // Downloaded on another stream: fenced after the three launches.
    assert_eq!(counter.download(s1).unwrap(), [150]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_write_on_another_stream_is_fenced_against_a_kernel_on_a_lane() {
    let Some(d) = gpu() else { return };
    let module = d.compile(SRC, &[]).unwrap();
    let table = module.global::<f32>("table", 4).unwrap();
    table.copy_from_slice(d.default_stream(), &[1.0; 4]).unwrap();
    let acc = d.alloc_zeros::<f32>(d.default_stream(), 4).unwrap();
    let k = module.kernel("slow_sum").unwrap();
    let lane = d.lane("globals").unwrap();
    let (kk, tt, aa) = (k.clone(), table.clone(), acc.clone());
    let (enqueued, on_gpu) = std::sync::mpsc::channel();
    let read = lane.submit(move |cx| {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (4, 1, 1), shared_mem_bytes: 0 };
        let launch = kk.launch(cx.device(), cx.stream(), cfg).read_write(&aa).reads_global(&tt).scalar(200_000_000i64);
        // SAFETY: 1. `slow_sum` reads `table` and reads and writes `acc`, as declared; 2. 4
        // threads touch elements 0..4 of both; 3. its parameters are a float pointer and a long long.
        let done = unsafe { launch.enqueue() }.map(drop);
        let _ = enqueued.send(());
        done
    });
    on_gpu.recv().unwrap();
    // A write of the table on another stream while the slow kernel may still run: it must
    // wait for the kernel's read, or the sum sees 2.0.
    let other = d.new_stream().unwrap();
    table.copy_from_slice(other, &[2.0; 4]).unwrap();
    read.wait().unwrap();
    assert_eq!(acc.download(other).unwrap(), [1.0; 4]);
    assert_eq!(table.download(d.default_stream()).unwrap(), [2.0; 4]);
}

/// An unknown name is refused naming `name`. The driver's lookup fails for it (on purpose), so
/// `tools/sanitize.sh` leaves this test out, as compute-sanitizer rightly reports that call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_global_of_an_unknown_name_is_refused_naming_it() {
    let Some(d) = gpu() else { return };
    let module = d.compile(SRC, &[]).unwrap();
    assert!(matches!(module.global::<f32>("nothing", 1), Err(Error::InvalidArgument { arg: "name", .. })));
}
