//! Einstein notation and operand layouts: the checks every cuTENSOR op runs before it records
//! anything. Pure functions of the op's description, so they are tested without a GPU.
//!
//! A spec names each operand's modes with one character per mode, operands separated by `,`
//! and the output after `->`: `"bhqd,bhkd->bhqk"`. The same character in two operands is the
//! same mode, and must have the same extent in both.

use crate::error::{Error, Result};

/// The arguments ops name in their errors, operand by operand (the spec's order).
pub(super) type Args = &'static [&'static str];

/// A parsed spec: each input operand's modes and the output's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Spec {
    pub inputs: Vec<Vec<char>>,
    pub output: Vec<char>,
}

/// Parses `spec` for an op of `inputs` input operands (`args` names them, then the output).
pub(super) fn parse(spec: &str, inputs: usize, args: Args) -> Result<Spec> {
    let (lhs, rhs) = spec
        .split_once("->")
        .ok_or_else(|| Error::invalid("spec", format!("{spec:?} has no `->` before the output's modes")))?;
    let ins: Vec<&str> = lhs.split(',').collect();
    if ins.len() != inputs {
        return Err(Error::invalid(
            "spec",
            format!("{spec:?} names {} input operands; this op takes {inputs}", ins.len()),
        ));
    }
    let modes = |arg: &'static str, s: &str| -> Result<Vec<char>> {
        let m: Vec<char> = s.trim().chars().collect();
        for (i, c) in m.iter().enumerate() {
            if !c.is_alphanumeric() {
                return Err(Error::invalid("spec", format!("{c:?} in `{arg}`'s modes is not a letter or digit")));
            }
            if m[..i].contains(c) {
                return Err(Error::invalid(
                    "spec",
                    format!("mode {c:?} appears twice in `{arg}` (diagonals and traces are not supported)"),
                ));
            }
        }
        Ok(m)
    };
    let inputs = ins.iter().zip(args).map(|(s, arg)| modes(arg, s)).collect::<Result<Vec<_>>>()?;
    Ok(Spec { inputs, output: modes(args[args.len() - 1], rhs)? })
}

/// A mode label as cuTENSOR's `int32_t`.
pub(super) fn label(c: char) -> i32 {
    c as i32
}

/// One operand's checked layout, in the spec's mode order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Layout {
    pub modes: Vec<i32>,
    pub extents: Vec<i64>,
    pub strides: Vec<i64>,
    /// Elements the layout spans from the buffer's start.
    pub span: usize,
}

/// Row-major packed strides: the last mode is contiguous.
pub(super) fn packed(extents: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; extents.len()];
    for i in (0..extents.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(extents[i + 1]);
    }
    strides
}

/// Checks operand `arg` with modes `modes`, `extents` and `strides` (`None`: packed) against a
/// buffer of `len` elements.
pub(super) fn layout(
    arg: &'static str,
    modes: &[char],
    extents: &[usize],
    strides: Option<&[usize]>,
    len: usize,
) -> Result<Layout> {
    if extents.len() != modes.len() {
        return Err(Error::invalid(
            arg,
            format!("has {} extents, but its modes {:?} are {}", extents.len(), String::from_iter(modes), modes.len()),
        ));
    }
    let strides = match strides {
        Some(s) if s.len() != extents.len() => {
            return Err(Error::invalid(arg, format!("has {} strides for {} extents", s.len(), extents.len())));
        }
        Some(s) => s.to_vec(),
        None => packed(extents),
    };
    let to64 = |what: &str, v: usize| {
        i64::try_from(v).map_err(|_| Error::invalid(arg, format!("{what} {v} does not fit cuTENSOR's int64")))
    };
    let mut span = 1usize;
    for (&e, &s) in extents.iter().zip(&strides) {
        if e == 0 {
            return Err(Error::invalid(arg, "every extent must be at least 1"));
        }
        span = (e - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(span))
            .ok_or_else(|| Error::invalid(arg, "its extents and strides overflow usize"))?;
    }
    if len < span {
        return Err(Error::invalid(
            arg,
            format!(
                "holds {len} elements, but extents {extents:?} with strides {strides:?} reach element {}",
                span - 1
            ),
        ));
    }
    Ok(Layout {
        modes: modes.iter().map(|&c| label(c)).collect(),
        extents: extents.iter().map(|&e| to64("extent", e)).collect::<Result<_>>()?,
        strides: strides.iter().map(|&s| to64("stride", s)).collect::<Result<_>>()?,
        span,
    })
}

/// Checks that an output's strides give every index its own element: the modes of extent
/// above 1, in increasing stride, each step past the whole of the modes below it. (Some exotic
/// layouts that do not overlap fail this too; cuTENSOR would not take most of them either.)
pub(super) fn no_self_overlap(arg: &'static str, l: &Layout) -> Result<()> {
    let mut dims: Vec<(i64, i64, i32)> = l
        .strides
        .iter()
        .zip(&l.extents)
        .zip(&l.modes)
        .filter(|((_, &e), _)| e > 1)
        .map(|((&s, &e), &m)| (s, e, m))
        .collect();
    dims.sort_unstable();
    let mut reach = 1i64;
    for &(stride, extent, mode) in &dims {
        if stride < reach {
            let c = char::from_u32(mode as u32).unwrap_or('?');
            return Err(Error::invalid(
                arg,
                format!(
                    "its strides {:?} write several elements of the output to one place (mode {c:?} has stride \
                     {stride}, below {reach}, the span of the modes of smaller stride)",
                    l.strides
                ),
            ));
        }
        reach = stride.saturating_mul(extent);
    }
    Ok(())
}

/// Checks that every mode has one extent across `operands` (name, modes, layout).
pub(super) fn extents_agree(operands: &[(&'static str, &Layout)]) -> Result<()> {
    for (i, (arg, l)) in operands.iter().enumerate() {
        for (m, e) in l.modes.iter().zip(&l.extents) {
            for (first, earlier) in &operands[..i] {
                if let Some(j) = earlier.modes.iter().position(|x| x == m) {
                    if earlier.extents[j] != *e {
                        let c = char::from_u32(*m as u32).unwrap_or('?');
                        return Err(Error::invalid(
                            arg,
                            format!("mode {c:?} has extent {e} here but {} in `{first}`", earlier.extents[j]),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Checks that every mode of `sub` (operand `arg`) is one of `of`'s (operand `of_arg`).
pub(super) fn subset(arg: &'static str, sub: &[char], of_arg: &str, of: &[char]) -> Result<()> {
    match sub.iter().find(|c| !of.contains(c)) {
        Some(c) => Err(Error::invalid("spec", format!("mode {c:?} of `{arg}` is not a mode of `{of_arg}`"))),
        None => Ok(()),
    }
}

/// A contraction's modes: each appears in at least two of `a`, `b` and `d` (in all three: a
/// batch mode; in `a` and `b` only: summed).
pub(super) fn contraction(spec: &Spec) -> Result<()> {
    let (a, b, d) = (&spec.inputs[0], &spec.inputs[1], &spec.output);
    for (arg, modes) in [("a", a), ("b", b), ("d", d)] {
        for c in modes {
            let seen = [a, b, d].iter().filter(|m| m.contains(c)).count();
            if seen < 2 {
                return Err(Error::invalid(
                    "spec",
                    format!(
                        "mode {c:?} appears only in `{arg}`; a contraction's modes appear in two operands or all three"
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARGS: Args = &["a", "b", "d"];

    fn arg_of(e: Error) -> &'static str {
        match e {
            Error::InvalidArgument { arg, .. } => arg,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn specs_parse_and_bad_ones_name_the_spec() {
        let s = parse("bhqd,bhkd->bhqk", 2, ARGS).unwrap();
        assert_eq!(s.inputs, [vec!['b', 'h', 'q', 'd'], vec!['b', 'h', 'k', 'd']]);
        assert_eq!(s.output, ['b', 'h', 'q', 'k']);
        contraction(&s).unwrap();
        for bad in ["ab,bc", "ab->ab", "aab,bc->ac", "a-b,bc->ac", "ab,bc->acc"] {
            assert_eq!(arg_of(parse(bad, 2, ARGS).unwrap_err()), "spec", "{bad}");
        }
        let lone = parse("abx,bc->ac", 2, ARGS).unwrap();
        assert_eq!(arg_of(contraction(&lone).unwrap_err()), "spec");
    }

    #[test]
    fn layouts_check_extents_strides_and_the_buffer() {
        let l = layout("a", &['i', 'j'], &[3, 4], None, 12).unwrap();
        assert_eq!((l.strides.as_slice(), l.span), (&[4i64, 1][..], 12));
        assert_eq!(arg_of(layout("a", &['i', 'j'], &[3, 4], None, 11).unwrap_err()), "a");
        assert_eq!(arg_of(layout("a", &['i'], &[3, 4], None, 12).unwrap_err()), "a");
        assert_eq!(arg_of(layout("a", &['i', 'j'], &[3, 0], None, 12).unwrap_err()), "a");
        assert_eq!(arg_of(layout("a", &['i', 'j'], &[3, 4], Some(&[1]), 12).unwrap_err()), "a");
        // Column-major is fine for an output; a stride that folds two rows onto one is not.
        let cm = layout("d", &['i', 'j'], &[3, 4], Some(&[1, 3]), 12).unwrap();
        no_self_overlap("d", &cm).unwrap();
        let folded = layout("d", &['i', 'j'], &[3, 4], Some(&[2, 1]), 12).unwrap();
        assert_eq!(arg_of(no_self_overlap("d", &folded).unwrap_err()), "d");
        let zero = layout("d", &['i', 'j'], &[3, 4], Some(&[0, 1]), 12).unwrap();
        assert_eq!(arg_of(no_self_overlap("d", &zero).unwrap_err()), "d");
        // An extent-1 mode's stride does not matter.
        let one = layout("d", &['i', 'j'], &[1, 4], Some(&[0, 1]), 4).unwrap();
        no_self_overlap("d", &one).unwrap();
    }

    #[test]
    fn extents_must_agree_across_operands() {
        let a = layout("a", &['i', 'k'], &[2, 3], None, 6).unwrap();
        let b = layout("b", &['k', 'j'], &[4, 5], None, 20).unwrap();
        assert_eq!(arg_of(extents_agree(&[("a", &a), ("b", &b)]).unwrap_err()), "b");
        let b = layout("b", &['k', 'j'], &[3, 5], None, 15).unwrap();
        extents_agree(&[("a", &a), ("b", &b)]).unwrap();
    }
}
