//! The operands of the cuDNN ops: a [`Shape`] (4-D or 5-D, channels first or last) and a
//! [`TensorView`] (a buffer seen with a shape), and the element types cuDNN takes here.

use crate::error::{Error, Result};
use crate::libs::dtype::{CudnnType, DataTypes};
use crate::libs::validate;
use crate::memory::{Element, GpuRef};

/// How a tensor's elements lie in memory. Dims are always given in logical order
/// (`N, C, [D,] H, W`); the layout says which is contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Channels first: NCHW (4-D), NCDHW (5-D); `W` contiguous.
    Nchw,
    /// Channels last: NHWC (4-D), NDHWC (5-D); `C` contiguous.
    Nhwc,
}

/// A packed 4-D or 5-D tensor shape: dims in logical order (`N, C, [D,] H, W`) and a layout.
/// A filter is described the same way: `K, C / groups, [T,] R, S`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: Vec<usize>,
    layout: Layout,
}

impl Shape {
    /// A shape of `dims` (4 or 5 of them, logical order) in `layout`; checked when an op uses
    /// it.
    pub fn new(layout: Layout, dims: &[usize]) -> Shape {
        Shape { dims: dims.to_vec(), layout }
    }

    /// `N x C x H x W`, channels first.
    pub fn nchw(n: usize, c: usize, h: usize, w: usize) -> Shape {
        Shape::new(Layout::Nchw, &[n, c, h, w])
    }

    /// `N x C x H x W` (logical order), stored channels last.
    pub fn nhwc(n: usize, c: usize, h: usize, w: usize) -> Shape {
        Shape::new(Layout::Nhwc, &[n, c, h, w])
    }

    /// `N x C x D x H x W`, channels first.
    pub fn ncdhw(n: usize, c: usize, d: usize, h: usize, w: usize) -> Shape {
        Shape::new(Layout::Nchw, &[n, c, d, h, w])
    }

    /// `N x C x D x H x W` (logical order), stored channels last.
    pub fn ndhwc(n: usize, c: usize, d: usize, h: usize, w: usize) -> Shape {
        Shape::new(Layout::Nhwc, &[n, c, d, h, w])
    }

    /// The dims, in logical order.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The spatial dims (`[D,] H, W`).
    pub fn spatial(&self) -> &[usize] {
        self.dims.get(2..).unwrap_or(&[])
    }

    /// Elements the shape holds, `None` on overflow.
    pub fn elements(&self) -> Option<usize> {
        self.dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }

    /// The strides in elements, in logical order. Only for shapes [`check`](Self::check)
    /// accepted (no overflow).
    pub(crate) fn strides(&self) -> Vec<usize> {
        let rank = self.dims.len();
        let mut strides = vec![0; rank];
        // The storage order of the logical dims, outermost first.
        let order: Vec<usize> = match self.layout {
            Layout::Nchw => (0..rank).collect(),
            Layout::Nhwc => std::iter::once(0).chain(2..rank).chain(std::iter::once(1)).collect(),
        };
        let mut acc = 1usize;
        for &i in order.iter().rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(self.dims[i]);
        }
        strides
    }

    /// The same elements as a 4-D shape in the same layout: a 5-D shape's depth and height
    /// merged (both layouts are packed, so the strides agree). For the ops that see every
    /// spatial position alike.
    pub(crate) fn as_4d(&self) -> Shape {
        match self.dims[..] {
            [n, c, d, h, w] => Shape::new(self.layout, &[n, c, d * h, w]),
            _ => self.clone(),
        }
    }

    /// Checks the shape as argument `arg`: 4 or 5 dims, each at least 1, the element count
    /// within cuDNN's 32-bit strides.
    pub(crate) fn check(&self, arg: &'static str) -> Result<usize> {
        if !(4..=5).contains(&self.dims.len()) {
            return Err(Error::invalid(arg, format!("has {} dims; cuDNN ops take 4 or 5", self.dims.len())));
        }
        for &d in &self.dims {
            validate::dim(arg, d, false)?;
        }
        let n = self.elements().filter(|&n| i32::try_from(n).is_ok()).ok_or_else(|| {
            Error::invalid(arg, format!("{:?} holds more elements than cuDNN's 32-bit strides reach", self.dims))
        })?;
        Ok(n)
    }
}

/// A buffer seen as a tensor of a [`Shape`]: the operand of every cuDNN op.
#[derive(Clone, Debug)]
pub struct TensorView<'a, T: Element> {
    pub(super) buf: &'a GpuRef<T>,
    pub(super) shape: Shape,
}

impl<'a, T: Element> TensorView<'a, T> {
    /// `buf` holding a packed tensor of `shape`.
    pub fn new(buf: &'a GpuRef<T>, shape: Shape) -> Self {
        TensorView { buf, shape }
    }

    /// The buffer.
    pub fn buf(&self) -> &'a GpuRef<T> {
        self.buf
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Checks the operand as argument `arg`: its shape, and a buffer that holds it.
    pub(super) fn check(&self, arg: &'static str) -> Result<()> {
        let n = self.shape.check(arg)?;
        let what = format!("a {:?} tensor of {:?}", self.shape.layout, self.shape.dims);
        validate::covers(arg, self.buf, Some(n), &what)
    }

    /// Checks the operand as argument `arg`, as [`check`](Self::check) does, and that it has
    /// `x`'s shape and layout.
    pub(super) fn check_like(&self, arg: &'static str, x: &TensorView<'_, T>) -> Result<()> {
        self.check(arg)?;
        if self.shape != x.shape {
            return Err(Error::invalid(
                arg,
                format!(
                    "is {:?} {:?}; it must be `x`'s {:?} {:?}",
                    self.shape.layout(),
                    self.shape.dims(),
                    x.shape.layout(),
                    x.shape.dims()
                ),
            ));
        }
        Ok(())
    }
}

/// The element types the cuDNN ops take: `f32`, `half::f16` and `half::bf16` (every tensor of
/// one op has the same type). The half types compute in f32.
pub trait DnnElement: Element + sealed::Sealed {}
impl DnnElement for f32 {}
impl DnnElement for half::f16 {}
impl DnnElement for half::bf16 {}

/// The seal, with the conversions the simulator computes through (out of users' reach: the
/// trait cannot be named outside the crate).
pub(crate) mod sealed {
    pub trait Sealed: Copy + Send + Sync + 'static {
        /// The value, exactly.
        fn to_f64(self) -> f64;
        /// `v` rounded to the nearest value of the type.
        fn from_f64(v: f64) -> Self;
    }
    impl Sealed for f32 {
        fn to_f64(self) -> f64 {
            f64::from(self)
        }
        fn from_f64(v: f64) -> Self {
            v as f32
        }
    }
    impl Sealed for half::f16 {
        fn to_f64(self) -> f64 {
            half::f16::to_f64(self)
        }
        fn from_f64(v: f64) -> Self {
            half::f16::from_f64(v)
        }
    }
    impl Sealed for half::bf16 {
        fn to_f64(self) -> f64 {
            half::bf16::to_f64(self)
        }
        fn from_f64(v: f64) -> Self {
            half::bf16::from_f64(v)
        }
    }
    // FP8 attention's elements (not cuDNN elements of every op: `DnnElement` stays unimplemented).
    impl Sealed for crate::memory::F8E4M3 {
        fn to_f64(self) -> f64 {
            f64::from(crate::libs::fp8::e4m3_to_f32(self.0))
        }
        fn from_f64(v: f64) -> Self {
            crate::memory::F8E4M3(crate::libs::fp8::e4m3_from_f32(v as f32))
        }
    }
    impl Sealed for crate::memory::F8E5M2 {
        fn to_f64(self) -> f64 {
            f64::from(crate::libs::fp8::e5m2_to_f32(self.0))
        }
        fn from_f64(v: f64) -> Self {
            crate::memory::F8E5M2(crate::libs::fp8::e5m2_from_f32(v as f32))
        }
    }
}

/// `T`'s entry in the data-type table's cuDNN column.
fn column<T: DataTypes>() -> CudnnType {
    const { crate::libs::dtype::required(T::CUDNN) }
}

/// `T`'s `cudnnDataType_t`.
pub(crate) fn dtype<T: DnnElement>() -> CudnnType {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    if t == TypeId::of::<half::f16>() {
        column::<half::f16>()
    } else if t == TypeId::of::<half::bf16>() {
        column::<half::bf16>()
    } else {
        column::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_follow_the_layout() {
        assert_eq!(Shape::nchw(2, 3, 4, 5).strides(), [60, 20, 5, 1]);
        assert_eq!(Shape::nhwc(2, 3, 4, 5).strides(), [60, 1, 15, 3]);
        assert_eq!(Shape::ncdhw(2, 3, 4, 5, 6).strides(), [360, 120, 30, 6, 1]);
        assert_eq!(Shape::ndhwc(2, 3, 4, 5, 6).strides(), [360, 1, 90, 18, 3]);
        // Merging depth into height keeps every element where it was.
        for s in [Shape::ncdhw(2, 3, 4, 5, 6), Shape::ndhwc(2, 3, 4, 5, 6)] {
            let (st5, st4) = (s.strides(), s.as_4d().strides());
            assert_eq!((st5[0], st5[1], st5[3], st5[4]), (st4[0], st4[1], st4[2], st4[3]), "{s:?}");
        }
    }

    #[test]
    fn shapes_are_checked() {
        assert!(Shape::new(Layout::Nchw, &[1, 2, 3]).check("x").is_err());
        assert!(Shape::nchw(1, 0, 3, 3).check("x").is_err());
        assert!(Shape::nchw(1 << 16, 1 << 16, 2, 1).check("x").is_err());
        assert_eq!(Shape::nchw(1, 2, 3, 3).check("x").unwrap(), 18);
    }
}
