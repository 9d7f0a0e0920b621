//! cuSPARSE's mixed-precision SpMV and SpMM on the GPU, one test per row of the tables, each
//! with both index types, CSR / CSC / COO, `A` plain and transposed, `beta` zero or not and
//! (SpMM) padded column-major and row-major dense operands, against the CPU reference of
//! tests/common/reference/sparse_mixed.rs within the output type's rounding (the integer row
//! exactly).

use crate::common::reference::sparse::Cx;
use crate::common::reference::sparse_mixed::{spmm_mixed, spmv_mixed};
use crate::common::*;
use cusched::half::{bf16, f16};

fn setup() -> Option<Cx> {
    Some(Cx::new(gpu()?, Rng::new()))
}

/// A test of one row of one op, with both index types.
macro_rules! row {
    ($name:ident, $op:ident, $x:ty => $y:ty) => {
        #[test]
        #[ignore = "needs a CUDA GPU"]
        fn $name() {
            let Some(mut cx) = setup() else { return };
            $op::<$x, $y, i32>(&mut cx);
            $op::<$x, $y, i64>(&mut cx);
        }
    };
}

row!(spmv_f16_into_f16_matches_the_reference, spmv_mixed, f16 => f16);
row!(spmv_f16_into_f32_matches_the_reference, spmv_mixed, f16 => f32);
row!(spmv_bf16_into_bf16_matches_the_reference, spmv_mixed, bf16 => bf16);
row!(spmv_bf16_into_f32_matches_the_reference, spmv_mixed, bf16 => f32);
row!(spmv_i8_into_i32_matches_the_reference, spmv_mixed, i8 => i32);
row!(spmv_i8_into_f32_matches_the_reference, spmv_mixed, i8 => f32);
row!(spmm_f16_into_f16_matches_the_reference, spmm_mixed, f16 => f16);
row!(spmm_f16_into_f32_matches_the_reference, spmm_mixed, f16 => f32);
row!(spmm_bf16_into_bf16_matches_the_reference, spmm_mixed, bf16 => bf16);
row!(spmm_bf16_into_f32_matches_the_reference, spmm_mixed, bf16 => f32);
row!(spmm_i8_into_i32_matches_the_reference, spmm_mixed, i8 => i32);
