//! Failures propagate along the data on a real GPU: the three-lane pipeline (upload, slow
//! compute, download) with no wait between stages, where one chunk's upload job fails and, in a
//! second test, a GEMM stage is given a bad shape. The download of the failed chunk resolves with
//! the error naming the failed job, never `Ok` with the previous chunk's data; the chunks after
//! it rewrite the buffers and come out exact. Skipped without a GPU unless
//! `CUSCHED_REQUIRE_GPU=1`.

use crate::common::slow::*;
use crate::common::*;
use std::sync::Arc;

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_a_failed_upload_job_fails_the_download_of_its_chunk() {
    let Some(d) = gpu() else { return };
    let k = Arc::new(kernels(&d));
    let (up, mid, down) = (d.lane("upload").unwrap(), d.lane("compute").unwrap(), d.lane("download").unwrap());
    let s0 = d.default_stream();
    const CHUNKS: usize = 8;
    const BAD: usize = 3;
    let x = d.alloc_zeros::<f32>(s0, N).unwrap().with_label("x");
    let y = d.alloc_zeros::<f32>(s0, N).unwrap().with_label("y");
    d.synchronize(s0).unwrap();
    let mut downloads = Vec::new();
    for i in 0..CHUNKS {
        let (dd, kk, xw) = (d.clone(), k.clone(), x.clone());
        up.job().write(&x).submit(move |cx, _| {
            if i == BAD {
                return Err(bad("chunk", format!("chunk {i} could not be read")));
            }
            fill(&dd, &kk, cx.stream(), &xw, i as f32, SLOW / 4)
        });
        let (dd, kk, xr, yw) = (d.clone(), k.clone(), x.clone(), y.clone());
        mid.job().read(&x).write(&y).submit(move |cx, _| copy(&dd, &kk, cx.stream(), &yw, &xr, SLOW / 4));
        let yr = y.clone();
        downloads.push(down.job().read(&y).submit(move |cx, _| yr.download(cx.stream())));
    }
    for (i, c) in downloads.into_iter().enumerate() {
        match c.wait() {
            Err(e) if i == BAD => {
                assert!(is_failed_input(&e), "{e:?}");
                assert!(e.to_string().contains("upload"), "{e}");
            }
            Ok(got) if i != BAD => assert!(all_eq(&got, i as f32), "chunk {i}: got {}", got[0]),
            other => panic!("chunk {i}: {:?}", other.map(|v| v[0])),
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
#[cfg(feature = "cublas")]
fn gpu_a_failed_gemm_stage_fails_the_download() {
    use cusched::blas::Gemm;
    let Some(d) = gpu() else { return };
    let k = Arc::new(kernels(&d));
    let (up, mm, down) = (d.lane("upload").unwrap(), d.lane("gemm").unwrap(), d.lane("download").unwrap());
    let s0 = d.default_stream();
    let a = d.alloc_zeros::<f32>(s0, 16).unwrap();
    let c = d.alloc_zeros::<f32>(s0, 16).unwrap().with_label("c");
    d.synchronize(s0).unwrap();
    let (dd, kk, aw) = (d.clone(), k.clone(), a.clone());
    up.job().write(&a).submit(move |cx, _| fill(&dd, &kk, cx.stream(), &aw, 1.0, SLOW / 4));
    let (ar, cw) = (a.clone(), c.clone());
    // lda = 1 is below m = 4: cuBLAS would reject it, cusched rejects it first.
    let gemm = mm.job().read(&a).write(&c).submit(move |cx, _| {
        cx.blas()?.gemm(&Gemm::new(4, 4, 4, &ar, &ar, &cw).leading(1, 4, 4))?;
        Ok(())
    });
    let cr = c.clone();
    let downloaded = down.job().read(&c).submit(move |cx, _| cr.download(cx.stream()));
    assert!(gemm.wait().is_err());
    let err = downloaded.wait().expect_err("the GEMM failed: the download must not resolve Ok");
    assert!(is_failed_input(&err), "{err:?}");
    assert!(err.to_string().contains("gemm"), "{err}");
}
