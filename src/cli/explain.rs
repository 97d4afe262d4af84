//! `foresight explain WORKLOAD`: the replica shape Foresight derives for a
//! workload, the object each part came from, which pools can host it and
//! why the others cannot, its pending pods, and the nodes a given replica
//! count would warm in each pool. Reads the cluster once (config's
//! `kubernetes:`, or `--kubeconfig`); without either, explains from config.

use std::{io::Write, path::PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use crate::{
    capacity::{self, Demand, Plan, PlanInput},
    cluster::{self, client, Explanation},
    config::Settings,
};

pub(crate) struct ExplainArgs {
    pub(crate) config: PathBuf,
    pub(crate) workload: String,
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) context: Option<String>,
    /// Replicas to plan nodes for; default: the target's desired replicas (else 1).
    pub(crate) replicas: Option<u32>,
    pub(crate) json: bool,
}

#[derive(Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    explanation: &'a Explanation,
    /// Nodes per pool for `replicas` replicas starting from none running.
    prewarm: Option<Prewarm>,
}

#[derive(Serialize)]
struct Prewarm {
    replicas: u32,
    pools: Vec<(String, u32)>,
}

pub(crate) fn run(args: &ExplainArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut settings = Settings::load(&args.config)?;
    if args.kubeconfig.is_some() || args.context.is_some() {
        let mut k = settings.kubernetes.clone().unwrap_or_else(crate::config::default_kube_settings);
        if args.kubeconfig.is_some() {
            k.kubeconfig = args.kubeconfig.clone();
        }
        if args.context.is_some() {
            k.context = args.context.clone();
        }
        settings.kubernetes = Some(k);
    }
    let w = settings
        .workloads
        .iter()
        .find(|w| w.key() == args.workload)
        .or_else(|| {
            let mut named = settings.workloads.iter().filter(|w| w.name == args.workload);
            named.next().filter(|_| named.next().is_none())
        })
        .with_context(|| {
            let known: Vec<String> = settings.workloads.iter().map(|w| w.key()).collect();
            format!(
                "no workload `{}` in {} (known: {}); give namespace/name when a name is in several namespaces",
                args.workload,
                args.config.display(),
                known.join(", ")
            )
        })?
        .clone();

    let view = match &settings.kubernetes {
        None => None,
        Some(k) => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let v = rt.block_on(async {
                let c = client::connect(k).await?;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let snap = client::read(&c, std::slice::from_ref(&w), k, now).await;
                anyhow::Ok(cluster::view(&settings.pools, std::slice::from_ref(&w), k, &snap))
            })?;
            for e in &v.errors {
                eprintln!("warning: {e}");
            }
            Some(v)
        }
    };
    let pools = view.as_ref().map_or(settings.pools.as_slice(), |v| v.pools.as_slice());
    let wv = view.as_ref().and_then(|v| v.workloads.get(&w.key()));
    let replicas = args.replicas.or(wv.and_then(|v| v.replicas).map(|r| r.desired.max(1))).unwrap_or(1);
    let plan = (!pools.is_empty()).then(|| {
        let shape = wv.map_or_else(|| w.config_shape(), |v| v.shape.clone());
        let demands = [Demand { workload: w.key(), shape, replicas: vec![replicas], pod_start_secs: 0.0, running: 0 }];
        capacity::plan(PlanInput {
            now: 0,
            step_secs: 60,
            steps: 1,
            pools,
            reservations: &settings.reservations,
            demands: &demands,
        })
    });
    let e = cluster::explain(&w, view.as_ref(), &settings.pools, plan.as_ref().and_then(|p| p.workloads.first()));
    let prewarm = plan.as_ref().map(|p: &Plan| Prewarm {
        replicas,
        pools: p.pools.iter().filter(|pp| pp.warm_nodes > 0).map(|pp| (pp.name.clone(), pp.warm_nodes)).collect(),
    });
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &Output { explanation: &e, prewarm })?;
        writeln!(out)?;
        return Ok(());
    }
    human(&e, prewarm.as_ref(), view.as_ref(), out)?;
    Ok(())
}

fn human(
    e: &Explanation,
    prewarm: Option<&Prewarm>,
    view: Option<&cluster::ClusterView>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    writeln!(out, "workload {}", e.workload)?;
    if !e.kubernetes {
        writeln!(
            out,
            "  (Kubernetes inputs off: explained from config; add `kubernetes:` to the config or pass --kubeconfig)"
        )?;
    }
    if let Some(so) = &e.scaled_object {
        writeln!(out, "  scaled by   {so}")?;
    }
    if let Some(t) = &e.target {
        writeln!(out, "  target      {t}")?;
    }
    let s = &e.shape;
    writeln!(
        out,
        "  shape       {} GPUs per replica on {} node(s), GPU {}  [{}]",
        s.gpus_per_replica,
        s.nodes_per_replica,
        s.gpu_type,
        serde_json::to_value(e.shape_source).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
    )?;
    if !e.facts.is_empty() {
        writeln!(out, "  derived from:")?;
        let w = e.facts.iter().map(|f| f.what.len()).max().unwrap_or(0);
        let v = e.facts.iter().map(|f| f.value.len()).max().unwrap_or(0);
        for f in &e.facts {
            writeln!(out, "    {:<w$}  {:<v$}  <- {}", f.what, f.value, f.from)?;
        }
    }
    for n in &e.notes {
        writeln!(out, "  note: {n}")?;
    }
    if let Some(r) = e.replicas {
        writeln!(out, "  replicas    desired {}, current {}, ready {}", r.desired, r.current, r.ready)?;
    }
    for p in &e.pending {
        writeln!(out, "  pending     {} {}: {}", p.name, p.reason, p.message)?;
    }
    writeln!(out, "  pools:")?;
    for f in &e.pools {
        match (f.per_node, &f.why_not) {
            (Some(n), _) => writeln!(
                out,
                "    {:<20} can host: {n} per node ({} x {}, NVLink domain {})",
                f.pool, f.gpus_per_node, f.gpu_type, f.nvlink_domain_gpus
            )?,
            (None, why) => writeln!(out, "    {:<20} cannot:   {}", f.pool, why.as_deref().unwrap_or(""))?,
        }
    }
    if let Some(p) = prewarm {
        let pools: Vec<String> = p.pools.iter().map(|(n, k)| format!("{n}: {k} node(s)")).collect();
        writeln!(
            out,
            "  pre-warm for {} replica(s): {}",
            p.replicas,
            if pools.is_empty() { "nothing (no pool can host it)".into() } else { pools.join(", ") }
        )?;
    }
    for d in &e.disagreements {
        writeln!(
            out,
            "  disagreement {} {}: config {} vs cluster {} ({}); using {}",
            d.subject, d.field, d.config, d.cluster, d.from, d.used
        )?;
    }
    if let Some(v) = view {
        for n in &v.notes {
            writeln!(out, "  cluster note: {n}")?;
        }
    }
    writeln!(out, "summary:")?;
    for line in &e.summary {
        writeln!(out, "  - {line}")?;
    }
    Ok(())
}
