//! Graphs of the libraries that the simulator records but no other GPU test records: a
//! cuBLASLt matmul, a cuDNN convolution and a cuTENSOR contraction, each recorded with handles
//! made inside the recording, replayed with its input rewritten between replays, and compared
//! with the same op run eagerly on the same input (the simulator accepting an op is no proof
//! that a capture of it replays: a cuRAND draw recorded there and failed here).

use crate::common::*;
use cusched::{Device, GpuRef, Graph, Handles};

/// Side of the square operands.
#[cfg(any(feature = "cublaslt", feature = "cutensor"))]
const N: usize = 32;

/// Records `op` (writing the buffer it is given) into a graph writing `out`; then, for two
/// fresh random contents of `a` (an input `op` reads), runs `op` eagerly into a buffer of its
/// own, replays the graph, and compares the two outputs: the replay reads the input's current
/// contents and computes what the eager op does.
fn replays_as_eager<F>(d: &Device, a: &GpuRef<f32>, out_len: usize, op: F)
where
    F: Fn(&mut Handles, &GpuRef<f32>) -> cusched::Result<()> + Clone + Send + 'static,
{
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(d, s).unwrap();
    let (out, eager) = (d.alloc_zeros::<f32>(s, out_len).unwrap(), d.alloc_zeros::<f32>(s, out_len).unwrap());
    let (o, record) = (out.clone(), op.clone());
    let exec = Graph::record(d, move |rec| record(rec.handles(0)?, &o)).unwrap().instantiate().unwrap();
    let mut rng = Rng::new();
    for round in 0..2 {
        let fresh: Vec<f32> = random(&mut rng, a.len()).into_iter().map(|v| v as f32).collect();
        a.copy_from_slice(s, &fresh).unwrap();
        op(&mut h, &eager).unwrap();
        let want = eager.download(s).unwrap();
        out.copy_from_slice(s, &vec![f32::NAN; out_len]).unwrap();
        exec.replay(s).unwrap().wait().unwrap();
        let got = out.download(s).unwrap();
        let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * scale, "round {round}, element {i}: replay {g}, eager {w}");
        }
    }
}

/// `n` random f32 values on `d`, uploaded on its default stream.
fn upload_random(d: &Device, n: usize) -> GpuRef<f32> {
    let v: Vec<f32> = random(&mut Rng::new(), n).into_iter().map(|v| v as f32).collect();
    let b = d.upload(d.default_stream(), &v).unwrap();
    d.synchronize(d.default_stream()).unwrap();
    b
}

#[cfg(feature = "cublaslt")]
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recorded_cublaslt_matmul_replays_as_the_eager_one() {
    let Some(d) = gpu() else { return };
    let (a, b) = (upload_random(&d, N * N), upload_random(&d, N * N));
    let ar = a.clone();
    replays_as_eager(&d, &a, N * N, move |h, c| {
        h.blas_lt()?.matmul(&cusched::blas_lt::Matmul::new(N, N, N, &ar, &b, c))?.wait().map(drop)
    });
}

#[cfg(feature = "cudnn")]
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recorded_cudnn_convolution_replays_as_the_eager_one() {
    use cusched::cudnn::{Convolution, Layout, Shape, TensorView};
    let Some(d) = gpu() else { return };
    let (xd, wd, yd) = ([2usize, 8, 9, 7], [16usize, 8, 3, 3], [2usize, 16, 9, 7]);
    let (x, w) = (upload_random(&d, xd.iter().product()), upload_random(&d, wd.iter().product()));
    let xr = x.clone();
    replays_as_eager(&d, &x, yd.iter().product(), move |h, y| {
        let view = |b, dims: &[usize]| TensorView::new(b, Shape::new(Layout::Nhwc, dims));
        let conv = Convolution::new().pad(&[1, 1]);
        h.cudnn()?.conv_forward(&conv, &view(&xr, &xd), &view(&w, &wd), &view(y, &yd))?.wait()
    });
}

#[cfg(feature = "cutensor")]
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recorded_cutensor_contraction_replays_as_the_eager_one() {
    use cusched::tensor::{Contraction, TensorRef};
    let Some(d) = gpu() else { return };
    let (a, b) = (upload_random(&d, N * N), upload_random(&d, N * N));
    let ar = a.clone();
    replays_as_eager(&d, &a, N * N, move |h, c| {
        let t = |buf| TensorRef::new(buf, &[N, N]);
        h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&ar), t(&b), t(c)))?.wait()
    });
}
