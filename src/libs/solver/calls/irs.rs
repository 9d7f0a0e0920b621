//! The iterative-refinement solvers `cusolverDn<t1><t2>gesv` and `cusolverDn<t1><t2>gels`:
//! `t1` the element type, `t2` the lowest precision the factorization runs in. One macro names
//! the eighteen pairs cuSOLVER has, once, for the four calls.
#![allow(clippy::too_many_arguments)]

use super::Handle;
use crate::error::Result;
use crate::libs::Status;
use cudarc::cusolver::sys;
use std::ffi::{c_int as I, c_void};

type V = *mut c_void;

// The wrappers below share one contract.
//
// # Safety (of every wrapper below)
// (1) `h` is a live handle bound to the current context, used by this thread only; (2) every
// device pointer is a live buffer of the current context of the pair's element type, holding
// the shape the arguments describe (validated by the caller) and fenced on the handle's
// stream; (3) the workspace holds the bytes the query returned for these arguments and stays
// alive until the call's work finished; (4) `iter` is host memory for one `int` and `info`
// device-writable memory for one `int`, both alive until the call's work finished. The queries
// read no buffer. The casts change only the pointee type, to one of the same layout.

macro_rules! irs {
    ($($pair:ident: $gesv_size:ident, $gesv:ident, $gels_size:ident, $gels:ident;)*) => {
        /// An element type and lowest precision pair cuSOLVER has an IRS solver for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(in crate::libs::solver) enum Pair {
            $($pair,)*
        }

        /// `cusolverDn<t1><t2>gesv_bufferSize`: the workspace bytes.
        pub(in crate::libs::solver) unsafe fn gesv_size(
            p: Pair, h: Handle, n: I, nrhs: I, (a, lda): (V, I), ipiv: *mut I, (b, ldb): (V, I), (x, ldx): (V, I),
        ) -> Result<usize> {
            let mut bytes = 0usize;
            // SAFETY: the contract above.
            let status = match p {
                $(Pair::$pair => unsafe {
                    sys::$gesv_size(h, n, nrhs, a as _, lda, ipiv, b as _, ldb, x as _, ldx, std::ptr::null_mut(), &mut bytes)
                },)*
            };
            status.check("cusolverDn<t1><t2>gesv_bufferSize")?;
            Ok(bytes)
        }

        /// `cusolverDn<t1><t2>gesv`.
        pub(in crate::libs::solver) unsafe fn gesv(
            p: Pair, h: Handle, n: I, nrhs: I, (a, lda): (V, I), ipiv: *mut I, (b, ldb): (V, I), (x, ldx): (V, I),
            (work, bytes): (V, usize), iter: *mut I, info: *mut I,
        ) -> Result<()> {
            // SAFETY: the contract above.
            let status = match p {
                $(Pair::$pair => unsafe {
                    sys::$gesv(h, n, nrhs, a as _, lda, ipiv, b as _, ldb, x as _, ldx, work, bytes, iter, info)
                },)*
            };
            status.check("cusolverDn<t1><t2>gesv")
        }

        /// `cusolverDn<t1><t2>gels_bufferSize`: the workspace bytes.
        pub(in crate::libs::solver) unsafe fn gels_size(
            p: Pair, h: Handle, m: I, n: I, nrhs: I, (a, lda): (V, I), (b, ldb): (V, I), (x, ldx): (V, I),
        ) -> Result<usize> {
            let mut bytes = 0usize;
            // SAFETY: the contract above.
            let status = match p {
                $(Pair::$pair => unsafe {
                    sys::$gels_size(h, m, n, nrhs, a as _, lda, b as _, ldb, x as _, ldx, std::ptr::null_mut(), &mut bytes)
                },)*
            };
            status.check("cusolverDn<t1><t2>gels_bufferSize")?;
            Ok(bytes)
        }

        /// `cusolverDn<t1><t2>gels`.
        pub(in crate::libs::solver) unsafe fn gels(
            p: Pair, h: Handle, m: I, n: I, nrhs: I, (a, lda): (V, I), (b, ldb): (V, I), (x, ldx): (V, I),
            (work, bytes): (V, usize), iter: *mut I, info: *mut I,
        ) -> Result<()> {
            // SAFETY: the contract above.
            let status = match p {
                $(Pair::$pair => unsafe {
                    sys::$gels(h, m, n, nrhs, a as _, lda, b as _, ldb, x as _, ldx, work, bytes, iter, info)
                },)*
            };
            status.check("cusolverDn<t1><t2>gels")
        }
    };
}

irs! {
    DD: cusolverDnDDgesv_bufferSize, cusolverDnDDgesv, cusolverDnDDgels_bufferSize, cusolverDnDDgels;
    DS: cusolverDnDSgesv_bufferSize, cusolverDnDSgesv, cusolverDnDSgels_bufferSize, cusolverDnDSgels;
    DH: cusolverDnDHgesv_bufferSize, cusolverDnDHgesv, cusolverDnDHgels_bufferSize, cusolverDnDHgels;
    DB: cusolverDnDBgesv_bufferSize, cusolverDnDBgesv, cusolverDnDBgels_bufferSize, cusolverDnDBgels;
    DX: cusolverDnDXgesv_bufferSize, cusolverDnDXgesv, cusolverDnDXgels_bufferSize, cusolverDnDXgels;
    SS: cusolverDnSSgesv_bufferSize, cusolverDnSSgesv, cusolverDnSSgels_bufferSize, cusolverDnSSgels;
    SH: cusolverDnSHgesv_bufferSize, cusolverDnSHgesv, cusolverDnSHgels_bufferSize, cusolverDnSHgels;
    SB: cusolverDnSBgesv_bufferSize, cusolverDnSBgesv, cusolverDnSBgels_bufferSize, cusolverDnSBgels;
    SX: cusolverDnSXgesv_bufferSize, cusolverDnSXgesv, cusolverDnSXgels_bufferSize, cusolverDnSXgels;
    ZZ: cusolverDnZZgesv_bufferSize, cusolverDnZZgesv, cusolverDnZZgels_bufferSize, cusolverDnZZgels;
    ZC: cusolverDnZCgesv_bufferSize, cusolverDnZCgesv, cusolverDnZCgels_bufferSize, cusolverDnZCgels;
    ZK: cusolverDnZKgesv_bufferSize, cusolverDnZKgesv, cusolverDnZKgels_bufferSize, cusolverDnZKgels;
    ZE: cusolverDnZEgesv_bufferSize, cusolverDnZEgesv, cusolverDnZEgels_bufferSize, cusolverDnZEgels;
    ZY: cusolverDnZYgesv_bufferSize, cusolverDnZYgesv, cusolverDnZYgels_bufferSize, cusolverDnZYgels;
    CC: cusolverDnCCgesv_bufferSize, cusolverDnCCgesv, cusolverDnCCgels_bufferSize, cusolverDnCCgels;
    CK: cusolverDnCKgesv_bufferSize, cusolverDnCKgesv, cusolverDnCKgels_bufferSize, cusolverDnCKgels;
    CE: cusolverDnCEgesv_bufferSize, cusolverDnCEgesv, cusolverDnCEgels_bufferSize, cusolverDnCEgels;
    CY: cusolverDnCYgesv_bufferSize, cusolverDnCYgesv, cusolverDnCYgels_bufferSize, cusolverDnCYgels;
}
