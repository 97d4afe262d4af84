//! Reading a comparison as a user would: each family of policies (reactive
//! thresholds and HPA behaviours, static fleets, the arrival-blind
//! yardstick at its headrooms) is a cost/SLO frontier, not one point, and a
//! predictive run is judged against the frontier at the SLO it reached.
//! Pure code: reports in, figures out.

use serde::Serialize;

use super::Report;

/// Which family a run belongs to, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Static,
    Reactive,
    Predictive,
    Yardstick,
    Oracle,
}

impl Family {
    pub fn of(policy: &str) -> Option<Family> {
        let head = policy.split('(').next()?;
        Some(match head {
            "static" => Family::Static,
            "reactive" => Family::Reactive,
            "predictive" => Family::Predictive,
            "yardstick" => Family::Yardstick,
            "oracle" => Family::Oracle,
            _ => return None,
        })
    }
}

/// A point: minutes met (share) and GPU-hours.
type Point = (f64, f64);

/// The lower-right edge of `points`: for each level of minutes met, the
/// cheapest run that reaches at least it. Sorted by minutes met.
pub fn frontier(points: &[Point]) -> Vec<Point> {
    let mut p: Vec<Point> = points.iter().copied().filter(|(m, g)| m.is_finite() && g.is_finite()).collect();
    // Best SLO first; keep a point only when it is cheaper than every better one.
    p.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.total_cmp(&b.1)));
    let mut out: Vec<Point> = Vec::new();
    for q in p {
        if out.last().is_none_or(|l| q.1 < l.1) {
            out.push(q);
        }
    }
    out.reverse();
    out
}

/// GPU-hours the frontier needs to meet `minutes` (linear between its
/// points); `None` outside its range (no point reaches it, or every point
/// meets more: comparing with a run that serves better would flatter the cheaper one).
pub fn cost_at(frontier: &[Point], minutes: f64) -> Option<f64> {
    let i = frontier.iter().position(|p| p.0 >= minutes)?;
    if i == 0 {
        return (frontier[0].0 - minutes <= 1e-12).then_some(frontier[0].1);
    }
    let (a, b) = (frontier[i - 1], frontier[i]);
    let w = if b.0 > a.0 { (minutes - a.0) / (b.0 - a.0) } else { 1.0 };
    Some(a.1 + w * (b.1 - a.1))
}

/// One predictive run against the frontiers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judged {
    pub policy: String,
    pub minutes_met: f64,
    pub gpu_hours: f64,
    /// 1 - its GPU-hours over the reactive frontier's at the same minutes met
    /// (`None`: no reactive run reaches its SLO).
    pub saving_vs_reactive: Option<f64>,
    /// Its GPU-hours over the yardstick frontier's at the same minutes met.
    pub vs_yardstick: Option<f64>,
    /// Static or reactive runs at least as good on minutes met and cheaper.
    pub dominated_by: Vec<String>,
}

/// Each family's cheapest run that meets at least an SLO level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Level {
    pub minutes_met: f64,
    pub reactive: Option<f64>,
    pub static_fleet: Option<f64>,
    pub predictive: Option<f64>,
    pub yardstick: Option<f64>,
    pub oracle: Option<f64>,
}

/// The whole reading of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reading {
    pub predictive: Vec<Judged>,
    pub levels: Vec<Level>,
}

/// The SLO levels the headline reads costs at.
pub const LEVELS: [f64; 3] = [0.990, 0.995, 0.999];

/// Judge every predictive run of `reports` against the other families,
/// on `cost` (node GPU-hours or GPU-hours held).
pub fn read(reports: &[&Report], cost: impl Fn(&Report) -> f64) -> Reading {
    let family =
        |f: Family| -> Vec<&Report> { reports.iter().copied().filter(|r| Family::of(&r.policy) == Some(f)).collect() };
    let edge = |f: Family| frontier(&family(f).iter().map(|r| (r.minutes_met, cost(r))).collect::<Vec<_>>());
    let (reactive, yard, stat, pred, oracle) = (
        edge(Family::Reactive),
        edge(Family::Yardstick),
        edge(Family::Static),
        edge(Family::Predictive),
        edge(Family::Oracle),
    );
    let others: Vec<&Report> = reports
        .iter()
        .copied()
        .filter(|r| matches!(Family::of(&r.policy), Some(Family::Reactive | Family::Static)))
        .collect();
    let predictive = family(Family::Predictive)
        .into_iter()
        .map(|p| {
            let (m, g) = (p.minutes_met, cost(p));
            Judged {
                policy: p.policy.clone(),
                minutes_met: m,
                gpu_hours: g,
                saving_vs_reactive: cost_at(&reactive, m).filter(|c| *c > 0.0).map(|c| 1.0 - g / c),
                vs_yardstick: cost_at(&yard, m).filter(|c| *c > 0.0).map(|c| g / c),
                dominated_by: others
                    .iter()
                    .filter(|o| o.minutes_met >= m && cost(o) < g)
                    .map(|o| o.policy.clone())
                    .collect(),
            }
        })
        .collect();
    let reaching = |edge: &[Point], l: f64| edge.iter().find(|p| p.0 >= l).map(|p| p.1);
    let levels = LEVELS
        .iter()
        .map(|&l| Level {
            minutes_met: l,
            reactive: reaching(&reactive, l),
            static_fleet: reaching(&stat, l),
            predictive: reaching(&pred, l),
            yardstick: reaching(&yard, l),
            oracle: reaching(&oracle, l),
        })
        .collect();
    Reading { predictive, levels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontier_keeps_only_runs_no_other_beats_on_both() {
        // (minutes met, GPU-hours): 0.995 at 12 is beaten by 0.998 at 11.
        let f = frontier(&[(0.99, 10.0), (0.995, 12.0), (0.998, 11.0), (0.999, 15.0), (0.98, 10.5)]);
        assert_eq!(f, vec![(0.99, 10.0), (0.998, 11.0), (0.999, 15.0)]);
        // Halfway between 0.99 and 0.998: halfway between their costs.
        assert!((cost_at(&f, 0.994).unwrap() - 10.5).abs() < 1e-9);
        // Below every point or above them all: none.
        assert_eq!(cost_at(&f, 0.95), None);
        assert_eq!(cost_at(&f, 0.99), Some(10.0));
        assert_eq!(cost_at(&f, 0.9995), None);
    }
}
