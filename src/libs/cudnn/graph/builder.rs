//! A typed operation graph ([`GraphSpec`]): tensors (unique id, dims, strides, type, virtual
//! or by value) and the operations between them, as plain data. It is the plan cache's key
//! (it holds every shape, stride, type and flag the plan depends on), and [`GraphSpec::plan`]
//! turns it into backend descriptors, an operation graph, engine configurations from
//! heuristics (mode A, the next candidate tried when one does not finalize) and an execution
//! plan.

use cudarc::cudnn::sys;

/// A tensor's unique id in its graph.
pub(crate) type Uid = i64;

/// The element types of graph tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dt {
    F16,
    Bf16,
    F32,
    I32,
    I64,
    Bool,
    Fp8E4m3,
    Fp8E5m2,
}

impl Dt {
    pub(super) fn raw(self) -> sys::cudnnDataType_t {
        use sys::cudnnDataType_t as D;
        match self {
            Dt::F16 => D::CUDNN_DATA_HALF,
            Dt::Bf16 => D::CUDNN_DATA_BFLOAT16,
            Dt::F32 => D::CUDNN_DATA_FLOAT,
            Dt::I32 => D::CUDNN_DATA_INT32,
            Dt::I64 => D::CUDNN_DATA_INT64,
            Dt::Bool => D::CUDNN_DATA_BOOLEAN,
            Dt::Fp8E4m3 => D::CUDNN_DATA_FP8_E4M3,
            Dt::Fp8E5m2 => D::CUDNN_DATA_FP8_E5M2,
        }
    }
}

/// One tensor of a graph.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TensorSpec {
    pub uid: Uid,
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
    pub dt: Dt,
    /// An intermediate that never reaches memory.
    pub virt: bool,
    /// A scalar passed by value from the host at execution.
    pub by_value: bool,
    /// An f32 intermediate the engine needs in memory: placed in the workspace, after
    /// cuDNN's own part.
    pub scratch: bool,
}

/// The pointwise modes the graphs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pw {
    Add,
    Sub,
    Mul,
    Div,
    Exp,
    Log,
    Identity,
    Relu,
    Gelu,
    GeluTanh,
    CmpLt,
    CmpGe,
    And,
    /// `y = t ? x : b`.
    Select,
    /// `y` = the index along `axis` of each element of `x`'s shape.
    GenIndex(i64),
}

impl Pw {
    pub(super) fn raw(self) -> sys::cudnnPointwiseMode_t {
        use sys::cudnnPointwiseMode_t as M;
        match self {
            Pw::Add => M::CUDNN_POINTWISE_ADD,
            Pw::Sub => M::CUDNN_POINTWISE_SUB,
            Pw::Mul => M::CUDNN_POINTWISE_MUL,
            Pw::Div => M::CUDNN_POINTWISE_DIV,
            Pw::Exp => M::CUDNN_POINTWISE_EXP,
            Pw::Log => M::CUDNN_POINTWISE_LOG,
            Pw::Identity => M::CUDNN_POINTWISE_IDENTITY,
            Pw::Relu => M::CUDNN_POINTWISE_RELU_FWD,
            Pw::Gelu => M::CUDNN_POINTWISE_GELU_FWD,
            Pw::GeluTanh => M::CUDNN_POINTWISE_GELU_APPROX_TANH_FWD,
            Pw::CmpLt => M::CUDNN_POINTWISE_CMP_LT,
            Pw::CmpGe => M::CUDNN_POINTWISE_CMP_GE,
            Pw::And => M::CUDNN_POINTWISE_LOGICAL_AND,
            Pw::Select => M::CUDNN_POINTWISE_BINARY_SELECT,
            Pw::GenIndex(_) => M::CUDNN_POINTWISE_GEN_INDEX,
        }
    }
}

/// The reductions the graphs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Red {
    Max,
    Sum,
    /// The largest absolute value.
    Amax,
}

/// The backend's norm modes the graphs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NormMode {
    Layer,
    Rms,
    Instance,
}

/// One operation of a graph; its operands are tensor ids.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    /// `c = a · b` over the last two dims (batch dims broadcast), computed in f32; the
    /// overrides are `[B,1,1,1]` i32 tensors bounding `m` and `n` per batch.
    Matmul { a: Uid, b: Uid, c: Uid, m_override: Option<Uid>, n_override: Option<Uid>, k_override: Option<Uid> },
    /// `y = mode(x[, b][, t])`, computed in `prec`.
    Pointwise { mode: Pw, x: Uid, b: Option<Uid>, t: Option<Uid>, y: Uid, prec: Dt },
    /// `y` = `x` reduced to `y`'s shape, in f32.
    Reduction { mode: Red, x: Uid, y: Uid },
    /// `y` = Bernoulli draws of probability `keep` from the `[1,1,1,1]` i64 `seed` and `offset`.
    Rng { seed: Uid, offset: Uid, y: Uid, keep: f64 },
    /// `y` = `x`'s elements seen with `y`'s dims and strides.
    Reshape { x: Uid, y: Uid },
    /// A norm forward (layer and RMS over all but the first dim, instance over the spatial
    /// dims): training writes the statistics.
    NormFwd {
        mode: NormMode,
        training: bool,
        x: Uid,
        scale: Uid,
        bias: Option<Uid>,
        eps: Uid,
        y: Uid,
        mean: Option<Uid>,
        inv_var: Option<Uid>,
    },
    /// A norm backward from the saved statistics.
    NormBwd {
        mode: NormMode,
        /// Instance norm's backward takes the epsilon too.
        eps: Option<Uid>,
        x: Uid,
        dy: Uid,
        scale: Uid,
        mean: Option<Uid>,
        inv_var: Uid,
        dx: Uid,
        dscale: Uid,
        dbias: Option<Uid>,
    },
}

/// A graph: its tensors and its operations in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GraphSpec {
    pub tensors: Vec<TensorSpec>,
    pub ops: Vec<Op>,
}

/// Packed strides of `dims`, last dim contiguous.
pub(crate) fn packed(dims: &[i64]) -> Vec<i64> {
    let mut st = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * dims[i + 1];
    }
    st
}

impl GraphSpec {
    fn add(&mut self, dims: &[i64], strides: &[i64], dt: Dt, virt: bool, by_value: bool) -> Uid {
        let uid = self.tensors.len() as Uid + 1;
        self.tensors.push(TensorSpec {
            uid,
            dims: dims.to_vec(),
            strides: strides.to_vec(),
            dt,
            virt,
            by_value,
            scratch: false,
        });
        uid
    }

    /// A tensor in device memory.
    pub(crate) fn tensor(&mut self, dims: &[i64], strides: &[i64], dt: Dt) -> Uid {
        self.add(dims, strides, dt, false, false)
    }

    /// A packed intermediate.
    pub(crate) fn virt(&mut self, dims: &[i64], dt: Dt) -> Uid {
        self.add(dims, &packed(dims), dt, true, false)
    }

    /// A scalar passed by value.
    pub(crate) fn scalar(&mut self, dt: Dt) -> Uid {
        self.add(&[1, 1, 1, 1], &[1, 1, 1, 1], dt, false, true)
    }

    /// Turns an intermediate into a tensor in memory of `dt` (packed), for an output the caller
    /// asked for.
    pub(crate) fn materialize(&mut self, uid: Uid, dt: Dt) {
        if let Some(t) = self.tensors.iter_mut().find(|t| t.uid == uid) {
            t.virt = false;
            t.dt = dt;
        }
    }

    /// A packed f32 intermediate kept in the workspace.
    pub(crate) fn scratch(&mut self, dims: &[i64]) -> Uid {
        let uid = self.add(dims, &packed(dims), Dt::F32, false, false);
        if let Some(t) = self.tensors.last_mut() {
            t.scratch = true;
        }
        uid
    }

    /// A virtual view of `x` with other dims and strides (type `dt`).
    pub(crate) fn reshape(&mut self, x: Uid, dims: &[i64], strides: &[i64], dt: Dt) -> Uid {
        let y = self.add(dims, strides, dt, true, false);
        self.ops.push(Op::Reshape { x, y });
        y
    }

    /// Sets an intermediate's type.
    pub(crate) fn retype(&mut self, uid: Uid, dt: Dt) {
        if let Some(t) = self.tensors.iter_mut().find(|t| t.uid == uid) {
            t.dt = dt;
        }
    }

    /// `y = mode(x[, b][, t])` into a new intermediate of `dims` and type `out`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn pw(
        &mut self,
        mode: Pw,
        x: Uid,
        b: Option<Uid>,
        t: Option<Uid>,
        dims: &[i64],
        out: Dt,
        prec: Dt,
    ) -> Uid {
        let y = self.virt(dims, out);
        self.ops.push(Op::Pointwise { mode, x, b, t, y, prec });
        y
    }
}
