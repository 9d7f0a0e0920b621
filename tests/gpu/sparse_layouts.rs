//! cuSPARSE's dense layouts, transposes, batches and CSR ↔ COO on the GPU, each against the CPU
//! reference of tests/common/reference/sparse.rs in every value and index type the API takes,
//! one test per feature (the full harness also runs in sparse_cross): row-major and transposed
//! dense operands of SpMM, conjugate transposes in SpMV / SpMM / SpSV / SpSM / SDDMM, row-major
//! SpSM, SDDMM and dense conversions, strided-batch SpMM, SpGEMM, CSR ↔ COO,
//! dense → CSC / COO, and the BSR conversions.

use crate::common::reference::sparse::*;
use crate::common::*;
use cusched::Complex;

fn setup() -> Option<Cx> {
    Some(Cx::new(gpu()?, Rng::new()))
}

/// Runs `f::<T, I>` for every value type and both index types.
macro_rules! every_type {
    ($cx:expr, $f:ident) => {{
        $f::<f32, i32>($cx);
        $f::<f32, i64>($cx);
        $f::<f64, i32>($cx);
        $f::<f64, i64>($cx);
        $f::<Complex<f32>, i32>($cx);
        $f::<Complex<f32>, i64>($cx);
        $f::<Complex<f64>, i32>($cx);
        $f::<Complex<f64>, i64>($cx);
    }};
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spmv_and_spmm_in_every_layout_and_transpose_match_the_reference() {
    let Some(mut cx) = setup() else { return };
    every_type!(&mut cx, spmv_and_spmm);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn triangular_solves_with_conjugate_transposes_and_row_major_operands_match_the_reference() {
    let Some(mut cx) = setup() else { return };
    every_type!(&mut cx, solves);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn row_major_and_conjugate_transposed_sddmm_and_dense_conversions_match_the_reference() {
    let Some(mut cx) = setup() else { return };
    every_type!(&mut cx, sddmm);
    every_type!(&mut cx, conversions);
}

/// SDDMM into a BSR `C` is refused, naming `c`, in every value and index type (each
/// combination printed before its call).
#[test]
#[ignore = "needs a CUDA GPU"]
fn sddmm_into_a_bsr_matrix_is_refused() {
    let Some(mut cx) = setup() else { return };
    every_type!(&mut cx, sddmm_bsr);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn strided_batch_spmm_matches_the_reference() {
    let Some(mut cx) = setup() else { return };
    every_type!(&mut cx, spmm_batched);
}

/// SpGEMM in both index types, and its reusable form (with `beta C`) with `i32` indices (`i64`
/// refused, naming `a`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn spgemm_and_its_reusable_form_in_both_index_types_match_the_reference() {
    let Some(mut cx) = setup() else { return };
    every_type!(&mut cx, spgemm_products);
}

/// CSR ↔ COO (with CSR ↔ CSC: the `i32`-only ops).
#[test]
#[ignore = "needs a CUDA GPU"]
fn csr_to_coo_and_back_match_the_reference() {
    let Some(mut cx) = setup() else { return };
    i32_only::<f32>(&mut cx);
    i32_only::<f64>(&mut cx);
    i32_only::<Complex<f32>>(&mut cx);
    i32_only::<Complex<f64>>(&mut cx);
}

/// Dense → CSC and dense → COO from column- and row-major padded views, in every value and
/// index type.
#[test]
#[ignore = "needs a CUDA GPU"]
fn dense_to_csc_and_dense_to_coo_match_the_reference() {
    let Some(mut cx) = setup() else { return };
    every_type!(&mut cx, dense_to_csc_and_coo);
}

/// CSR ↔ BSR, BSR → dense and dense → BSR (`i32` indices: cuSPARSE's legacy conversions), in
/// blocks of 1, 2 and 3 on odd sizes, in every value type.
#[test]
#[ignore = "needs a CUDA GPU"]
fn bsr_conversions_match_the_reference() {
    let Some(mut cx) = setup() else { return };
    bsr_conversions::<f32>(&mut cx);
    bsr_conversions::<f64>(&mut cx);
    bsr_conversions::<Complex<f32>>(&mut cx);
    bsr_conversions::<Complex<f64>>(&mut cx);
}
