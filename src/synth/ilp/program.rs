//! One integer program over a window of steps: its variables (sends pruned to those that can
//! matter), its constraints, the seed it starts from, and its solve.

use std::sync::mpsc;
use std::time::Instant;

use good_lp::{
    microlp, variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus,
    SolverModel, Variable, WithInitialSolution, WithMipGap, WithTimeLimit,
};

use super::{missing, Deadline, Holdings, Outcome, Planner, StepSend, Window, MAX_SEND_VARIABLES};
use crate::Error;

impl Window<'_> {
    /// Per chunk and NPU the earliest step it could hold the chunk, and the steps from the NPU
    /// to the nearest NPU that still wants it.
    pub(super) fn reach(&self) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
        let Planner {
            net, dist, problem, ..
        } = self.planner;
        let n = net.npus() as usize;
        let mut earliest = Vec::with_capacity(self.holds.len());
        let mut to_go = Vec::with_capacity(self.holds.len());
        for (c, row) in self.holds.iter().enumerate() {
            let dist = dist.chunk(problem, c);
            let mut e = vec![u32::MAX; n];
            let mut g = vec![u32::MAX; n];
            for (h, ready) in row.iter().enumerate() {
                let Some(r) = *ready else { continue };
                for v in 0..n {
                    let d = dist[h][v];
                    if d != u32::MAX {
                        e[v] = e[v].min(r + d);
                    }
                }
            }
            for (w, ready) in row.iter().enumerate() {
                if ready.is_none() && problem.wants(w as u32, c as u32) {
                    for v in 0..n {
                        g[v] = g[v].min(dist[v][w]);
                    }
                }
            }
            for (v, ready) in row.iter().enumerate() {
                if let Some(r) = *ready {
                    e[v] = r;
                }
            }
            earliest.push(e);
            to_go.push(g);
        }
        (earliest, to_go)
    }

    /// The last step chunk `c` may leave on link `l` with a purpose, if any: to an NPU that lacks
    /// it, early enough to reach one that wants it by the horizon (or, in a clustered window,
    /// moving it closer to one).
    fn last_step(
        &self,
        c: usize,
        l: usize,
        earliest: &[Vec<u32>],
        to_go: &[Vec<u32>],
    ) -> Option<u32> {
        let link = &self.planner.net.links[l];
        let (u, v) = (link.src as usize, link.dst as usize);
        if self.holds[c][v].is_some() || earliest[c][u] == u32::MAX || to_go[c][v] == u32::MAX {
            return None;
        }
        let span = self.planner.ten.span[l];
        let last = if self.partial {
            let closer = to_go[c][v] < to_go[c][u] || to_go[c][v] == 0;
            if !closer {
                return None;
            }
            self.horizon.checked_sub(span)?
        } else {
            self.horizon.checked_sub(span + to_go[c][v])?
        };
        (last >= earliest[c][u]).then_some(last)
    }

    /// A feasible plan by list scheduling in steps: every step, each free link takes the
    /// rarest chunk its source holds that it may usefully send (ignoring congestion: every such
    /// chunk). It seeds the program's search
    /// (an incumbent from the start), and its complete form bounds the horizon from above.
    pub(super) fn list_schedule(&self, earliest: &[Vec<u32>], to_go: &[Vec<u32>]) -> Vec<StepSend> {
        let Planner {
            net,
            ten,
            congestion,
            ..
        } = self.planner;
        let chunks = self.holds.len();
        let mut at: Holdings = self.holds.clone();
        let mut holders: Vec<u32> = at
            .iter()
            .map(|row| row.iter().flatten().count() as u32)
            .collect();
        let mut free_at = vec![0u32; net.links.len()];
        let mut plan = Vec::new();
        let mut lacking = missing(self.planner.problem, self.holds).len();
        for t in 0..self.horizon {
            if lacking == 0 {
                break;
            }
            for (l, link) in net.links.iter().enumerate() {
                if free_at[l] > t {
                    continue;
                }
                let (u, v) = (link.src as usize, link.dst as usize);
                let mut useful: Vec<usize> = (0..chunks)
                    .filter(|&c| at[c][u].is_some_and(|r| r <= t) && at[c][v].is_none())
                    .filter(|&c| {
                        self.last_step(c, l, earliest, to_go)
                            .is_some_and(|last| t <= last)
                    })
                    .collect();
                useful.sort_by_key(|&c| (holders[c], c));
                if *congestion {
                    // One chunk at a time, the rarest.
                    useful.truncate(1);
                }
                for c in useful {
                    if self.planner.problem.wants(v as u32, c as u32) {
                        lacking -= 1;
                    }
                    at[c][v] = Some(t + ten.span[l]);
                    holders[c] += 1;
                    if *congestion {
                        free_at[l] = t + ten.busy[l];
                    }
                    plan.push(StepSend {
                        step: t,
                        link: l as u32,
                        chunk: c as u32,
                    });
                }
            }
        }
        plan
    }

    /// The part of `plan` this window's program can express: its sends in step order while their
    /// chunk has reached the source, the destination lacks it, the link is free and a variable
    /// exists for them.
    fn restrict(
        &self,
        plan: &[StepSend],
        earliest: &[Vec<u32>],
        to_go: &[Vec<u32>],
    ) -> Vec<StepSend> {
        let Planner {
            net,
            ten,
            congestion,
            ..
        } = self.planner;
        let mut at = self.holds.clone();
        let mut free_at = vec![0u32; net.links.len()];
        let mut sorted = plan.to_vec();
        sorted.sort();
        let mut kept = Vec::new();
        for s in sorted {
            let (c, l) = (s.chunk as usize, s.link as usize);
            let link = &net.links[l];
            let usable = at[c][link.src as usize].is_some_and(|r| r <= s.step)
                && at[c][link.dst as usize].is_none()
                && free_at[l] <= s.step
                && self
                    .last_step(c, l, earliest, to_go)
                    .is_some_and(|last| (earliest[c][link.src as usize]..=last).contains(&s.step));
            if usable {
                at[c][link.dst as usize] = Some(s.step + ten.span[l]);
                if *congestion {
                    free_at[l] = s.step + ten.busy[l];
                }
                kept.push(s);
            }
        }
        kept
    }

    /// Builds and solves the program, stopping the search at `deadline`. `relaxed`: only its
    /// linear relaxation with every wanted pair required, whose infeasibility proves the horizon
    /// too short at the cost of one LP (`complete` then says whether it is feasible).
    pub(super) fn solve(&self, deadline: Deadline, relaxed: bool) -> Result<Outcome, Error> {
        let started = Instant::now();
        let (earliest, to_go) = self.reach();
        let Planner {
            net,
            ten,
            problem,
            congestion,
            ..
        } = self.planner;
        let links = &net.links;
        let t_end = self.horizon;
        let n = net.npus() as usize;
        let mut vars = ProblemVariables::new();
        // send variables, per link then step: (chunk, link, step, var)
        let mut sends: Vec<(u32, u32, u32, Variable)> = Vec::new();
        // Per (chunk, link): the first step with a variable and where its variables start.
        let mut send_index: Vec<Option<(u32, usize)>> = vec![None; self.holds.len() * links.len()];
        for c in 0..self.holds.len() {
            for l in 0..links.len() {
                let Some(last) = self.last_step(c, l, &earliest, &to_go) else {
                    continue;
                };
                let first = earliest[c][links[l].src as usize];
                send_index[c * links.len() + l] = Some((first, sends.len()));
                for t in first..=last {
                    let var = match relaxed {
                        true => vars.add(variable().min(0).max(1)),
                        false => vars.add(variable().binary()),
                    };
                    sends.push((c as u32, l as u32, t, var));
                }
                if sends.len() > MAX_SEND_VARIABLES {
                    return Err(Error::input(format!(
                        "the integer program would have over {MAX_SEND_VARIABLES} send variables \
                         ({} steps): use --cluster for shorter programs, or the greedy synthesizer",
                        t_end
                    )));
                }
            }
        }
        // Per (chunk, NPU) that lacks the chunk: the sends that could bring it, with their
        // arrival steps. Holding is their sum (at most one, below), so no variable of its own.
        let mut into: Vec<Vec<Vec<(Variable, u32)>>> = vec![vec![Vec::new(); n]; self.holds.len()];
        for &(c, l, t, var) in &sends {
            let dst = links[l as usize].dst as usize;
            into[c as usize][dst].push((var, t + ten.span[l as usize]));
        }
        let wanted: Vec<(u32, u32)> = missing(problem, self.holds);
        if relaxed
            && wanted
                .iter()
                .any(|&(c, v)| into[c as usize][v as usize].is_empty())
        {
            return Ok(Outcome::short(sends.len()));
        }
        // The relaxation only asks whether every wanted pair can arrive: no objective, no start.
        let mut objective = Expression::default();
        let mut model = if relaxed {
            vars.maximise(Expression::default()).using(microlp)
        } else {
            // Each pair held at the horizon counts 1; the paper's sum over the steps (earlier
            // arrivals count more) and a cost per send break ties among plans that deliver as
            // many, and together never outweigh one more pair delivered.
            let earliness = 1.0 / ((wanted.len() as f64 + 1.0) * (t_end as f64 + 1.0));
            let tiny = earliness / (sends.len() as f64 + 1.0);
            objective = Expression::with_capacity(sends.len());
            for &(c, v) in &wanted {
                for &(var, arrive) in &into[c as usize][v as usize] {
                    objective.add_mul(1.0 + earliness * (t_end - arrive + 1) as f64, var);
                }
            }
            for s in &sends {
                objective.add_mul(-tiny, s.3);
            }
            // Warm start: the list schedule, or the seed's part within the horizon if it
            // delivers more of what is wanted.
            let mut heuristic = self.list_schedule(&earliest, &to_go);
            if let Some(seed) = self.seed {
                let delivered = |plan: &[StepSend]| {
                    plan.iter()
                        .filter(|s| problem.wants(links[s.link as usize].dst, s.chunk))
                        .count()
                };
                let restricted = self.restrict(seed, &earliest, &to_go);
                if delivered(&restricted) > delivered(&heuristic) {
                    heuristic = restricted;
                }
            }
            let mut initial: Vec<(Variable, f64)> = sends.iter().map(|s| (s.3, 0.0)).collect();
            for h in &heuristic {
                let (c, l) = (h.chunk as usize, h.link as usize);
                let (first, at) = send_index[c * links.len() + l]
                    .expect("the list schedule sends where the program can");
                initial[at + (h.step - first) as usize].1 = 1.0;
            }
            // Stop once no plan can deliver another pair: the horizon is what is being decided.
            let gap = 0.5 / (wanted.len() as f32 + 1.0);
            vars.maximise(objective.clone())
                .using(microlp)
                .with_initial_solution(initial)
                .with_mip_gap(gap)
                .map_err(|e| Error::input(format!("integer program: {e}")))?
        };
        let mut on_link: Vec<Vec<(Expression, u32)>> =
            vec![vec![(Expression::default(), 0); t_end as usize + 1]; links.len()];
        for &(c, l, t, var) in &sends {
            let src = links[l as usize].src as usize;
            if self.holds[c as usize][src].is_none() {
                // Consistency: the chunk has reached the source by step t.
                let mut reached = Expression::default();
                for &(came, arrive) in &into[c as usize][src] {
                    if arrive <= t {
                        reached.add_mul(1.0, came);
                    }
                }
                model.add_constraint(Expression::from(var).leq(reached));
            }
            if *congestion {
                let busy = ten.busy[l as usize];
                for k in t..(t + busy).min(t_end + 1) {
                    let load = &mut on_link[l as usize][k as usize];
                    load.0.add_mul(1.0, var);
                    load.1 += 1;
                }
            }
        }
        for (c, row) in into.iter().enumerate() {
            for (v, list) in row.iter().enumerate() {
                let required = relaxed && problem.wants(v as u32, c as u32);
                if list.is_empty() || (list.len() == 1 && !required) {
                    continue;
                }
                let received: Expression = list.iter().map(|&(var, _)| var).sum();
                if required {
                    model.add_constraint(received.clone().geq(1.0));
                }
                if list.len() > 1 {
                    model.add_constraint(received.leq(1.0));
                }
            }
        }
        if *congestion {
            for row in on_link {
                for (load, terms) in row {
                    if terms > 1 {
                        model.add_constraint(load.leq(1.0));
                    }
                }
            }
        }
        let built = started.elapsed();
        if built > self.planner.build.get() {
            self.planner.build.set(built);
        }
        if let Some(limit) = deadline.left() {
            model = model.with_time_limit(limit.as_secs_f64());
        }
        // microlp looks at its clock every thousand pivots, which on programs of tens of
        // thousands of variables can be seconds: the search runs on a thread of its own and is
        // abandoned at the deadline (it stops by itself at its next look).
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(model.solve());
        });
        let solved = match deadline.left() {
            None => receiver.recv().ok(),
            Some(left) => receiver.recv_timeout(left).ok(),
        };
        let Some(solved) = solved else {
            return Ok(Outcome::interrupted(sends.len()));
        };
        let solution = match solved {
            Ok(s) => s,
            Err(ResolutionError::Infeasible) if relaxed => {
                return Ok(Outcome::short(sends.len()));
            }
            Err(ResolutionError::Infeasible) => {
                return Err(Error::input("the integer program is infeasible"))
            }
            Err(ResolutionError::Other(_)) => {
                // Time limit before any incumbent: nothing planned in this window.
                return Ok(Outcome::interrupted(sends.len()));
            }
            Err(e) => return Err(Error::input(format!("integer program: {e}"))),
        };
        let optimal = matches!(solution.status(), SolutionStatus::Optimal);
        // A relaxation that solves at all is feasible: every wanted pair is required.
        let complete = relaxed
            || wanted.iter().all(|&(c, v)| {
                into[c as usize][v as usize]
                    .iter()
                    .any(|&(var, _)| solution.value(var) > 0.5)
            });
        let chosen: Vec<StepSend> = sends
            .iter()
            .filter(|s| solution.value(s.3) > 0.5)
            .map(|&(chunk, link, step, _)| StepSend { step, link, chunk })
            .collect();
        let objective_value = objective.eval_with(&solution);
        let inner = solution.into_inner();
        let stats = inner.stats();
        Ok(Outcome {
            sends: chosen,
            complete,
            optimal,
            objective: objective_value,
            bound: stats.best_bound,
            gap: inner.gap(),
            variables: sends.len(),
        })
    }
}
