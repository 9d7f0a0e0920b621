//! Modules loaded from compiled images on a real GPU: PTX text (from NVRTC), a CUBIN and a
//! fatbin (from `nvcc`, where the machine has it), as bytes and from files; the kernels they hold
//! launched through the typed path; PTX that does not assemble is a compile error with the
//! linker's log.

use crate::common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::{Device, Error, Module, ModuleImage};
use std::path::PathBuf;
use std::process::Command;

const SRC: &str = r#"
extern "C" __global__ void axpb(const float* x, float* y, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
"#;

/// Runs `axpb` of `module` on 1000 elements and checks the result.
fn check_axpb(d: &Device, module: &Module, what: &str) {
    let s = d.new_stream().unwrap();
    let n = 1000u32;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = d.upload(s, &host).unwrap();
    let y = d.alloc_zeros::<f32>(s, n as usize).unwrap();
    let k = module.kernel("axpb").unwrap();
    assert_eq!(k.param_sizes(), [8, 8, 4, 4, 4], "{what}");
    let launch =
        k.launch(d, s, LaunchConfig::for_num_elems(n)).read(&x).write(&y).scalar(2.0f32).scalar(1.0f32).scalar(n);
    // SAFETY: 1. `axpb` reads x[0..n] and writes y[0..n], as declared; 2. the grid covers n
    // with the bound check in the kernel; 3. parameters as declared.
    unsafe { launch.enqueue() }.unwrap().wait().unwrap();
    let want: Vec<f32> = host.iter().map(|v| 2.0 * v + 1.0).collect();
    assert_eq!(y.download(s).unwrap(), want, "{what}");
}

/// `nvcc`, if the machine has the CUDA toolkit's compiler.
fn nvcc() -> Option<PathBuf> {
    let candidates = [PathBuf::from("nvcc"), PathBuf::from("/usr/local/cuda/bin/nvcc")];
    candidates.into_iter().find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
}

fn arch(d: &Device) -> String {
    use cusched::cudarc::driver::sys::CUdevice_attribute as A;
    // SAFETY: the context is only queried for attributes.
    let ctx = unsafe { d.cuda_context() }.unwrap();
    let major = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap();
    let minor = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).unwrap();
    format!("{major}{minor}")
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ptx_text_is_jit_compiled_and_launched() {
    let Some(d) = gpu() else { return };
    let ptx = cusched::cudarc::nvrtc::compile_ptx(SRC).unwrap().to_src();
    let module = d.load_module(&ModuleImage::Ptx(ptx.clone())).unwrap();
    check_axpb(&d, &module, "PTX");
    // The same from a file, its kind told from its first bytes.
    let path = std::env::temp_dir().join(format!("cusched-test-{}.ptx", std::process::id()));
    std::fs::write(&path, &ptx).unwrap();
    let from_file = d.load_module_file(&path);
    let _ = std::fs::remove_file(&path);
    check_axpb(&d, &from_file.unwrap(), "PTX from a file");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ptx_that_does_not_assemble_is_a_compile_error_with_the_log() {
    let Some(d) = gpu() else { return };
    let ptx = cusched::cudarc::nvrtc::compile_ptx(SRC).unwrap().to_src().replace("ret;", "no_such_instruction;");
    match d.load_module(&ModuleImage::Ptx(ptx)) {
        Err(Error::CompileFailed { log, .. }) => assert!(log.contains("no_such_instruction"), "log: {log}"),
        other => panic!("expected CompileFailed, got {other:?}"),
    }
    // Not PTX at all: refused before the driver sees it.
    assert!(matches!(
        d.load_module(&ModuleImage::Ptx("hello".into())),
        Err(Error::InvalidArgument { arg: "image", .. })
    ));
    assert!(matches!(
        d.load_module(&ModuleImage::Cubin(vec![1, 2, 3])),
        Err(Error::InvalidArgument { arg: "image", .. })
    ));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cubin_and_fatbin_from_nvcc_load_as_bytes_and_files() {
    let Some(d) = gpu() else { return };
    let Some(nvcc) = nvcc() else {
        eprintln!("skipped: no nvcc on this machine to make a CUBIN and a fatbin");
        return;
    };
    let dir = std::env::temp_dir().join(format!("cusched-modules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("axpb.cu");
    std::fs::write(&src, SRC).unwrap();
    let sm = arch(&d);
    for (flag, out, gencode) in [
        ("-cubin", "axpb.cubin", format!("-arch=sm_{sm}")),
        ("-fatbin", "axpb.fatbin", format!("-gencode=arch=compute_{sm},code=[sm_{sm},compute_{sm}]")),
    ] {
        let path = dir.join(out);
        let built = Command::new(&nvcc).arg(flag).arg(&gencode).arg("-o").arg(&path).arg(&src).output().unwrap();
        assert!(built.status.success(), "nvcc {flag}: {}", String::from_utf8_lossy(&built.stderr));
        let bytes = std::fs::read(&path).unwrap();
        let image = ModuleImage::from_bytes(bytes).unwrap();
        match (flag, &image) {
            ("-cubin", ModuleImage::Cubin(_)) | ("-fatbin", ModuleImage::Fatbin(_)) => {}
            _ => panic!("{flag} was read as another kind"),
        }
        check_axpb(&d, &d.load_module(&image).unwrap(), flag);
        check_axpb(&d, &d.load_module_file(&path).unwrap(), &format!("{flag} from a file"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
