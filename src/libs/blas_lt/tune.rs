//! Algorithm choice: the heuristic's candidates for a matmul ([`BlasLt::candidates`]), one of
//! them picked by index ([`Matmul::algorithm`]), and an autotuner that times each candidate on
//! the caller's buffers and stores the fastest as the matmul's plan ([`BlasLt::autotune`]).

use super::calls::{self, MAX_CANDIDATES};
use super::check;
use super::types::sealed::ScaleValue;
use super::types::{LtElement, Matmul};
use super::BlasLt;
use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// One of the heuristic's candidate algorithms for a matmul, best first.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Its index: pass it to [`Matmul::algorithm`].
    pub index: usize,
    /// Workspace bytes it needs (the stream's workspace grows to it on first use).
    pub workspace_bytes: usize,
    /// cuBLASLt's waves count: the kernel's blocks over what the device runs at once (0 where
    /// the heuristic does not report it).
    pub waves: f32,
}

/// What [`BlasLt::autotune`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// The fastest candidate's index, now the plan of the matmul (with `algorithm` `None`).
    pub best: usize,
    /// Each candidate's time, by index: one run, enqueue to completion, after an untimed one.
    pub times: Vec<Duration>,
}

impl BlasLt {
    /// The heuristic's candidate algorithms for `mm`, best first, at most `max` (1 to 64).
    /// Checks `mm` as [`matmul`](Self::matmul) does; records nothing and caches no plan. The
    /// simulator has one candidate, index 0.
    pub fn candidates<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
        &mut self,
        mm: &Matmul<'_, TA, TB, TD, TC, E>,
        max: usize,
    ) -> Result<Vec<Candidate>> {
        if max == 0 || max > MAX_CANDIDATES {
            return Err(Error::invalid("max", format!("{max} is outside 1 to {MAX_CANDIDATES}")));
        }
        let problem = check::problem(mm)?;
        self.check_fp8_device(&problem)?;
        if self.op.device.is_simulated() {
            return Ok(vec![Candidate { index: 0, workspace_bytes: 0, waves: 0.0 }]);
        }
        let h = self.handle()?;
        let _bound = self.op.bound_stream()?;
        let at = self.addresses(mm, &problem)?;
        let key = at.key(problem, mm.tf32, None);
        let q = calls::Query { tf32: mm.tf32, ptrs: at.ptrs, max_workspace: self.max_workspace()?, align: key.align };
        // SAFETY: (1) a live handle of the context bound above; (2) `q.ptrs` sets this matmul's
        // pointers (an amax stand-in is never read).
        let found = unsafe { calls::candidates(h, &problem, &q, max) }?;
        Ok(found
            .into_iter()
            .enumerate()
            .map(|(index, (workspace_bytes, waves))| Candidate { index, workspace_bytes, waves })
            .collect())
    }

    /// Times each of the heuristic's first `max` candidates for `mm` (1 to 64) on its own
    /// buffers, and stores the fastest as the plan of `mm`: later matmuls of the same problem
    /// (with `algorithm` `None`) run it, until the plan is evicted from the cache, when the
    /// heuristic's best comes back.
    ///
    /// Each candidate runs twice, the second run timed from enqueue to completion on the host;
    /// `D` (and the epilogue's outputs) hold one run's result afterwards. Refused where runs
    /// would not repeat: `beta` non-zero with `C` being `D`. `algorithm` must be `None`.
    pub fn autotune<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
        &mut self,
        mm: &Matmul<'_, TA, TB, TD, TC, E>,
        max: usize,
    ) -> Result<Tuning> {
        let problem = check::problem(mm)?;
        if mm.algorithm.is_some() {
            return Err(Error::invalid("algorithm", "autotune chooses the algorithm: leave it None"));
        }
        // Recorded, each timed run would be a capture (nothing runs, the timings would measure
        // recording) and the choice would outlive the recording.
        self.op.refuse_recording_as(
            "an autotune, which times runs on the host,",
            "autotune outside the recording; a matmul recorded after it uses the plan it chose",
        )?;
        if problem.c_is_d && mm.scale_device.is_some() {
            return Err(Error::invalid(
                "beta",
                "autotuning runs the matmul repeatedly, and with C being D and beta in device memory each run may add \
                 to the last: pass a separate C (Matmul::with_c) or tune with a host beta of 0",
            ));
        }
        if problem.c_is_d && mm.beta.wide() != [0.0, 0.0] {
            return Err(Error::invalid(
                "beta",
                "autotuning runs the matmul repeatedly, and with C being D and beta non-zero each run would \
                 add to the last: pass a separate C (Matmul::with_c) or tune with beta = 0",
            ));
        }
        let candidates = self.candidates(mm, max)?;
        let mut times = Vec::with_capacity(candidates.len());
        for c in &candidates {
            let run = mm.with_algorithm(c.index);
            // Untimed: makes the candidate's plan and grows the workspace to its need.
            self.matmul(&run)?.wait()?;
            let t = Instant::now();
            self.matmul(&run)?.wait()?;
            times.push(t.elapsed());
        }
        let best = times.iter().enumerate().min_by_key(|(_, t)| **t).map_or(0, |(i, _)| i);
        if !self.op.device.is_simulated() {
            let h = self.handle()?;
            let _bound = self.op.bound_stream()?;
            let at = self.addresses(mm, &problem)?;
            let key = at.key(problem, mm.tf32, None);
            let q =
                calls::Query { tf32: mm.tf32, ptrs: at.ptrs, max_workspace: self.max_workspace()?, align: key.align };
            // SAFETY: as in `candidates`.
            let plan = unsafe { calls::make_plan(h, &problem, &q, best) }?;
            self.plans.insert(key, plan, &self.op);
        }
        Ok(Tuning { best, times })
    }
}
