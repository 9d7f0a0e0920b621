//! Unit tests of the graphs the ops build: the attention graphs' op patterns, as the fused
//! engines recognize them.

use super::builder::{Dt, GraphSpec, Op, Red, Uid};
use super::sdpa::{forward_graph, Sizes};
use super::sdpa_bwd::backward_graph;
use super::Attention;

fn kinds(g: &GraphSpec) -> Vec<String> {
    g.ops
        .iter()
        .map(|op| match op {
            Op::Matmul { .. } => "matmul".to_string(),
            Op::Pointwise { mode, .. } => format!("{mode:?}"),
            Op::Reduction { mode: Red::Max, .. } => "max".to_string(),
            Op::Reduction { mode: Red::Sum, .. } => "sum".to_string(),
            Op::Rng { .. } => "rng".to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn the_forward_graph_is_the_flash_engines_pattern() {
    let z = Sizes { b: 2, h: 4, h_kv: 2, s_q: 33, s_kv: 47, d: 64 };
    let st = [
        [4 * 33 * 64, 33 * 64, 64, 1],
        [2 * 47 * 64, 47 * 64, 64, 1],
        [2 * 47 * 64, 47 * 64, 64, 1],
        [4 * 33 * 64, 33 * 64, 64, 1],
    ];
    let (g, u) = forward_graph(&Attention::new().causal(true), &z, Dt::Bf16, st, true, false);
    assert_eq!(
        kinds(&g),
        [
            "matmul",
            "Mul",
            "GenIndex(2)",
            "GenIndex(3)",
            "CmpGe",
            "Select",
            "max",
            "Sub",
            "Exp",
            "sum",
            "Log",
            "Add",
            "Div",
            "matmul"
        ]
    );
    // Kᵀ is K's memory with the last two dims swapped.
    let k = g.tensors.iter().find(|t| t.uid == u.k).unwrap();
    assert_eq!((k.dims.clone(), k.strides.clone()), (vec![2, 2, 64, 47], vec![2 * 47 * 64, 47 * 64, 1, 64]));
    // In memory: q, k, v, o, the statistics; by value: the scale and the mask's value.
    let real: Vec<Uid> = g.tensors.iter().filter(|t| !t.virt && !t.by_value).map(|t| t.uid).collect();
    assert_eq!(real, [u.q, u.k, u.v, u.o, u.stats]);
    assert_eq!(g.tensors.iter().filter(|t| t.by_value).count(), 2);
    // The second matmul's A operand is in the I/O type.
    let Some(Op::Matmul { a, .. }) = g.ops.last() else { panic!("the last op is the second matmul") };
    assert_eq!(g.tensors.iter().find(|t| t.uid == *a).unwrap().dt, Dt::Bf16);
    // Without statistics requested they stay virtual; another graph, another key.
    let (g2, _) = forward_graph(&Attention::new().causal(true), &z, Dt::Bf16, st, false, false);
    assert_ne!(g, g2);
    assert!(g2.tensors.iter().find(|t| t.uid == u.stats).unwrap().virt);
}

#[test]
fn the_backward_graph_keeps_two_f32_tensors_in_the_workspace_and_sums_grouped_heads() {
    let z = Sizes { b: 2, h: 4, h_kv: 2, s_q: 33, s_kv: 47, d: 64 };
    let q = [4 * 33 * 64, 33 * 64, 64, 1];
    let k = [2 * 47 * 64, 47 * 64, 64, 1];
    let st = [q, k, k, q, q, q, k, k];
    let (g, u) = backward_graph(&Attention::new(), &z, Dt::F16, st, true, false);
    let scratch: Vec<&Vec<i64>> = g.tensors.iter().filter(|t| t.scratch).map(|t| &t.dims).collect();
    assert_eq!(scratch, [&vec![2, 4, 33, 1], &vec![2, 4, 33, 64]]);
    // Grouped heads: dK and dV are reductions of full-head gradients.
    let into = |uid: Uid| g.ops.iter().filter(|op| matches!(op, Op::Reduction { y, .. } if *y == uid)).count();
    assert_eq!((into(u.dk), into(u.dv)), (1, 1));
    // The workaround's sequence lengths are tensors of the graph, two of them.
    assert!(u.seq.is_some() && u.neg_inf.is_some());
}

#[test]
fn the_fp8_forward_graph_descales_scales_and_takes_both_amax() {
    let z = Sizes { b: 1, h: 2, h_kv: 2, s_q: 64, s_kv: 64, d: 64 };
    let p = [2 * 64 * 64, 64 * 64, 64, 1];
    let (g, u) = forward_graph(&Attention::new(), &z, Dt::Fp8E4m3, [p; 4], true, true);
    let kinds: Vec<String> = g
        .ops
        .iter()
        .map(|op| match op {
            Op::Reduction { mode, .. } => format!("{mode:?}"),
            other => kinds(&GraphSpec { tensors: Vec::new(), ops: vec![other.clone()] }).remove(0),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "matmul", "Mul", "Mul", "Mul", "Max", "Sub", "Exp", "Sum", "Log", "Add", "Div", "Amax", "Mul", "matmul",
            "Mul", "Mul", "Mul", "Amax"
        ]
    );
    let f = u.fp8.expect("the FP8 tensors");
    // The eight scaling tensors are f32 in memory; the probabilities reach the second matmul
    // in FP8, and O is FP8.
    for uid in f.all {
        let t = g.tensors.iter().find(|t| t.uid == uid).unwrap();
        assert!(!t.virt && !t.by_value && t.dt == Dt::F32 && t.dims == [1, 1, 1, 1]);
    }
    let second = g.ops.iter().filter_map(|op| if let Op::Matmul { a, .. } = op { Some(*a) } else { None }).nth(1);
    assert_eq!(g.tensors.iter().find(|t| Some(t.uid) == second).unwrap().dt, Dt::Fp8E4m3);
    assert_eq!(g.tensors.iter().find(|t| t.uid == u.o).unwrap().dt, Dt::Fp8E4m3);
}
