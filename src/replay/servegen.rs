//! ServeGen traces as simulator demand: real LLM arrivals, not Poisson.
//!
//! ServeGen (Xiang et al., 2025) publishes, per API client of a production
//! model, one row per 10-minute window: the mean arrival rate, the CV of
//! inter-arrival gaps and the distribution fitted to them (`Gamma`,
//! `Weibull`, `Exponential`; empty for no traffic). LLM arrivals are far
//! burstier than Poisson (CV 2-10 is common), and a fleet sized for the
//! mean rate on Poisson arrivals is sized for a load it never sees.
//!
//! Arrivals are generated the way ServeGen's own generator does it: a
//! window with rate `r` gets `r x 600` requests (scaled, and rounded
//! stochastically so sparse clients keep their mean), their gaps are drawn
//! from the window's fitted distribution and rescaled to fill the window
//! exactly. Rescaling removes the distribution's scale, so only its shape
//! (`param1`) matters; which is also why the two parameterisations in use
//! for the scale cannot mislead here. A fleet is the superposition of its
//! clients' arrivals, counted per second.
//!
//! Parsing takes text and generation takes data: the files are read at the
//! CLI edge.

use std::collections::HashMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma, Weibull};

use super::{Demand, SimError, TokenMix};

/// One client's trace: a window every `WINDOW_SECS`, from t = 0.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClientTrace {
    pub(crate) client: String,
    pub(crate) windows: Vec<Window>,
}

/// ServeGen's window length.
pub(crate) const WINDOW_SECS: usize = 600;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Window {
    /// Seconds from the trace's t = 0.
    pub(crate) t: u64,
    pub(crate) rate: f64,
    pub(crate) gaps: Gaps,
}

/// The fitted inter-arrival distribution's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Gaps {
    Exponential,
    Gamma { shape: f64 },
    Weibull { shape: f64 },
}

/// Parse a `chunk-<client>-trace.csv` body: no header, `t_seconds,
/// rate_req_per_s, cv, dist, param1, param2`.
pub(crate) fn parse_client(client: &str, body: &str) -> Result<ClientTrace, SimError> {
    let mut windows = Vec::new();
    for (n, line) in body.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| SimError::Input(format!("client {client}, line {}: {what}: {line:?}", n + 1));
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 4 {
            return Err(bad("expected t_seconds,rate,cv,dist,param1,param2"));
        }
        let t: f64 = f[0].trim().parse().map_err(|_| bad("t_seconds is not a number"))?;
        let rate: f64 = f[1].trim().parse().map_err(|_| bad("rate is not a number"))?;
        if !(t.is_finite() && t >= 0.0 && rate.is_finite() && rate >= 0.0) {
            return Err(bad("t_seconds and rate must be finite and >= 0"));
        }
        let shape = || -> Result<f64, SimError> {
            let p: f64 = f.get(4).and_then(|s| s.trim().parse().ok()).ok_or_else(|| bad("param1 missing"))?;
            if p.is_finite() && p > 0.0 {
                Ok(p)
            } else {
                Err(bad("the distribution's shape must be > 0"))
            }
        };
        let gaps = match f[3].trim() {
            "" | "Exponential" => Gaps::Exponential,
            "Gamma" => Gaps::Gamma { shape: shape()? },
            "Weibull" => Gaps::Weibull { shape: shape()? },
            other => return Err(bad(&format!("unknown distribution {other:?}"))),
        };
        // An empty distribution means no traffic whatever the rate says.
        let rate = if f[3].trim().is_empty() { 0.0 } else { rate };
        windows.push(Window { t: t as u64, rate, gaps });
    }
    if windows.is_empty() {
        return Err(SimError::Input(format!("client {client}: no windows")));
    }
    Ok(ClientTrace { client: client.to_string(), windows })
}

/// The fleet's total rate per window (requests per second), over the longest client.
pub(crate) fn fleet_rate(clients: &[ClientTrace]) -> Vec<f64> {
    let n = clients.iter().flat_map(|c| c.windows.iter()).map(|w| w.t as usize / WINDOW_SECS + 1).max().unwrap_or(0);
    let mut total = vec![0.0; n];
    for w in clients.iter().flat_map(|c| c.windows.iter()) {
        total[w.t as usize / WINDOW_SECS] += w.rate;
    }
    total
}

/// Fewest clients for which a window with no traffic from any of them is
/// taken as a collection gap rather than demand: one busy tenant may go
/// quiet, a fleet of many does not stop at once.
pub(crate) const GAP_MIN_CLIENTS: usize = 10;

/// Fill a fleet's collection gaps: a window where all of at least
/// [`GAP_MIN_CLIENTS`] clients are at zero takes every client's window
/// from a day earlier (or later, at the start). Returns the windows filled.
pub(crate) fn fill_gaps(clients: &mut [ClientTrace]) -> usize {
    if clients.len() < GAP_MIN_CLIENTS {
        return 0;
    }
    let total = fleet_rate(clients);
    let day = 86_400 / WINDOW_SECS;
    let gap = |w: usize| total.get(w).is_some_and(|r| *r == 0.0);
    let mut filled = 0;
    for w in (0..total.len()).filter(|w| gap(*w)) {
        let src = [w.checked_sub(day), Some(w + day), w.checked_sub(2 * day), Some(w + 2 * day)]
            .into_iter()
            .flatten()
            .find(|s| *s < total.len() && !gap(*s));
        let Some(src) = src else { continue };
        for c in clients.iter_mut() {
            let from = c.windows.iter().find(|x| x.t as usize / WINDOW_SECS == src).copied();
            if let (Some(from), Some(to)) = (from, c.windows.iter_mut().find(|x| x.t as usize / WINDOW_SECS == w)) {
                *to = Window { t: to.t, ..from };
            }
        }
        filled += 1;
    }
    filled
}

/// Arrivals of the fleet `clients`, scaled so the 99th percentile window
/// has `peak_rps` requests per second; minute 0 is unix `start`.
pub(crate) fn demand(
    clients: &[ClientTrace],
    start: i64,
    peak_rps: f64,
    mix: TokenMix,
    seed: u64,
) -> Result<Demand, SimError> {
    if !(peak_rps.is_finite() && peak_rps > 0.0) {
        return Err(SimError::Input(format!("peak rate must be a number > 0, got {peak_rps}")));
    }
    let total = fleet_rate(clients);
    let mut sorted = total.clone();
    let p99 = crate::forecast::backtest::quantile(&mut sorted, 0.99);
    if p99.is_nan() || p99 <= 0.0 {
        return Err(SimError::Input("the clients have no traffic in almost every window: no shape to scale".into()));
    }
    let k = peak_rps / p99;
    let secs = total.len() * WINDOW_SECS;
    let mut per_sec = vec![0f32; secs];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut gaps = Vec::new();
    for w in clients.iter().flat_map(|c| c.windows.iter()) {
        let expected = w.rate * k * WINDOW_SECS as f64;
        let n = (expected + rng.random::<f64>()).floor() as usize;
        if n == 0 {
            continue;
        }
        gaps.clear();
        draw_gaps(w.gaps, n, &mut rng, &mut gaps)?;
        let sum: f64 = gaps.iter().sum();
        let from = w.t as usize;
        let mut acc = 0.0;
        for g in &gaps {
            acc += g;
            // The last arrival lands at the window's end: keep it inside.
            let at = ((acc / sum * WINDOW_SECS as f64) as usize).min(WINDOW_SECS - 1);
            if let Some(c) = per_sec.get_mut(from + at) {
                *c += 1.0;
            }
        }
    }
    let rate = per_sec.chunks(60).map(|m| m.iter().map(|c| f64::from(*c)).sum::<f64>() / 60.0).collect();
    Ok(Demand { start, rate, mix, arrivals: Some(per_sec) })
}

fn draw_gaps(g: Gaps, n: usize, rng: &mut ChaCha8Rng, out: &mut Vec<f64>) -> Result<(), SimError> {
    let bad = |e: &dyn std::fmt::Display| SimError::Input(format!("inter-arrival distribution: {e}"));
    match g {
        Gaps::Exponential => out.extend((0..n).map(|_| -(1.0 - rng.random::<f64>()).ln())),
        Gaps::Gamma { shape } => {
            let d = Gamma::new(shape, 1.0).map_err(|e| bad(&e))?;
            out.extend((0..n).map(|_| d.sample(rng)));
        }
        Gaps::Weibull { shape } => {
            let d = Weibull::new(1.0, shape).map_err(|e| bad(&e))?;
            out.extend((0..n).map(|_| d.sample(rng)));
        }
    }
    // A shape far below 1 can draw only zeros in f64; spread those evenly.
    if out.iter().sum::<f64>() <= 0.0 {
        out.iter_mut().for_each(|g| *g = 1.0);
    }
    Ok(())
}

/// Mean prompt and output tokens per client and six-hour window.
#[derive(Debug, Default)]
pub(crate) struct TokenMeans {
    /// Per client: (window start, prompt mean, output mean), by start.
    by_client: HashMap<String, Vec<(u64, f64, f64)>>,
}

const MEANS_WINDOW_SECS: u64 = 6 * 3600;

impl TokenMeans {
    /// Parse `token_means_6h.csv` rows of `model`.
    pub(crate) fn parse(body: &str, model: &str) -> Result<TokenMeans, SimError> {
        let mut lines = body.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().split(',').map(str::trim).collect();
        let col = |name: &str| {
            header
                .iter()
                .position(|h| *h == name)
                .ok_or_else(|| SimError::Input(format!("token means: no column {name:?}")))
        };
        let (cm, cc, ct, ci, co) =
            (col("model")?, col("client")?, col("t_start_s")?, col("in_mean")?, col("out_mean")?);
        let mut out = TokenMeans::default();
        for line in lines {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.get(cm) != Some(&model) {
                continue;
            }
            let num = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0);
            let (Some(client), Some(t), Some(p), Some(o)) = (f.get(cc), num(ct), num(ci), num(co)) else { continue };
            out.by_client.entry((*client).to_string()).or_default().push((t as u64, p, o));
        }
        for rows in out.by_client.values_mut() {
            rows.sort_by_key(|r| r.0);
        }
        Ok(out)
    }

    /// A client's means at `t`: its six-hour window's, else its nearest
    /// window's (a client's lengths drift slowly; its rate does not).
    pub(crate) fn at(&self, client: &str, t: u64) -> Option<(f64, f64)> {
        let rows = self.by_client.get(client)?;
        if let Some(r) = rows.iter().find(|r| t >= r.0 && t < r.0 + MEANS_WINDOW_SECS) {
            return Some((r.1, r.2));
        }
        rows.iter().min_by_key(|r| r.0.abs_diff(t)).map(|r| (r.1, r.2))
    }

    pub(crate) fn has(&self, client: &str) -> bool {
        self.by_client.contains_key(client)
    }

    pub(crate) fn clients(&self) -> usize {
        self.by_client.len()
    }
}

/// The token mix of the fleet from `token_means_6h.csv`
/// (`model,client,t_start_s,in_mean,...,out_mean,...`): the means over the
/// model's clients and 6-hour windows, weighted by each client's requests
/// in that window. `None` when no row matches.
pub(crate) fn token_mix(body: &str, model: &str, clients: &[ClientTrace]) -> Result<Option<TokenMix>, SimError> {
    let means = TokenMeans::parse(body, model)?;
    let (mut w_sum, mut prompt, mut output) = (0.0, 0.0, 0.0);
    for c in clients {
        for &(t, pi, po) in means.by_client.get(&c.client).map_or(&[][..], Vec::as_slice) {
            let weight: f64 =
                c.windows.iter().filter(|w| w.t >= t && w.t < t + MEANS_WINDOW_SECS).map(|w| w.rate).sum();
            w_sum += weight;
            prompt += weight * pi;
            output += weight * po;
        }
    }
    Ok((w_sum > 0.0 && output > 0.0).then(|| TokenMix { prompt_tokens: prompt / w_sum, output_tokens: output / w_sum }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(name: &str, rows: &[(u64, f64, &str, f64)]) -> ClientTrace {
        let body: String =
            rows.iter().map(|(t, r, d, p)| format!("{t},{r},1.0,{d},{p},1.0\n")).collect::<Vec<_>>().concat();
        parse_client(name, &body).unwrap()
    }

    #[test]
    fn arrivals_keep_each_window_s_count_and_scale_to_the_peak() {
        let c = client("a", &[(0, 2.0, "Gamma", 0.25), (600, 1.0, "Exponential", 1.0), (1200, 0.0, "", 0.0)]);
        let d = demand(&[c], 0, 4.0, TokenMix::azure_conversation(), 7).unwrap();
        let a = d.arrivals.as_ref().unwrap();
        assert_eq!(a.len(), 1800);
        // Scaled so the 99th percentile window (interpolated: 1.98 req/s)
        // becomes 4 req/s: k = 4 / 1.98, so 2 x 600 x k then 1 x 600 x k.
        let k = 4.0 / 1.98;
        let first: f32 = a[..600].iter().sum();
        let second: f32 = a[600..1200].iter().sum();
        assert!((f64::from(first) - 1200.0 * k).abs() <= 1.0, "{first}");
        assert!((f64::from(second) - 600.0 * k).abs() <= 1.0, "{second}");
        assert_eq!(a[1200..].iter().sum::<f32>(), 0.0);
        assert_eq!(d.rate.len(), 30);
        assert!((d.rate.iter().sum::<f64>() * 60.0 - f64::from(first + second)).abs() < 1e-6);
    }

    #[test]
    fn a_bursty_window_is_burstier_than_poisson() {
        // Gamma shape 0.1: CV of the gaps ~3.2; per-second counts vary far
        // more than a Poisson stream of the same mean (index of dispersion 1).
        let c = client("b", &[(0, 5.0, "Gamma", 0.1)]);
        let d = demand(&[c], 0, 5.0, TokenMix::azure_conversation(), 3).unwrap();
        let a: Vec<f64> = d.arrivals.unwrap().iter().map(|c| f64::from(*c)).collect();
        let mean = a.iter().sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(var / mean > 5.0, "index of dispersion {}", var / mean);
    }

    #[test]
    fn bad_rows_are_refused_with_the_line() {
        let e = parse_client("c", "0,1.0,1.0,Gamma,-1,1\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("shape"), "{e}");
        assert!(parse_client("c", "0,x,1,Gamma,1,1\n").is_err());
        assert!(parse_client("c", "0,1,1,Pareto,1,1\n").is_err());
        assert!(parse_client("c", "").is_err());
        // No traffic anywhere: nothing to scale.
        let idle = client("d", &[(0, 0.0, "", 0.0)]);
        assert!(demand(&[idle], 0, 1.0, TokenMix::azure_conversation(), 1).is_err());
    }

    #[test]
    fn a_window_every_client_misses_is_filled_from_the_day_before() {
        let day = (86_400 / WINDOW_SECS) as u64;
        let mut fleet: Vec<ClientTrace> = (0..GAP_MIN_CLIENTS)
            .map(|c| {
                let rows: Vec<(u64, f64, &str, f64)> = (0..2 * day)
                    .map(|w| {
                        let r = if w == day + 5 { 0.0 } else { 1.0 + (w % day) as f64 + c as f64 };
                        (w * WINDOW_SECS as u64, r, if r > 0.0 { "Exponential" } else { "" }, 1.0)
                    })
                    .collect();
                client(&c.to_string(), &rows)
            })
            .collect();
        assert_eq!(fill_gaps(&mut fleet), 1);
        assert_eq!(fleet[3].windows[(day + 5) as usize].rate, fleet[3].windows[5].rate);
        assert_eq!(fleet[3].windows[(day + 5) as usize].t, (day + 5) * WINDOW_SECS as u64);
        // A few clients all idle at once is demand, not a gap.
        let mut few = fleet[..2].to_vec();
        few.iter_mut().for_each(|c| c.windows[7].rate = 0.0);
        assert_eq!(fill_gaps(&mut few), 0);
    }

    #[test]
    fn the_token_mix_is_weighted_by_requests() {
        let busy = client("1", &[(0, 9.0, "Exponential", 1.0)]);
        let quiet = client("2", &[(0, 1.0, "Exponential", 1.0)]);
        let body = "model,client,t_start_s,in_mean,in_p50,in_p99,out_mean,out_p50,out_p99\n\
                    m,1,0,100,0,0,10,0,0\nm,2,0,1000,0,0,110,0,0\nother,1,0,5,0,0,5,0,0\n";
        let mix = token_mix(body, "m", &[busy, quiet]).unwrap().unwrap();
        assert!((mix.prompt_tokens - 190.0).abs() < 1e-9 && (mix.output_tokens - 20.0).abs() < 1e-9, "{mix:?}");
        assert_eq!(token_mix(body, "nope", &[]).unwrap(), None);
    }
}
