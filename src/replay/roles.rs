//! Monolithic against prefill/decode sizing on a real token mix.
//!
//! Each ten-minute window of a ServeGen fleet (or one client) becomes a
//! token demand: the request rate, and the prompt and output lengths of the
//! six-hour window it falls in, weighted by each client's requests. Three
//! rules then size it with the same profile, so at the same SLO its figures
//! stand for:
//! - **in-flight**: what a single-role workload sized on `concurrency` does,
//!   in-flight requests (Little's law: rate x (prefill time + output x time
//!   per token)) over `concurrency_per_replica`;
//! - **time-share**: one pool of replicas that does both phases, each
//!   replica's time split between them: ceil(prefill need + decode need).
//!   It leaves out the stall a prefill chunk puts into every decode step in
//!   the same batch, so it is the best a monolithic fleet can do;
//! - **prefill/decode**: ceil(prefill need) + ceil(decode need), the two
//!   roles of [`crate::sizing::roles`], each a fleet of its own.
//!
//! Sizing is per window for that window's mean demand (no forecast), so what
//! differs between the rules is the rule alone. Pure: data in, data out.

use serde::Serialize;

use super::{
    servegen::{ClientTrace, TokenMeans, WINDOW_SECS},
    SimError,
};
use crate::sizing::roles::{need, Limit, RoleCapacity, RoleKind, TokenDemand};

/// A fleet's demand per ServeGen window, and the share of its requests
/// whose client has no token means (given the window's mean of the others).
#[derive(Debug, Clone)]
pub(crate) struct WindowDemand {
    pub(crate) windows: Vec<TokenDemand>,
    pub(crate) imputed_share: f64,
}

/// The superposition of `clients`, window by window.
pub(crate) fn fleet_demand(clients: &[ClientTrace], means: &TokenMeans) -> WindowDemand {
    let n = clients.iter().map(|c| c.windows.len()).max().unwrap_or(0);
    let (mut total, mut imputed) = (0.0, 0.0);
    let windows = (0..n)
        .map(|k| {
            let (mut rate, mut known, mut prompt, mut output) = (0.0, 0.0, 0.0, 0.0);
            for c in clients {
                let Some(w) = c.windows.get(k).filter(|w| w.rate > 0.0) else { continue };
                rate += w.rate;
                if let Some((p, o)) = means.at(&c.client, w.t) {
                    known += w.rate;
                    prompt += w.rate * p;
                    output += w.rate * o;
                }
            }
            total += rate;
            imputed += rate - known;
            let mean = |x: f64| if known > 0.0 { x / known } else { 0.0 };
            TokenDemand {
                request_rate: if known > 0.0 { rate } else { 0.0 },
                prompt_tokens: mean(prompt),
                generation_tokens: mean(output),
                cache_hit: 0.0,
            }
        })
        .collect();
    WindowDemand { windows, imputed_share: if total > 0.0 { imputed / total } else { 0.0 } }
}

/// GPU-hours each rule spends on one demand series, and where they differ.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Comparison {
    pub(crate) windows: usize,
    pub(crate) in_flight_gpu_hours: f64,
    pub(crate) time_share_gpu_hours: f64,
    pub(crate) prefill_gpu_hours: f64,
    pub(crate) decode_gpu_hours: f64,
    /// Windows where in-flight sizing runs fewer replicas than the token need.
    pub(crate) in_flight_short_windows: usize,
    /// Windows where decode is bound by the KV cache rather than sequences or tokens.
    pub(crate) kv_bound_windows: usize,
    /// Mean prompt and output tokens per request, weighted by requests.
    pub(crate) prompt_tokens: f64,
    pub(crate) output_tokens: f64,
}

impl Comparison {
    pub(crate) fn disaggregated_gpu_hours(&self) -> f64 {
        self.prefill_gpu_hours + self.decode_gpu_hours
    }
}

fn ceil(x: f64) -> f64 {
    (x - 1e-9).ceil().max(0.0)
}

/// Size every window three ways with one profile's capacity.
pub(crate) fn compare(d: &[TokenDemand], cap: &RoleCapacity, gpus_per_replica: u32) -> Result<Comparison, SimError> {
    let hours = WINDOW_SECS as f64 / 3600.0 * f64::from(gpus_per_replica);
    let prefill_rate = cap
        .prefill_tokens_per_sec
        .ok_or_else(|| SimError::Input("the profile states no prefill_tokens_per_sec".into()))?;
    let mut c = Comparison {
        windows: d.len(),
        in_flight_gpu_hours: 0.0,
        time_share_gpu_hours: 0.0,
        prefill_gpu_hours: 0.0,
        decode_gpu_hours: 0.0,
        in_flight_short_windows: 0,
        kv_bound_windows: 0,
        prompt_tokens: 0.0,
        output_tokens: 0.0,
    };
    let mut requests = 0.0;
    for w in d {
        let bad = |_| SimError::Input(format!("unusable token demand {w:?}"));
        let p = need(RoleKind::Prefill, w, cap).map_err(bad)?;
        let dn = need(RoleKind::Decode, w, cap).map_err(bad)?;
        let in_flight = w.request_rate
            * (w.prompt_tokens * (1.0 - w.cache_hit) / prefill_rate + w.generation_tokens * cap.itl_secs);
        let in_flight_replicas = ceil(in_flight / cap.sequences);
        let time_share = ceil(p.replicas + dn.replicas);
        c.in_flight_gpu_hours += in_flight_replicas * hours;
        c.time_share_gpu_hours += time_share * hours;
        c.prefill_gpu_hours += ceil(p.replicas) * hours;
        c.decode_gpu_hours += ceil(dn.replicas) * hours;
        c.in_flight_short_windows += usize::from(in_flight_replicas < time_share);
        c.kv_bound_windows += usize::from(dn.limit == Limit::KvCache && dn.replicas > 0.0);
        requests += w.request_rate;
        c.prompt_tokens += w.request_rate * w.prompt_tokens;
        c.output_tokens += w.request_rate * w.generation_tokens;
    }
    if requests > 0.0 {
        c.prompt_tokens /= requests;
        c.output_tokens /= requests;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::servegen::parse_client;

    use crate::sizing::roles::H100_8B as CAP;

    fn demand(rate: f64, prompt: f64, output: f64) -> TokenDemand {
        TokenDemand { request_rate: rate, prompt_tokens: prompt, generation_tokens: output, cache_hit: 0.0 }
    }

    #[test]
    fn each_rule_spends_what_its_formula_says() {
        // One window (1/6 h) on 1-GPU replicas.
        // prefill 10 x 1,200 / 24,000 = 0.5; decode 10 x 200 x 0.02 / 32 = 1.25 (tokens 2,000 / 1,600 the same)
        let c = compare(&[demand(10.0, 1_200.0, 200.0)], &CAP, 1).unwrap();
        let h = 1.0 / 6.0;
        assert!((c.time_share_gpu_hours - 2.0 * h).abs() < 1e-12, "{c:?}"); // ceil(1.75)
        assert!((c.prefill_gpu_hours - h).abs() < 1e-12 && (c.decode_gpu_hours - 2.0 * h).abs() < 1e-12);
        // in flight: 10 x (0.05 + 4) = 40.5 / 32 -> 2
        assert!((c.in_flight_gpu_hours - 2.0 * h).abs() < 1e-12);
        assert_eq!((c.in_flight_short_windows, c.kv_bound_windows), (0, 0));
    }

    #[test]
    fn long_prompts_bind_prefill_and_the_kv_cache_where_in_flight_sizing_sees_neither() {
        // 5 req/s x 20,000-token prompts: prefill 100k/24k = 4.2 -> 5; decode KV 5 x 100 x 0.02 = 10 seqs x 20,050 = 200k of 390k.
        let c = compare(&[demand(5.0, 20_000.0, 100.0)], &CAP, 1).unwrap();
        assert!(c.disaggregated_gpu_hours() * 6.0 >= 6.0 - 1e-9, "{c:?}");
        assert!(c.in_flight_gpu_hours < c.time_share_gpu_hours, "in-flight misses the prompt work: {c:?}");
        assert_eq!(c.in_flight_short_windows, 1);
        let kv = compare(&[demand(5.0, 60_000.0, 200.0)], &CAP, 1).unwrap();
        assert_eq!(kv.kv_bound_windows, 1, "{kv:?}");
    }

    #[test]
    fn fleet_demand_weights_lengths_by_requests_and_imputes_unknown_clients() {
        let body = "model,client,t_start_s,in_mean,in_p50,in_p99,out_mean,out_p50,out_p99\n\
                    m,1,0,100,0,0,10,0,0\nm,2,0,1000,0,0,110,0,0\nm,1,21600,300,0,0,30,0,0\n";
        let means = TokenMeans::parse(body, "m").unwrap();
        assert_eq!(means.clients(), 2);
        let c1 = parse_client("1", "0,9,1,Exponential,1,1\n21600,1,1,Exponential,1,1\n").unwrap();
        let c2 = parse_client("2", "0,1,1,Exponential,1,1\n").unwrap();
        let c3 = parse_client("3", "0,10,1,Exponential,1,1\n").unwrap();
        let d = fleet_demand(&[c1, c2, c3], &means);
        assert_eq!(d.windows.len(), 2);
        let w0 = d.windows[0];
        assert_eq!(w0.request_rate, 20.0);
        assert!((w0.prompt_tokens - 190.0).abs() < 1e-9 && (w0.generation_tokens - 20.0).abs() < 1e-9, "{w0:?}");
        // The second window is client 1's alone, with its second six hours' means.
        assert_eq!((d.windows[1].request_rate, d.windows[1].prompt_tokens), (1.0, 300.0));
        assert!((d.imputed_share - 10.0 / 21.0).abs() < 1e-9, "{}", d.imputed_share);
        assert!(TokenMeans::parse("a,b\n", "m").is_err());
    }
}
