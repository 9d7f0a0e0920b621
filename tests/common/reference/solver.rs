//! The f64 CPU references of the cuSOLVER tests, shared by the GPU suite and the simulator
//! suite: products, norms, scaled residuals and random test matrices (column-major).

use crate::common::{random, Rng};

/// Column-major `n x n` product `A B`.
pub fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for j in 0..n {
        for l in 0..k {
            let blj = b[l + j * k];
            for i in 0..m {
                c[i + j * m] += a[i + l * m] * blj;
            }
        }
    }
    c
}

pub fn transpose(a: &[f64], m: usize, n: usize) -> Vec<f64> {
    let mut t = vec![0.0; m * n];
    for j in 0..n {
        for i in 0..m {
            t[j + i * n] = a[i + j * m];
        }
    }
    t
}

pub fn fro(a: &[f64]) -> f64 {
    a.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// ‖X − Y‖ / (‖Y‖ · size · ε): below a few tens for a backward-stable algorithm.
pub fn scaled(x: &[f64], y: &[f64], size: usize) -> f64 {
    scaled_eps(x, y, size, f64::EPSILON)
}

/// [`scaled`] in units of `eps`, the precision the GPU computed in.
pub fn scaled_eps(x: &[f64], y: &[f64], size: usize, eps: f64) -> f64 {
    let d: Vec<f64> = x.iter().zip(y).map(|(a, b)| a - b).collect();
    fro(&d) / (fro(y).max(1.0) * size as f64 * eps)
}

/// A random symmetric positive definite matrix: `M Mᵀ + n I`.
pub fn spd(rng: &mut Rng, n: usize) -> Vec<f64> {
    let m = random(rng, n * n);
    let mut a = matmul(&m, &transpose(&m, n, n), n, n, n);
    for i in 0..n {
        a[i + i * n] += n as f64;
    }
    a
}

pub fn symmetric(rng: &mut Rng, n: usize) -> Vec<f64> {
    let m = random(rng, n * n);
    (0..n * n).map(|k| (m[k] + m[(k % n) * n + k / n]) / 2.0).collect()
}

pub fn identity(n: usize) -> Vec<f64> {
    let mut eye = vec![0.0; n * n];
    for i in 0..n {
        eye[i + i * n] = 1.0;
    }
    eye
}

/// `max_k ‖A v_k − λ_k B v_k‖` over the columns, scaled by `‖A‖ n ε` (`b` `None`: the identity).
pub fn eigen_residual(a: &[f64], b: Option<&[f64]>, v: &[f64], w: &[f64], n: usize) -> f64 {
    let av = matmul(a, v, n, n, n);
    let bv = match b {
        Some(b) => matmul(b, v, n, n, n),
        None => v.to_vec(),
    };
    let d: Vec<f64> = (0..n * n).map(|k| av[k] - bv[k] * w[k / n]).collect();
    fro(&d) / (fro(a).max(1.0) * n as f64 * f64::EPSILON)
}

/// `‖Qᴴ Q − I‖ / (cols · ε)` for the `rows x cols` `q`: orthonormal columns stay below a few tens.
pub fn orthonormality(q: &[f64], rows: usize, cols: usize, eps: f64) -> f64 {
    let qtq = matmul(&transpose(q, rows, cols), q, cols, rows, cols);
    let eye = identity(cols);
    let d: Vec<f64> = qtq.iter().zip(&eye).map(|(a, b)| a - b).collect();
    fro(&d) / (cols as f64 * eps)
}

/// The singular values of the `m x n` `a`, descending: the square roots of the eigenvalues of
/// `Aᵀ A` by a plain cyclic Jacobi, independent of the libraries under test.
pub fn singular_values_of(a: &[f64], m: usize, n: usize) -> Vec<f64> {
    let mut g = matmul(&transpose(a, m, n), a, n, m, n);
    for _ in 0..60 {
        let mut off = 0.0;
        for p in 0..n {
            for q in p + 1..n {
                let apq = g[p + q * n];
                off += apq * apq;
                if apq == 0.0 {
                    continue;
                }
                let theta = (g[q + q * n] - g[p + p * n]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (x, y) = (g[k + p * n], g[k + q * n]);
                    g[k + p * n] = c * x - s * y;
                    g[k + q * n] = s * x + c * y;
                }
                for k in 0..n {
                    let (x, y) = (g[p + k * n], g[q + k * n]);
                    g[p + k * n] = c * x - s * y;
                    g[q + k * n] = s * x + c * y;
                }
            }
        }
        if off == 0.0 {
            break;
        }
    }
    let mut s: Vec<f64> = (0..n).map(|i| g[i + i * n].max(0.0).sqrt()).collect();
    s.sort_by(|x, y| y.total_cmp(x));
    s
}

/// `A x` for the `n x n` `a`.
pub fn matvec(a: &[f64], x: &[f64], n: usize) -> Vec<f64> {
    matmul(a, x, n, n, 1)
}

/// A complex eigenvalue and its eigenvector, as `(re, im)` pairs.
pub type Eigenpair = ((f64, f64), Vec<(f64, f64)>);

/// The eigenpairs `(λ_j, v_j)` of a real matrix from `geev`'s real layout: `w` holds the `n`
/// real parts then the `n` imaginary parts, and a conjugate pair at `j`, `j + 1` (positive
/// imaginary part first) has the eigenvectors `VR(:,j) ± i VR(:,j+1)`. `None` when a pair is
/// malformed.
pub fn real_geev_pairs(w: &[f64], vr: &[f64], n: usize) -> Option<Vec<Eigenpair>> {
    let mut out = Vec::with_capacity(n);
    let mut j = 0;
    while j < n {
        let (re, im) = (w[j], w[n + j]);
        if im == 0.0 {
            out.push(((re, 0.0), (0..n).map(|r| (vr[r + j * n], 0.0)).collect()));
            j += 1;
            continue;
        }
        if im < 0.0 || j + 1 >= n || w[j + 1] != re || w[n + j + 1] != -im {
            return None;
        }
        let v: Vec<(f64, f64)> = (0..n).map(|r| (vr[r + j * n], vr[r + (j + 1) * n])).collect();
        out.push(((re, im), v.clone()));
        out.push(((re, -im), v.iter().map(|&(a, b)| (a, -b)).collect()));
        j += 2;
    }
    Some(out)
}

/// `max_j ‖A v_j − λ_j v_j‖ / (‖A‖_F n eps)` over complex eigenpairs of the complex `n x n`
/// `a` (given as `(re, im)` pairs, column-major).
pub fn general_eigen_residual(a: &[(f64, f64)], pairs: &[Eigenpair], n: usize, eps: f64) -> f64 {
    let norm = a.iter().map(|&(x, y)| x * x + y * y).sum::<f64>().sqrt().max(1.0);
    let mut worst = 0.0f64;
    for ((lr, li), v) in pairs {
        let mut d = 0.0;
        for i in 0..n {
            let (mut sr, mut si) = (0.0, 0.0);
            for (k, &(vr, vi)) in v.iter().enumerate() {
                let (ar, ai) = a[i + k * n];
                sr += ar * vr - ai * vi;
                si += ar * vi + ai * vr;
            }
            let (vr, vi) = v[i];
            sr -= lr * vr - li * vi;
            si -= lr * vi + li * vr;
            d += sr * sr + si * si;
        }
        worst = worst.max(d.sqrt());
    }
    worst / (norm * n as f64 * eps)
}
