//! A user's whole pipeline on the simulator, library ops and their own kernel mixed across
//! lanes: a GEMM on one lane, an FFT on another, and a kernel (a host closure) on a third that
//! reads the GEMM's output without declaring it. The hazard checker names the missing
//! declaration: the buffer's label and the kernel that read it.

use crate::common::*;
use cusched::blas::Gemm;
use cusched::fft::{Direction, FftLayout};
use cusched::{Complex, HazardKind};

#[test]
fn a_missing_declaration_in_a_mixed_pipeline_is_named() {
    let d = sim_listing_hazards();
    let s = d.default_stream();
    let (m, n, k) = (4usize, 4usize, 3usize);
    let a = d.upload(s, &vec![1.0f32; m * k]).unwrap();
    let b = d.upload(s, &vec![2.0f32; k * n]).unwrap();
    let c = d.alloc_zeros::<f32>(s, m * n).unwrap().with_label("gemm_out");
    let x = d.upload(s, &vec![Complex { re: 1.0f32, im: 0.0 }; m * n]).unwrap();
    let y = d.alloc_zeros::<Complex<f32>>(s, m * n).unwrap().with_label("fft_out");
    let out = d.alloc_zeros::<f32>(s, m * n).unwrap().with_label("mixed");
    let (gemm, fft, user) = (d.lane("gemm").unwrap(), d.lane("fft").unwrap(), d.lane("user").unwrap());

    let (a2, b2, c2) = (a.clone(), b.clone(), c.clone());
    let product = gemm.submit(move |cx| cx.blas()?.gemm(&Gemm::new(m, n, k, &a2, &b2, &c2)));
    let (x2, y2) = (x.clone(), y.clone());
    let spectrum = fft.submit(move |cx| cx.fft()?.c2c(&FftLayout::d1(m * n), &x2, &y2, Direction::Forward));
    // The GEMM has finished before the kernel runs, so the kernel reads its result; nothing
    // but this wait orders the two, since the kernel never declares the read.
    product.wait().unwrap().wait().unwrap();
    spectrum.wait().unwrap().wait().unwrap();

    let (c3, y3, out3) = (c.clone(), y.clone(), out.clone());
    user.submit(move |cx| {
        let (cm, ym, om) = (c3.sim_data()?, y3.sim_data()?, out3.sim_data()?);
        let mut rec = cx.recorder().named("mix");
        // The FFT's output and the kernel's own output are declared; the GEMM's is not.
        rec.read(&y3)?.write(&out3)?;
        rec.launch(cx.device(), |scope| {
            scope.sim_kernel(move || {
                let (c, y) = (cm.read(), ym.read());
                for ((o, c), y) in om.lock().iter_mut().zip(c.iter()).zip(y.iter()) {
                    *o = c + y.re;
                }
            })
        })
    })
    .wait()
    .unwrap();
    d.synchronize(s).unwrap();

    // The values are right (the wait ordered them), and the checker still names the read.
    let mut want = vec![2.0 * k as f32; m * n];
    want[0] += (m * n) as f32;
    let got = out.download(s).unwrap();
    assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-4), "{got:?}, want {want:?}");
    let hazards = d.sim_hazards().unwrap();
    assert_eq!(hazards.len(), 1, "the GEMM and the FFT keep to their declared uses: {hazards:#?}");
    let h = &hazards[0];
    assert_eq!(h.kind, HazardKind::Undeclared);
    assert_eq!(h.buffer, c.id());
    let text = h.to_string();
    assert!(text.contains("\"gemm_out\"") && text.contains("`mix`") && text.contains("\"user\""), "{text}");
    assert!(text.contains("read") && text.contains(".read("), "{text}");
}
