//! The simulator's arithmetic: reductions of each element type as NCCL computes them (floats
//! in their own precision, rounded at each step; integers wrapping), folded in rank order.

use super::ReduceOp;

/// The host arithmetic of a collective's element type. Sealed: only the [`super::NcclType`]
/// types implement it.
pub trait Arith: Copy + Send + Sync + 'static {
    #[doc(hidden)]
    fn combine(a: Self, b: Self, op: ReduceOp) -> Self;
    #[doc(hidden)]
    fn premul(a: Self, scalar: f64) -> Self;
    #[doc(hidden)]
    fn divide(a: Self, n: usize) -> Self;
    /// `scalar` as this type, its bytes little-endian, for a PreMulSum op.
    #[doc(hidden)]
    fn scalar_bytes(scalar: f64) -> [u8; 8];
}

/// `bytes` at the start of eight.
fn padded(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

macro_rules! float_arith {
    ($($t:ty: $to:expr, $from:expr;)*) => {$(
        impl Arith for $t {
            fn combine(a: Self, b: Self, op: ReduceOp) -> Self {
                let (x, y): (f64, f64) = ($to(a), $to(b));
                $from(match op {
                    ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum(_) => x + y,
                    ReduceOp::Prod => x * y,
                    ReduceOp::Max => x.max(y),
                    ReduceOp::Min => x.min(y),
                })
            }
            fn premul(a: Self, scalar: f64) -> Self {
                let s: f64 = $to($from(scalar));
                $from($to(a) * s)
            }
            fn divide(a: Self, n: usize) -> Self {
                $from($to(a) / n as f64)
            }
            fn scalar_bytes(scalar: f64) -> [u8; 8] {
                let v: $t = $from(scalar);
                padded(&v.to_le_bytes())
            }
        }
    )*};
}

float_arith! {
    f32: f64::from, |v: f64| v as f32;
    f64: |v: f64| v, |v: f64| v;
    half::f16: |v: half::f16| v.to_f64(), half::f16::from_f64;
    half::bf16: |v: half::bf16| v.to_f64(), half::bf16::from_f64;
}

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn combine(a: Self, b: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum(_) => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
            fn premul(a: Self, scalar: f64) -> Self {
                a.wrapping_mul(scalar as $t)
            }
            fn divide(a: Self, n: usize) -> Self {
                // `n` is a rank count, which fits the type's range for every communicator
                // NCCL can make; a larger one leaves the sum as it is rather than wrap.
                match <$t>::try_from(n) {
                    Ok(n) if n != 0 => a / n,
                    _ => a,
                }
            }
            fn scalar_bytes(scalar: f64) -> [u8; 8] {
                padded(&(scalar as $t).to_le_bytes())
            }
        }
    )*};
}

int_arith!(u8, i32);

/// Reduces the ranks' values elementwise (every slice of one length), in rank order.
pub(super) fn reduce<T: Arith>(inputs: &[&[T]], op: ReduceOp) -> Vec<T> {
    let Some((first, rest)) = inputs.split_first() else { return Vec::new() };
    let mut out: Vec<T> = match op {
        ReduceOp::PreMulSum(s) => first.iter().map(|&v| T::premul(v, s)).collect(),
        _ => first.to_vec(),
    };
    for input in rest {
        for (o, &v) in out.iter_mut().zip(input.iter()) {
            let v = match op {
                ReduceOp::PreMulSum(s) => T::premul(v, s),
                _ => v,
            };
            *o = T::combine(*o, v, op);
        }
    }
    if op == ReduceOp::Avg {
        for o in &mut out {
            *o = T::divide(*o, inputs.len());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_sums_wrap_and_avg_divides() {
        let (a, b) = ([250u8, 1], [10u8, 2]);
        assert_eq!(reduce(&[&a, &b], ReduceOp::Sum), [4, 3]);
        assert_eq!(reduce(&[&[7i32][..], &[2][..]], ReduceOp::Avg), [4]);
        assert_eq!(reduce(&[&[1.5f32][..], &[2.5][..]], ReduceOp::PreMulSum(2.0)), [8.0]);
        assert_eq!(reduce(&[&[3.0f64][..], &[-1.0][..]], ReduceOp::Min), [-1.0]);
    }
}
